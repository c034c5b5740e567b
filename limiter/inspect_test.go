package limiter

import (
	"context"
	"testing"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// TestInspectKeysClientsAsTheLimitsDo: the operator asking about an
// address in any form that embeds an IPv4 address (IPv4-mapped,
// translated, NAT64, IPv4-compatible) sees, and resets, the limits of
// that IPv4 client, as the limits key it (clientip.ClientForm); an IPv6 address
// of its own is its /64.
func TestInspectKeysClientsAsTheLimitsDo(t *testing.T) {
	cfg := config.Default()
	rs := Compile(cfg, nil)
	rr := rs.Route("list_markets")
	for _, tc := range []struct {
		name, charged, asked string
	}{
		{"IPv4 itself", "198.51.100.9", "198.51.100.9"},
		{"IPv4-mapped", "198.51.100.9", "::ffff:198.51.100.9"},
		{"IPv4-translated", "198.51.100.9", "::ffff:0:198.51.100.9"},
		{"NAT64", "198.51.100.9", "64:ff9b::198.51.100.9"},
		{"IPv4-compatible", "198.51.100.9", "::198.51.100.9"},
		{"IPv6 /64", "2001:db8:1:2::7", "2001:db8:1:2::99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, _ := NewKeyer(testSecret)
			e, err := NewEnforcer(EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var d Decision
			for range 3 {
				e.Decide(ctx, rr, Request{Addr: clientip.ClientForm(addr(tc.charged))}, &d)
			}
			remaining := func() int64 {
				states, err := e.Inspect(ctx, rs, Subject{Addr: addr(tc.asked)})
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range states {
					if st.Route == "list_markets" && st.Key == config.KeyAddress {
						return st.Burst - st.Remaining
					}
				}
				t.Fatalf("no address limit of list_markets in %+v", states)
				return 0
			}
			if used := remaining(); used != 3 {
				t.Errorf("inspecting %s: %d of the burst used, want the 3 that %s was charged", tc.asked, used, tc.charged)
			}
			if _, err := e.Reset(ctx, rs, Subject{Addr: addr(tc.asked)}); err != nil {
				t.Fatal(err)
			}
			if used := remaining(); used != 0 {
				t.Errorf("after resetting %s: %d of the burst used, want 0", tc.asked, used)
			}
		})
	}
}
