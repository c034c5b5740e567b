package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// claimStores are the two ways an order's claim is made: "own", the
// limits and the claims in memory, each claim a call of its own after the
// limits; "joined", both in one real redis-server, the claim riding in
// the script run that decides the limits (srv, for counting script runs).
type claimStores struct {
	name string
	srv  *redistest.Server
	lim  ratelimit.Limiter
	idem func(idempotency.Options) idempotency.Store
}

func claimModes(t *testing.T) []claimStores {
	modes := []claimStores{{name: "own", lim: ratelimit.NewMemory(ratelimit.MemoryOptions{}),
		idem: func(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) }}}
	if testing.Short() {
		return modes
	}
	srv := redistest.Start(t)
	rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: time.Second, ClaimFunc: idempotency.ClaimFunc})
	t.Cleanup(func() { _ = rl.Close() })
	return append(modes, claimStores{name: "joined", srv: srv, lim: ratelimit.NewDenyCache(rl, 100, nil),
		idem: func(o idempotency.Options) idempotency.Store {
			o.Timeout = time.Second
			return idempotency.NewRedis(srv.Client(), o)
		}})
}

// TestRefusedClaimChargesNothing: an order (or bulk) answered by its
// claim — a replay, a refused identifier, an account past its share —
// is charged nothing against the order allowance; only a claim that
// takes its identifiers charges, once, whether the claim is a call of
// its own or rides with the limits.
func TestRefusedClaimChargesNothing(t *testing.T) {
	for _, m := range claimModes(t) {
		t.Run(m.name, func(t *testing.T) {
			e := startOrdersWith(t, placedBulk, func(c *config.Config) {
				c.Route("place_order").Limits[0].Rate = config.Rate{N: 20, Period: time.Hour}
				c.Route("place_order").Limits[0].Burst = 20
				c.Idempotency.MaxPerAccount = 9
			}, m.lim, nil, func(o idempotency.Options) idempotency.Store {
				o.MaxPerAccount = 9
				return m.idem(o)
			})
			// Another account's order loads the scripts into Redis
			// (whose first runs are answered NOSCRIPT and sent again).
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(bulkOrder(0, "warm")),
				"Authorization", "Bearer warm", "Content-Type", "application/json")
			res.Body.Close()
			steps := []struct {
				name, path, body string
				status           int
				code, left       string
			}{
				{"an order", "/api/v1/odr/orders/", bulkOrder(0, "a"), 201, "", "19"},
				{"the same order: replayed", "/api/v1/odr/orders/", bulkOrder(0, "a"), 201, "", "19"},
				{"its identifier on another order", "/api/v1/odr/orders/", bulkOrder(1, "a"), 409, "duplicate_identifier", "19"},
				{"a bulk", "/api/v1/odr/orders/bulk/", bulkOf(3, "b"), 201, "", "16"},
				{"the same bulk: replayed", "/api/v1/odr/orders/bulk/", bulkOf(3, "b"), 201, "", "16"},
				{"a bulk reusing an identifier", "/api/v1/odr/orders/bulk/", "[" + bulkOrder(0, "c") + "," + bulkOrder(1, "a") + "]", 409, "duplicate_identifier", "16"},
				{"a bulk past the account's share", "/api/v1/odr/orders/bulk/", bulkOf(6, "d"), 503, "identifier_quota_exceeded", "16"},
				{"an order without an identifier", "/api/v1/odr/orders/", bulkOrder(2, ""), 201, "", "15"},
				{"a bulk that fits the share", "/api/v1/odr/orders/bulk/", bulkOf(5, "d"), 201, "", "10"},
			}
			for _, s := range steps {
				var before map[string]int64
				if m.srv != nil {
					before = m.srv.CommandCalls()
				}
				res := do(t, "POST", e.url+s.path, strings.NewReader(s.body), "Authorization", "Bearer tok", "Content-Type", "application/json")
				if s.code != "" {
					assertError(t, res, s.status, s.code)
				} else {
					res.Body.Close()
					if res.StatusCode != s.status {
						t.Fatalf("%s: %d, want %d", s.name, res.StatusCode, s.status)
					}
				}
				if got := remaining(t, res); got != s.left {
					t.Errorf("%s: %s of the allowance left, want %s", s.name, got, s.left)
				}
				if m.srv == nil || s.status == 409 || s.status == 503 {
					continue
				}
				// One script run decides the limits and the claim, one
				// records the response (none for a replay, or without an
				// identifier).
				after := m.srv.CommandCalls()
				runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
				want := int64(2)
				if res.Header.Get(idempotency.ReplayedHeader) == "true" || s.name == "an order without an identifier" {
					want = 1
				}
				if runs != want {
					t.Errorf("%s: %d script runs, want %d", s.name, runs, want)
				}
			}
		})
	}
}
