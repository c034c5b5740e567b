package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
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
	lim  ratelimit.Store
	idem func(idempotency.Options) idempotency.Store
}

func claimModes(t *testing.T) []claimStores {
	modes := []claimStores{{name: "own", lim: ratelimit.NewMemory(ratelimit.MemoryOptions{}),
		idem: func(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) }}}
	if testing.Short() {
		return modes
	}
	srv := redistest.Start(t)
	rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout, ClaimFunc: idempotency.ClaimFunc})
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
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				// Duplicate answers charge their own allowance
				// (TestDuplicateAnswersThrottled): a large one here, so
				// that the headers tell the order allowance.
				c.Idempotency.DuplicateAnswers = config.DuplicateAnswers{Rate: config.Rate{N: 1000, Period: time.Hour}}
			}, m.lim, nil, func(o idempotency.Options) idempotency.Store {
				o.MaxPerAccount = 9
				return m.idem(o)
			})
			// Another client's order loads the scripts into Redis
			// (whose first runs are answered NOSCRIPT and sent again):
			// another token from another address, whose share it takes.
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(bulkOrder(0, "warm")),
				"Authorization", "Bearer warm", "Content-Type", "application/json", "X-Forwarded-For", "198.51.100.1")
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

// countedStore is a duplicate-protection store that counts its claims.
type countedStore struct {
	idempotency.Store
	claims atomic.Int64
}

func (c *countedStore) ClaimAll(ctx context.Context, account, client string, ids []string, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	c.claims.Add(1)
	return c.Store.ClaimAll(ctx, account, client, ids, fp)
}

// TestDuplicateAnswersThrottled: a client re-sending an order duplicate
// protection answers (a replay, a conflicting identifier) is charged
// nothing in its order limit but is charged its allowance of duplicate
// answers; past it, its orders — identified or not — get 429 throttled,
// named by the allowance in the rate-limit fields, without its claim
// being made or, once refused, any store call (the deny cache answers it
// before its body is read); another account's orders are placed, and the
// order placed first is still placed once.
func TestDuplicateAnswersThrottled(t *testing.T) {
	for _, m := range claimModes(t) {
		t.Run(m.name, func(t *testing.T) {
			var counted *countedStore
			e := startOrdersWith(t, placedBulk, func(c *config.Config) {
				// Room for the first order and one more: an answer
				// charged to it would spend it.
				c.Route("place_order").Limits[0].Rate = config.Rate{N: 2, Period: time.Hour}
				c.Route("place_order").Limits[0].Burst = 2
				c.Idempotency.DuplicateAnswers = config.DuplicateAnswers{Rate: config.Rate{N: 10, Period: time.Hour}}
			}, m.lim, nil, func(o idempotency.Options) idempotency.Store {
				s := m.idem(o)
				if m.srv == nil { // a claim of its own, after the limits: counted here
					counted = &countedStore{Store: s}
					return counted
				}
				return s // a Joiner: its claims ride in the limits' script runs, counted there
			})
			send := func(token, body string) *http.Response {
				return do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body), "Authorization", "Bearer "+token, "Content-Type", "application/json")
			}
			res := send("tok", bulkOrder(0, "a"))
			res.Body.Close()
			if res.StatusCode != 201 {
				t.Fatalf("the first order: %d", res.StatusCode)
			}
			for i := range 10 { // 9 replays and a conflict: the allowance's 10
				body, want := bulkOrder(0, "a"), 201
				if i == 9 {
					body, want = bulkOrder(1, "a"), 409
				}
				res := send("tok", body)
				res.Body.Close()
				if res.StatusCode != want || (want == 201 && res.Header.Get(idempotency.ReplayedHeader) != "true") {
					t.Fatalf("answer %d: %d, want %d (replayed)", i, res.StatusCode, want)
				}
			}
			res = send("tok", bulkOrder(0, "a"))
			assertError(t, res, 429, "throttled")
			if h := res.Header.Get("RateLimit"); !strings.HasPrefix(h, `"`+config.DuplicateAnswersLimit+`";r=0;`) {
				t.Errorf("RateLimit %q, want the allowance of duplicate answers, spent", h)
			}
			if ra, _ := strconv.Atoi(res.Header.Get("Retry-After")); ra < 300 || ra > 360 {
				t.Errorf("Retry-After %q, want about 360 s (10/h)", res.Header.Get("Retry-After"))
			}
			var before map[string]int64
			if m.srv != nil {
				before = m.srv.CommandCalls()
			}
			claims := int64(0)
			if counted != nil {
				claims = counted.claims.Load()
			}
			for i := range 50 { // replays, conflicts and new orders alike
				body := bulkOrder(0, "a")
				switch i % 3 {
				case 1:
					body = bulkOrder(1, "a")
				case 2:
					body = bulkOrder(2, fmt.Sprintf("new-%d", i))
				}
				assertError(t, send("tok", body), 429, "throttled")
			}
			if m.srv != nil {
				after := m.srv.CommandCalls()
				if runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]; runs != 0 {
					t.Errorf("50 orders of a client past its allowance: %d script runs, want 0", runs)
				}
			}
			if counted != nil && counted.claims.Load() != claims {
				t.Errorf("50 orders of a client past its allowance: %d claims made, want 0", counted.claims.Load()-claims)
			}
			res = send("other", bulkOrder(0, "a"))
			res.Body.Close()
			if res.StatusCode != 201 || res.Header.Get(idempotency.ReplayedHeader) != "" {
				t.Errorf("another account's order: %d, replayed %q; want placed", res.StatusCode, res.Header.Get(idempotency.ReplayedHeader))
			}
			if n := e.backend.count(); n != 2 {
				t.Errorf("the backend received %d orders, want 2: each placed once", n)
			}
		})
	}
}
