package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
)

// TestBulkAboveBurst: a bulk of more orders than the burst of a limit it
// is charged against can never pass, so it is not told to wait (429 with
// a Retry-After no wait would honour) but refused as too large (413
// bulk_exceeds_limit, no Retry-After) with the size to split it into. It
// charges nothing, never reaches the backend, is counted by route, limit
// and decision, and logged with the decision — alike on the memory and
// the Redis store.
func TestBulkAboveBurst(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T) ratelimit.Store
	}{{"memory", func(*testing.T) ratelimit.Store { return ratelimit.NewMemory(ratelimit.MemoryOptions{}) }}}
	if !testing.Short() {
		stores = append(stores, struct {
			name  string
			store func(t *testing.T) ratelimit.Store
		}{"redis", func(t *testing.T) ratelimit.Store {
			rl := newTestRedisLimits(t)
			t.Cleanup(func() { _ = rl.Close() })
			return rl
		}})
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, _ := metrics.New(reg, metrics.BuildInfo{})
			e := startOrdersStore(t, placedBulk, nil, func(c *config.Config) {
				c.Validation.Bulk.MaxOrders = 20
				c.Route("place_order").Limits[0].Rate = config.Rate{N: 100, Period: time.Hour}
				c.Route("place_order").Limits[0].Burst = 5
				c.Route("cancel_order").Limits[0].Rate = config.Rate{N: 3, Period: time.Hour}
				c.Route("cancel_order").Limits[0].Burst = 3
				// Tokens of the pro tier place bulks of up to 20; the
				// test's token is in no tier.
				c.TokensFile = "tokens.yaml"
				pro := config.TierLimit{Rate: config.Rate{N: 100, Period: time.Hour}, Burst: 20}
				c.Tiers = map[string]map[string]config.TierLimit{"pro": {"place_order": pro, "cancel_order": pro}}
			}, st.store(t), m)
			for _, tc := range []struct {
				body, want string
			}{
				{bulkOf(6, ""), "it carries 6 orders, more than your rate limit lets pass at once (5), so it can never be accepted at this size; send it as bulks of at most 5 orders."},
				{bulkOf(20, ""), "it carries 20 orders, more than your rate limit lets pass at once (5), so it can never be accepted at this size; send it as bulks of at most 5 orders."},
				{`[1,2,3,4]`, "it carries 4 order ids, more than your rate limit lets pass at once (3), so it can never be accepted at this size; send it as bulks of at most 3 order ids."},
			} {
				res := postBulk(t, e, tc.body)
				er := assertError(t, res, http.StatusRequestEntityTooLarge, CodeBulkExceedsLimit)
				if want := "Bulk refused whole: " + tc.want; er.Detail != want {
					t.Errorf("detail %q, want %q", er.Detail, want)
				}
				if len(er.Fields["non_field_errors"]) != 1 {
					t.Errorf("fields %v", er.Fields)
				}
				for _, h := range []string{"Retry-After", "RateLimit", "X-RateLimit-Reset"} {
					if v := res.Header.Get(h); v != "" {
						t.Errorf("%s: %q on a refusal no wait lifts", h, v)
					}
				}
			}
			if n := e.backend.count(); n != 0 {
				t.Fatalf("a bulk above the burst reached the backend (%d requests)", n)
			}
			// Nothing was charged: the largest bulk that fits passes whole.
			res := postBulk(t, e, bulkOf(5, ""))
			res.Body.Close()
			if res.StatusCode != 201 || remaining(t, res) != "0" {
				t.Fatalf("bulk of 5 after the refusals: %d, remaining %s; want 201 and 0", res.StatusCode, remaining(t, res))
			}
			// Spent, the next bulk that fits is told to wait, as ever.
			res = postBulk(t, e, bulkOf(2, ""))
			assertError(t, res, http.StatusTooManyRequests, "throttled")
			if ra := res.Header.Get("Retry-After"); ra == "" || len(ra) > 4 {
				t.Errorf("Retry-After %q for a bulk that fits once the allowance refills", ra)
			}

			// Counted by route, limit and decision; only the
			// exceeds_burst series are compared.
			if got := exceedsBurstSeries(t, reg); got != "cancel_order/token/default=1 place_order/token/default=2" {
				t.Errorf("exceeds_burst decisions %q", got)
			}
			if logged := checkExceedsBurstLogged(t, e.logs); logged != 3 {
				t.Errorf("%d access log lines of a 413, want 3", logged)
			}
		})
	}
}

// exceedsBurstSeries returns the rate-limit decision series of reg whose
// decision is exceeds_burst and whose count is not zero, as
// route/limit/tier=count separated by spaces.
func exceedsBurstSeries(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range got {
		if mf.GetName() != metrics.NameRateLimitDecision {
			continue
		}
		for _, mm := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mm.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["decision"] == "exceeds_burst" && mm.GetCounter().GetValue() > 0 {
				lines = append(lines, fmt.Sprintf("%s/%s/%s=%v", labels["route"], labels["limit"], labels["tier"], mm.GetCounter().GetValue()))
			}
		}
	}
	return strings.Join(lines, " ")
}

// checkExceedsBurstLogged checks the access log lines of the 413 answers in
// logs, which must tell the exceeds_burst decision of the token limit and
// its largest cost, and returns how many there are.
func checkExceedsBurstLogged(t *testing.T, logs *observer.ObservedLogs) int {
	t.Helper()
	var logged int
	for _, l := range logs.FilterMessage("request").All() {
		f := l.ContextMap()
		if f["status"] == int64(413) {
			logged++
			if f["limit_decision"] != "exceeds_burst" || f["limit"] != "token" || f["limit_max_cost"] == nil {
				t.Errorf("access log %v", f)
			}
		}
	}
	return logged
}
