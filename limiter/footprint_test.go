package limiter

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestRedisSizingAsDocumented measures what the limits cost a real
// redis-server (MEMORY USAGE) and holds docs/limits.md's sizing figures to
// it, within 15%: the bytes of a token's key and of an address's, the
// example fleet's total, and a token-spray set's bytes per address and
// per token.
func TestRedisSizingAsDocumented(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	doc, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	stated := func(re string) float64 {
		m := regexp.MustCompile(strings.ReplaceAll(re, " ", `\s+`)).FindSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/limits.md no longer says %s", re)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	tokenKey := stated(`about (\d+) bytes for a token's or account's key`)
	addrKey := stated(`(\d+) for an address's`)
	example := stated(`within a day on one market list is roughly (\d+) MB`)
	sprayBase := stated(`Token-spray sets add about (\d+) bytes per address`)
	sprayToken := stated(`bytes per address plus (\d+) per token`)

	srv := redistest.Start(t)
	// The default routes' names and keys, at rates whose buckets stay
	// until the test has measured them (a key expires once its bucket is
	// full again); the key names have the defaults' lengths within a
	// byte or two.
	cfg := mustLoad(t, `
routes:
  - { name: place_order, match: POST /o/, auth: required, limits: [{ key: token, rate: 1000/24h }] }
  - { name: list_markets, match: GET /m/, auth: optional, limits: [{ key: address, when: anonymous, rate: 10000/24h }, { key: token, when: token, rate: 1000/24h }] }
`)
	client, err := NewRedisClient(config.Redis{Addrs: []string{srv.Addr}, Timeout: testStoreTimeout}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	k, _ := NewKeyer(testSecret)
	e, err := NewEnforcer(EnforcerOptions{Store: ratelimit.NewRedis(client, ratelimit.RedisOptions{Timeout: testStoreTimeout}), Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	rs := Compile(cfg, nil)
	ctx := context.Background()
	usage := func(key string) float64 {
		v, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil || v == nil {
			t.Fatalf("MEMORY USAGE %s: %v %v", key, v, err)
		}
		return float64(v.(int64))
	}
	keysLike := func(pattern string) []string {
		v, err := srv.Do("KEYS", pattern)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range v.([]any) {
			out = append(out, k.(string))
		}
		return out
	}
	var d Decision
	tok, addr := netip.MustParseAddr("198.51.100.23"), netip.MustParseAddr("203.0.113.187")
	e.Decide(ctx, rs.Route("place_order"), Request{Token: "a-token", Addr: tok}, &d)
	e.Decide(ctx, rs.Route("list_markets"), Request{Addr: addr}, &d)
	tokenKeys, addrKeys := keysLike("rate:*place_order*:t:*"), keysLike("rate:*list_markets*:a:*")
	if len(tokenKeys) != 1 || len(addrKeys) != 1 {
		t.Fatalf("token keys %v, address keys %v", tokenKeys, addrKeys)
	}
	gotToken, gotAddr := usage(tokenKeys[0]), usage(addrKeys[0])
	// One address presenting 1, then 20 tokens: its spray set.
	spray := netip.MustParseAddr("192.0.2.201")
	e.Decide(ctx, rs.Route("list_markets"), Request{Token: "spray-0", Addr: spray}, &d)
	sets := keysLike("exgate:spray:192.0.2.201*")
	if len(sets) != 1 {
		t.Fatalf("spray sets %v", sets)
	}
	one := usage(sets[0])
	for i := 1; i < 20; i++ {
		e.Decide(ctx, rs.Route("list_markets"), Request{Token: fmt.Sprintf("spray-%d", i), Addr: spray}, &d)
	}
	perToken := (usage(sets[0]) - one) / 19
	t.Logf("MEMORY USAGE: token key %.0f B, address key %.0f B; spray set of 1 token %.0f B, %.0f B per further token", gotToken, gotAddr, one, perToken)

	for _, c := range []struct {
		what        string
		stated, got float64
	}{
		{"a token's key, bytes", tokenKey, gotToken},
		{"an address's key, bytes", addrKey, gotAddr},
		{"100,000 token keys and 1,000,000 address keys, MB", example, (1e5*gotToken + 1e6*gotAddr) / 1e6},
		{"a spray set, bytes per address", sprayBase, one - perToken},
		{"a spray set, bytes per token", sprayToken, perToken},
	} {
		if math.Abs(c.got-c.stated) > 0.15*c.got {
			t.Errorf("docs/limits.md: %s: %.0f; measured %.0f", c.what, c.stated, c.got)
		}
	}
}
