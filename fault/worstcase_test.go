package fault

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// footprint is what Redis holds, by kind of key: count and bytes (MEMORY
// USAGE, exact).
type footprint map[string][2]int64

// redisFootprint sorts every key by kind: exgate:spray: sets,
// exgate:idem: duplicate protection, and rate-limit keys by what they
// count (":t:" a token, ":a:" an address, ":s:" the shared bucket of an
// address's excess tokens, anything else "other").
func redisFootprint(t *testing.T, srv *redistest.Server) footprint {
	t.Helper()
	f := footprint{}
	cursor := "0"
	for {
		v, err := srv.Do("SCAN", cursor, "COUNT", 1000)
		if err != nil {
			t.Fatal(err)
		}
		page := v.([]any)
		cursor = page[0].(string)
		for _, k := range page[1].([]any) {
			key := k.(string)
			n, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
			if errors.Is(err, redis.Nil) {
				continue // expired since SCAN listed it: no longer held
			}
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", key, err)
			}
			kind := "other"
			switch {
			case strings.HasPrefix(key, "exgate:spray:"):
				kind = "spray"
			case strings.HasPrefix(key, "exgate:idem:"):
				kind = "idem"
			case strings.Contains(key, ":t:"):
				kind = "token"
			case strings.Contains(key, ":a:"):
				kind = "address"
			case strings.Contains(key, ":s:"):
				kind = "excess"
			}
			c := f[kind]
			f[kind] = [2]int64{c[0] + 1, c[1] + n.(int64)}
			all := f["all"]
			f["all"] = [2]int64{all[0] + 1, all[1] + n.(int64)}
		}
		if cursor == "0" {
			return f
		}
	}
}

// TestWorstCasePerAddress is one attacking address doing, against the
// real exgate with Redis and the reference backend in their default
// configuration, everything that makes exgate or Redis hold state: 500
// invented tokens, each on the market lists and placing an order with a
// fresh identifier, plus anonymous requests on every route. It measures
// what is left held: Redis keys and bytes by kind, and exgate's heap; and
// holds them to the bounds docs/limits.md ("What one address can make
// exgate hold") derives for any number of tokens and requests.
func TestWorstCasePerAddress(t *testing.T) {
	const tokens = 500
	srv := redistest.Start(t)
	be := startBackend(t)
	g := startGateway(t, configHeader(be.url)+fmt.Sprintf(`limiter:
  redis:
    addrs: [%q]
    timeout: 500ms
admin:
  pprof: true
`, srv.Addr))
	// The heap live after a collection (a heap profile with gc=1 runs
	// one; go_gc_heap_live_bytes is what it marked): what exgate holds,
	// neither garbage it has yet to collect nor spans left part used
	// (go_memstats_heap_inuse_bytes, which the scrape's own allocations
	// and fragmentation move by a megabyte with the machine's load).
	// Two collections: what sync.Pools hold survives the first in their
	// victim caches (the connections' and requests' pooled buffers), and
	// would count as held. Each profile is read whole, so that its
	// handler has ended before the next collection: closed unread, the
	// connection ended while runtime/pprof still built the profile, and
	// its gzip writer (compress/flate's compressor) and builder, 1.2 MiB,
	// were live at the next collection now and then (12 of 48 reads in 8
	// runs beside stress-ng, every run; once all three after the attack,
	// +1.5 MiB against the 2 MiB bound; 0 of 90 in 15 runs read whole).
	// The least of three reads: what exgate holds is in every one.
	heapHeld := func() float64 {
		var samples []float64
		for range 3 {
			for range 2 {
				res, err := noKeepAlive().Get(g.admin + "/debug/pprof/heap?gc=1")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body) // until the handler has ended
				res.Body.Close()
			}
			samples = append(samples, g.metric(t, "go_gc_heap_live_bytes"))
		}
		t.Logf("heap samples %v", samples)
		return slices.Min(samples)
	}
	baseHeap := heapHeld()
	c := newClient(t, 8)
	var ty tally
	for i := range tokens {
		tok := fmt.Sprintf("invented-%04d", i)
		ty.add(do(c, get(g.url+"/api/v1/mkt/markets/", "Authorization", "Bearer "+tok)))
		ty.add(do(c, get(g.url+"/api/v1/mkt/currencies/", "Authorization", "Bearer "+tok)))
		req, _ := http.NewRequest(http.MethodPost, g.url+"/api/v1/odr/orders/",
			strings.NewReader(fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"spray-%d"}`, i)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		ty.add(do(c, req))
	}
	for range 100 {
		ty.add(do(c, get(g.url+"/api/v1/mkt/markets/")))
		ty.add(do(c, get(g.url+"/api/v1/mth/matches/BTC_USDT/")))
		req, _ := http.NewRequest(http.MethodPost, g.url+"/api/v1/usr/refresh_token/", strings.NewReader(`{"refresh":"invented"}`))
		req.Header.Set("Content-Type", "application/json")
		ty.add(do(c, req))
	}
	if ty.nErrs > 0 {
		t.Fatalf("answers outside exgate's shape: %s", &ty)
	}
	heap := heapHeld()

	f := redisFootprint(t, srv)
	t.Logf("one address, %d invented tokens, %d requests: %s", tokens, ty.total, &ty)
	t.Logf("Redis (keys, bytes): token keys %v, address keys %v, excess-token buckets %v, spray sets %v, duplicate protection %v, other %v; all %v",
		f["token"], f["address"], f["excess"], f["spray"], f["idem"], f["other"], f["all"])
	t.Logf("exgate heap live after a collection %.2f MiB → %.2f MiB", baseHeap/(1<<20), heap/(1<<20))

	// The bounds of docs/limits.md for the default table, whatever the
	// number of tokens: 20 admitted tokens × 3 token-keyed limits
	// (list_markets, list_currencies, place_order); one key per
	// address-keyed limit and per shared bucket of demoted tokens; one
	// spray set; no duplicate-protection key, since the backend refused
	// every order (401) and a refused order releases its identifier.
	for _, c := range []struct {
		kind string
		max  int64
	}{{"token", 20 * 3}, {"address", 8}, {"excess", 8}, {"spray", 1}, {"idem", 0}, {"other", 0}} {
		if n := f[c.kind][0]; n > c.max {
			t.Errorf("%d %s keys, want at most %d whatever the number of tokens", n, c.kind, c.max)
		}
	}
	if f["all"][1] > 16<<10 {
		t.Errorf("Redis holds %d B for one address, want at most 16 KiB", f["all"][1])
	}
	if grew := heap - baseHeap; grew > 2<<20 {
		t.Errorf("exgate's live heap (after a collection) grew by %.1f MiB, want at most 2 MiB", grew/(1<<20))
	}
}
