package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestLostClaimFreedWhenLimitsFail: an order whose claim rides with its
// limits in a round trip Redis ran but whose reply never came back is
// refused — by on_store_error: closed (503 rate_limit_unavailable), or,
// when open lets it pass, for want of its claim (503
// duplicate_protection_unavailable) — and never sent; the claim the run
// took is freed, so that the client's retry with the same identifier is
// placed, once. Before, under closed, the claim stayed: the retry got 409
// request_in_progress and then outcome_unknown, for an order never sent.
func TestLostClaimFreedWhenLimitsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := redistest.Start(t)
	for _, tc := range []struct {
		mode, code string
	}{
		{config.StoreClosed, "rate_limit_unavailable"},
		{config.StoreOpen, "duplicate_protection_unavailable"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := &redistest.LostReply{}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			c.AddHook(h)
			t.Cleanup(func() { _ = c.Close() })
			rl := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: testStoreTimeout, ClaimFunc: idempotency.ClaimFunc})
			t.Cleanup(func() { _ = rl.Close() })
			var calls atomic.Int64
			reports := make(chan idempotency.Background, 4)
			e := startOrdersWith(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				placed(w, r)
			}, func(cfg *config.Config) {
				cfg.Route("place_order").OnStoreError = tc.mode
			}, rl, nil, func(o idempotency.Options) idempotency.Store {
				o.Timeout, o.KeyPrefix = time.Second, "lost-"+tc.mode+":"
				o.Report = func(b idempotency.Background) { reports <- b }
				return idempotency.NewRedis(c, o)
			})
			order := func(id string) *http.Response {
				return postOrder(t, e, `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"`+id+`"}`)
			}
			res := order("warm") // the scripts are loaded
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("first order: %d", res.StatusCode)
			}
			h.Arm()
			lost := order("lost")
			id := lost.Header.Get("X-Request-Id")
			assertError(t, lost, http.StatusServiceUnavailable, tc.code)
			// The claim is freed in the background; the bound only ends a
			// wait for a claim never freed.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				keys, err := c.Keys(context.Background(), "lost-"+tc.mode+":{*}lost").Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(keys) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the claim of the order refused after its round trip's reply was lost is still held: %v", keys)
				}
			}
			// The free is reported, naming the order's request; the bound
			// only ends a wait for a report never made.
			select {
			case b := <-reports:
				if b.Work != idempotency.WorkFree || b.RequestID != id || b.Err != nil {
					t.Errorf("reported %+v, want the free done, for request %q", b, id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the free was not reported")
			}
			// The retry, once the limiter no longer fails fast.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				res := order("lost")
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), `"rate_limit_unavailable"`) && time.Now().Before(deadline) {
					continue
				}
				if res.StatusCode != http.StatusCreated || res.Header.Get(idempotency.ReplayedHeader) != "" {
					t.Fatalf("the retry: %d %s, want 201, placed", res.StatusCode, b)
				}
				break
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("backend called %d times, want 2 (the first order and the retry)", n)
			}
		})
	}
}

// TestLostRunChargeGivenBack: the limits' charge of an order whose
// round trip's reply was lost, refused 503, is given back once the free
// of its claim proves that Redis ran the run (it found the claim its
// holder took, which runs only after the limits let the order pass), and
// only then: a lost reply alone does not say whether the run reached
// Redis, and giving back a charge never made would let the client past
// its limit. Before, the run's charge stood and the retry was charged
// again: the client paid one request of its allowance for the reply
// exgate lost (docs/limits.md, "A lost reply's charge is given back on proof").
func TestLostRunChargeGivenBack(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	for _, tc := range []struct {
		name string
		lost *redistest.LostReply
		// placed is how many new orders are placed after the retry before
		// the limit (burst 4) refuses one: 4 less the warm order and the
		// retry, the lost run's charge given back or never made.
		placed int
	}{
		{"the run ran, its reply lost", &redistest.LostReply{}, 2},
		{"the run never reached Redis", &redistest.LostReply{Unsent: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			c.AddHook(tc.lost)
			t.Cleanup(func() { _ = c.Close() })
			rl := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: testStoreTimeout, ClaimFunc: idempotency.ClaimFunc})
			t.Cleanup(func() { _ = rl.Close() })
			var s *idempotency.Redis
			e := startOrdersWith(t, placed, func(cfg *config.Config) {
				r := cfg.Route("place_order")
				r.OnStoreError = config.StoreClosed
				r.Limits[0].Rate, r.Limits[0].Burst = config.Rate{N: 4, Period: 24 * time.Hour}, 4
			}, rl, nil, func(o idempotency.Options) idempotency.Store {
				o.Timeout = time.Second
				s = idempotency.NewRedis(c, o)
				return s
			})
			order := func(id string) (int, string) {
				res := postOrder(t, e, `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"`+id+`"}`)
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				return res.StatusCode, string(b)
			}
			if status, b := order("warm"); status != http.StatusCreated { // the scripts are loaded
				t.Fatalf("first order: %d %s", status, b)
			}
			tc.lost.Arm()
			if status, b := order("lost"); status != http.StatusServiceUnavailable || !strings.Contains(b, `"rate_limit_unavailable"`) {
				t.Fatalf("the order whose round trip's reply was lost: %d %s, want 503 rate_limit_unavailable", status, b)
			}
			s.Wait() // its claim's free, and the give-back, if any
			// The retry, once the limiter no longer fails fast; then new
			// orders until the limit refuses one.
			var answers []int
			for deadline := time.Now().Add(10 * time.Second); len(answers) == 0 || answers[len(answers)-1] == http.StatusCreated; {
				id := "lost"
				if len(answers) > 0 {
					id = "new" + strconv.Itoa(len(answers))
				}
				status, b := order(id)
				if status == http.StatusServiceUnavailable && strings.Contains(b, `"rate_limit_unavailable"`) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				answers = append(answers, status)
			}
			want := []int{http.StatusCreated}
			for range tc.placed {
				want = append(want, http.StatusCreated)
			}
			if want = append(want, http.StatusTooManyRequests); !slices.Equal(answers, want) {
				t.Errorf("the retry, then new orders: %v, want %v", answers, want)
			}
		})
	}
}
