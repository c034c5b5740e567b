package proxy

import (
	"io"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/topk"
)

// TestConsoleTopCountsAddressesAsLimited: the operator console's lists of
// client addresses count a client as the limits do, an IPv6 client as its
// client_ip.ipv6_prefix group. Before, they counted each IPv6 address:
// a client cycling through its own /64 was refused as one client and
// listed as forty, each with one request, so that "who is being
// throttled" showed a client ten times lighter first and the one
// throttled nowhere.
func TestConsoleTopCountsAddressesAsLimited(t *testing.T) {
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Limiter.Store = config.StoreMemory
	cfg.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
	smallMatches(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	enf, err := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	top := topk.NewTracker(topk.TrackerOptions{})
	e := serve(t, cfg, be, Options{Limits: enf, Rules: limiter.Compile(cfg, nil), Top: top})
	ask := func(client string) {
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil, "X-Forwarded-For", client)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	for i := range 40 { // one /64, forty addresses
		ask("2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16))
	}
	for range 10 {
		ask("198.51.100.7")
	}
	routes := top.Top(1, 10)
	if len(routes) != 1 {
		t.Fatalf("%d routes counted, want list_matches alone", len(routes))
	}
	group := netip.MustParseAddr("2001:db8:1:2::")
	for _, tc := range []struct {
		name    string
		entries []topk.Entry[netip.Addr]
		want    int64 // the /64's count
	}{
		{"by requests", routes[0].AddrsByRequests, 40},
		{"by refusals", routes[0].AddrsByRefused, 37}, // 3 a minute per client
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.entries) == 0 || tc.entries[0].Key != group || tc.entries[0].Count != tc.want {
				t.Fatalf("addresses %v, want %s first with %d", tc.entries, group, tc.want)
			}
			for _, en := range tc.entries[1:] {
				if en.Key.Is6() {
					t.Errorf("%s listed apart from its /64", en.Key)
				}
			}
		})
	}
}
