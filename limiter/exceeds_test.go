package limiter

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestCostAboveBurstNeverPasses: a request whose cost (a bulk's orders) is
// above the burst of a limit that applies can never pass at that size. The
// decision says so distinctly (ExceedsBurst, with the largest cost every
// limit lets pass, and no wait), charges nothing and sets no rate-limit
// field from the refusing limit — alike on the memory and the Redis store.
// A smaller tier burst is what counts for a token in that tier, and a
// shadow limit's burst refuses nothing.
func TestCostAboveBurstNeverPasses(t *testing.T) {
	cfg := mustLoad(t, `
tokens_file: tokens.yaml
tiers: { small: { r: { rate: 4/1h } } }
routes:
  - name: r
    match: /r/
    auth: required
    limits:
      - { name: hourly, key: token, rate: 10/1h }
      - { name: minute, key: token, rate: 100/1m, burst: 8 }
      - { name: watch, key: token, rate: 2/1h, shadow: true }
`)
	stores := []struct {
		name  string
		store func() ratelimit.Store
	}{{"memory", func() ratelimit.Store { return nil }}}
	if !testing.Short() {
		srv := redistest.Start(t)
		rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		stores = append(stores, struct {
			name  string
			store func() ratelimit.Store
		}{"redis", func() ratelimit.Store { return rl }})
	}
	cases := []struct {
		tier    string
		cost    int64
		exceeds bool
		maxCost int64
		limit   string // the refusing limit
	}{
		{"", 8, false, 0, ""},
		{"", 9, true, 8, "minute"},
		{"", 1000, true, 8, "hourly"}, // the first that refuses; the smallest burst counts
		{"small", 4, false, 0, ""},
		{"small", 5, true, 4, "hourly"},
	}
	for _, st := range stores {
		for i, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s/%d", st.name, tc.tier, tc.cost), func(t *testing.T) {
				tokens := map[string]string{}
				k, _ := NewKeyer(testSecret)
				token := fmt.Sprintf("tok-%s-%d", st.name, i)
				if tc.tier != "" {
					tokens[k.ID(token)] = tc.tier
				}
				rr := Compile(cfg, tokens).Route("r")
				e := newTestEnforcer(t, st.store(), newFakeClock())
				req := Request{Token: token, Addr: addr("198.51.100.9"), Cost: tc.cost}
				var d Decision
				e.Decide(context.Background(), rr, req, &d)
				if d.ExceedsBurst != tc.exceeds || d.MaxCost != tc.maxCost || d.Allowed == tc.exceeds {
					t.Fatalf("cost %d: allowed %v, exceeds burst %v, max cost %d; want exceeds %v, max %d",
						tc.cost, d.Allowed, d.ExceedsBurst, d.MaxCost, tc.exceeds, tc.maxCost)
				}
				if !tc.exceeds {
					return
				}
				o := d.Outcomes[d.N-1]
				if d.RetryAfter != 0 || d.Unavailable || d.TooManyTokens || o.Decision != ExceedsBurst || o.Limit != tc.limit {
					t.Errorf("decision %+v, refusing outcome %+v", d, o)
				}
				h := http.Header{}
				d.SetHeaders(h, config.HeadersIETF)
				if v := h.Get("RateLimit"); v != "" && (o.Limit == "hourly" || len(v) > 40) {
					t.Errorf("RateLimit %q reports the limit no wait lifts", v)
				}
				// Nothing was charged: the largest cost passes whole.
				req.Cost = tc.maxCost
				e.Decide(context.Background(), rr, req, &d)
				if !d.Allowed {
					t.Errorf("cost %d after the refusal: refused %+v (the refusal charged something)", tc.maxCost, d)
				}
			})
		}
	}
}

// TestCostAboveLocalShareWaitsForStore: under on_store_error: local each
// replica decides with its share of a limit; a cost above the share but
// within the shared burst is not "never" — it is refused as the store
// being unavailable, while one above the shared burst still exceeds it.
func TestCostAboveLocalShareWaitsForStore(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { replicas: 4, on_store_error: local }
routes:
  - name: r
    match: /r/
    auth: required
    limits: [ { key: token, rate: 20/1h } ]
`)
	rr := Compile(cfg, nil).Route("r")
	e := newTestEnforcer(t, failing{}, newFakeClock())
	for _, tc := range []struct {
		cost                 int64
		allowed, unavailable bool
		exceeds              bool
	}{
		{5, true, false, false},  // the share: 20 / 4
		{6, false, true, false},  // over the share, within the burst
		{21, false, false, true}, // over the burst itself
	} {
		var d Decision
		e.Decide(context.Background(), rr, Request{Token: fmt.Sprint("t", tc.cost), Cost: tc.cost}, &d)
		if d.Allowed != tc.allowed || d.Unavailable != tc.unavailable || d.ExceedsBurst != tc.exceeds {
			t.Errorf("cost %d: %+v", tc.cost, d)
		}
		if tc.exceeds && d.MaxCost != 20 {
			t.Errorf("cost %d: max cost %d, want the shared burst 20", tc.cost, d.MaxCost)
		}
	}
}

// TestWaitsClamped: no Retry-After or rate-limit field is ever above
// MaxWaitSeconds, whatever the limit (a period of 366 days with a burst
// far above the rate) or the cost.
func TestWaitsClamped(t *testing.T) {
	cfg := mustLoad(t, `
routes:
  - name: r
    match: /r/
    auth: required
    limits: [ { key: token, rate: 1/366d, burst: 1000 } ]
`)
	rr := Compile(cfg, nil).Route("r")
	e := newTestEnforcer(t, nil, newFakeClock())
	req := Request{Token: "t", Cost: 1000}
	var d Decision
	e.Decide(context.Background(), rr, req, &d)
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if want := fmt.Sprintf(`"token";q=1000;w=%d`, MaxWaitSeconds); !d.Allowed || h.Get("RateLimit-Policy") != want {
		t.Fatalf("allowed %v, policy %q; want %q", d.Allowed, h.Get("RateLimit-Policy"), want)
	}
	if want := fmt.Sprintf(`"token";r=0;t=%d`, MaxWaitSeconds); h.Get("RateLimit") != want {
		t.Errorf("RateLimit %q, want %q (1000 × 366 days, clamped)", h.Get("RateLimit"), want)
	}
	req.Cost = 500
	e.Decide(context.Background(), rr, req, &d)
	if d.Allowed || d.ExceedsBurst || Seconds(d.RetryAfter) != MaxWaitSeconds {
		t.Errorf("denied: %+v, Retry-After %d", d, Seconds(d.RetryAfter))
	}
	h = http.Header{}
	d.SetHeaders(h, config.HeadersLegacy)
	if got := h.Get("X-RateLimit-Reset"); got != fmt.Sprint(MaxWaitSeconds) {
		t.Errorf("X-RateLimit-Reset %q", got)
	}
}
