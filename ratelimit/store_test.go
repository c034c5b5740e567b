package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/fakeclock"
	"github.com/exgate/exgate/internal/redistest"
)

// newFakeClock returns a clock standing still until a test advances it.
func newFakeClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_800_000_000, 0)) }

// impl is one Store under the shared table: how to decide a request of
// cost n, and how to let time pass (a fake clock for the memory limiter,
// a real sleep for Redis, whose clock is its own). slack is how far the
// durations it reports may drift from the exact values because real time
// passes between calls.
type impl struct {
	name    string
	allowN  func(key string, l Limit, n int64) (Result, error)
	refund  func(key string, l Limit, n int64) error
	advance func(time.Duration)
	slack   time.Duration
}

// refunder returns an impl's refund of cost n on one key under l.
func refunder(lim Store) func(string, Limit, int64) error {
	return func(k string, l Limit, n int64) error {
		return lim.Refund(context.Background(), &Request{Checks: []Check{{Key: k, Limit: l}}, Cost: n})
	}
}

// impls returns every implementation the shared table runs against:
// memory and Redis (standalone and Cluster), each also behind a deny
// cache, which must not change any decision.
func impls(t *testing.T) []impl {
	var out []impl

	clock := newFakeClock()
	mem := NewMemory(MemoryOptions{Now: clock.Now, MaxKeys: 10000})
	out = append(out, impl{
		name:    "memory",
		allowN:  func(k string, l Limit, n int64) (Result, error) { return mem.AllowN(context.Background(), k, l, n) },
		refund:  refunder(mem),
		advance: clock.Advance,
	})
	memCached := NewDenyCache(mem, 1000, clock.Now)
	out = append(out, impl{
		name: "memory+denycache",
		allowN: func(k string, l Limit, n int64) (Result, error) {
			return memCached.AllowN(context.Background(), k, l, n)
		},
		refund:  refunder(memCached),
		advance: clock.Advance,
	})

	if testing.Short() {
		return out
	}
	srv := redistest.Start(t)
	rl := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
	t.Cleanup(func() { _ = rl.Close() })
	sleep := func(d time.Duration) { time.Sleep(d) }
	redisAllow := func(r *Redis) func(string, Limit, int64) (Result, error) {
		return func(k string, l Limit, n int64) (Result, error) {
			return r.AllowN(context.Background(), k, l, n)
		}
	}
	out = append(out, impl{name: "redis", allowN: redisAllow(rl), refund: refunder(rl), advance: sleep, slack: 60 * time.Millisecond})
	cached := NewDenyCache(rl, 1000, nil)
	out = append(out, impl{
		name: "redis+denycache",
		allowN: func(k string, l Limit, n int64) (Result, error) {
			return cached.AllowN(context.Background(), k, l, n)
		},
		refund:  refunder(cached),
		advance: sleep, slack: 60 * time.Millisecond,
	})

	cl := redistest.StartCluster(t, 3)
	crl := NewRedis(cl.Client(t), RedisOptions{Timeout: testStoreTimeout})
	t.Cleanup(func() { _ = crl.Close() })
	out = append(out, impl{name: "redis-cluster", allowN: redisAllow(crl), refund: refunder(crl), advance: sleep, slack: 60 * time.Millisecond})
	return out
}

// approx fails unless got is within [want-slack, want+slack].
func approx(t *testing.T, what string, got, want, slack time.Duration) {
	t.Helper()
	if got < want-slack || got > want+slack {
		t.Errorf("%s = %v, want %v (±%v)", what, got, want, slack)
	}
}

// step is one request of the shared table and what it must yield, or a
// refund of what an allowed request was charged.
type step struct {
	advance    time.Duration // time passing before the request
	refund     int64         // > 0: the step gives back this cost instead of deciding
	n          int64         // cost; 0 means 1
	allowed    bool
	remaining  int64
	retryAfter time.Duration // checked when not allowed (Never exactly)
	resetAfter time.Duration // checked when >= 0; -1 skips
}

// The limits of TestStoreTable.
var (
	// storeFive is 5 per 2s: one request every 400ms, bursts of 5.
	storeFive = Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}
	// storeBursty is 1 per second with a burst of 3.
	storeBursty = Limit{Rate: 1, Period: time.Second, Burst: 3}
	// storeHourly is 3600 per hour, burst 100: the spec's kind of limit.
	storeHourly = Limit{Rate: 3600, Period: time.Hour, Burst: 100}
)

// ms is a millisecond, the unit of TestStoreTable's durations.
const ms = time.Millisecond

// storeCase is a sequence of steps on one key of a store.
type storeCase struct {
	name  string
	limit Limit
	steps []step
}

// storeCases is TestStoreTable's table.
var storeCases = []storeCase{
	{"burst then deny", storeFive, []step{
		{allowed: true, remaining: 4, resetAfter: 400 * ms},
		{allowed: true, remaining: 3, resetAfter: 800 * ms},
		{allowed: true, remaining: 2, resetAfter: 1200 * ms},
		{allowed: true, remaining: 1, resetAfter: 1600 * ms},
		{allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
	}},
	{"refill one interval", storeFive, []step{
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
		{advance: 500 * ms, allowed: true, remaining: 0, resetAfter: 1900 * ms},
		{allowed: false, retryAfter: 300 * ms, resetAfter: 1900 * ms},
	}},
	{"reset after full window", storeFive, []step{
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{advance: 2100 * ms, allowed: true, remaining: 4, resetAfter: 400 * ms},
	}},
	{"burst above rate", storeBursty, []step{
		{allowed: true, remaining: 2, resetAfter: 1000 * ms},
		{allowed: true, remaining: 1, resetAfter: 2000 * ms},
		{allowed: true, remaining: 0, resetAfter: 3000 * ms},
		{allowed: false, retryAfter: 1000 * ms, resetAfter: 3000 * ms},
	}},
	{"cost above burst never passes", storeBursty, []step{
		{n: 4, allowed: false, retryAfter: Never, resetAfter: -1},
		{allowed: true, remaining: 2, resetAfter: 1000 * ms},
	}},
	{"cost within burst", storeHourly, []step{
		{n: 60, allowed: true, remaining: 40, resetAfter: 60 * time.Second},
		{n: 41, allowed: false, retryAfter: time.Second, resetAfter: 60 * time.Second},
		{n: 40, allowed: true, remaining: 0, resetAfter: 100 * time.Second},
	}},
	{"a refused bulk leaves room for smaller requests", storeBursty, []step{
		{n: 2, allowed: true, remaining: 1, resetAfter: 2000 * ms},
		{n: 2, allowed: false, retryAfter: 1000 * ms, resetAfter: 2000 * ms},
		{allowed: true, remaining: 0, resetAfter: 3000 * ms},
	}},
	{"burst zero denies everything", Limit{Rate: 10, Period: time.Second}, []step{
		{allowed: false, retryAfter: Never, resetAfter: -1},
		{advance: 200 * ms, allowed: false, retryAfter: Never, resetAfter: -1},
	}},
	{"zero limit denies everything", Limit{}, []step{
		{allowed: false, retryAfter: Never, resetAfter: -1},
	}},
	{"a refund gives back what was charged", storeFive, []step{
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{refund: 2},
		{allowed: true, remaining: 1, resetAfter: 1600 * ms},
		{allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
	}},
	{"a refund of a bulk gives back its cost", storeHourly, []step{
		{n: 60, allowed: true, remaining: 40, resetAfter: 60 * time.Second},
		{refund: 60},
		{n: 100, allowed: true, remaining: 0, resetAfter: 100 * time.Second},
		{allowed: false, retryAfter: time.Second, resetAfter: 100 * time.Second},
	}},
	{"a refund never gives more than a full burst", storeFive, []step{
		{allowed: true, remaining: 4, resetAfter: 400 * ms},
		{refund: 3},
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
	}},
	{"a refund after time passed", storeFive, []step{
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{advance: 800 * ms, allowed: true, remaining: 1, resetAfter: 1600 * ms},
		{refund: 1},
		{allowed: true, remaining: 1, resetAfter: 1600 * ms},
	}},
	{"a refund of a key that holds nothing changes nothing", storeFive, []step{
		{refund: 2},
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
	}},
	{"a refund lifts a denial, cached or not", storeFive, []step{
		{n: 5, allowed: true, remaining: 0, resetAfter: 2000 * ms},
		{allowed: false, retryAfter: 400 * ms, resetAfter: 2000 * ms},
		{refund: 1},
		{allowed: true, remaining: 0, resetAfter: 2000 * ms},
	}},
}

// TestStoreTable runs one table of behaviour against every
// implementation: bursts, refill over time, remaining, retry-after, reset,
// redis_rate's edges (a burst of 0 denies everything, a cost above the
// burst never passes), and refunds (a charge given back as if the request
// had never been made, never past a full burst, a cached denial
// forgotten).
func TestStoreTable(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, tc := range storeCases {
				t.Run(tc.name, func(t *testing.T) {
					if im.slack == 0 {
						runSteps(t, im, "table:"+t.Name(), tc.limit, tc.steps, nil)
						return
					}
					t.Parallel() // real time: cases wait side by side
					// On real time a stalled machine can let more time
					// pass between two steps than a decision's margin
					// (300ms at least in this table). The run is then
					// inconclusive, never a pass: it is repeated on a
					// fresh key until it ran without such a stall.
					for attempt := 1; ; attempt++ {
						var stalled time.Duration
						key := "table:" + t.Name() + ":" + strconv.Itoa(attempt)
						if runSteps(t, im, key, tc.limit, tc.steps, &stalled) {
							return
						}
						if attempt == 5 {
							t.Fatalf("five runs stalled beyond the table's margins (last by %v)", stalled)
						}
						t.Logf("run %d stalled %v beyond the requested waits; repeating", attempt, stalled)
					}
				})
			}
		})
	}
}

// runSteps applies steps to key on im and checks each result. On real
// time (stalled non-nil) every reported duration may drift from the
// exact value by the time that really passed beyond the requested waits,
// measured around the calls, plus im.slack; a decision or remaining count
// that differs while that excess is larger than im.slack proves nothing
// (more time only refills more), so runSteps
// stores the excess in *stalled and returns false for a fresh run.
func runSteps(t *testing.T, im impl, key string, l Limit, steps []step, stalled *time.Duration) bool {
	t.Helper()
	start := time.Now()
	var waited time.Duration
	for i, s := range steps {
		if s.advance > 0 {
			im.advance(s.advance)
			waited += s.advance
		}
		if s.refund > 0 {
			if err := im.refund(key, l, s.refund); err != nil {
				t.Fatalf("step %d: refund: %v", i, err)
			}
			continue
		}
		n := s.n
		if n == 0 {
			n = 1
		}
		r, err := im.allowN(key, l, n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		slack := im.slack
		if stalled != nil {
			excess := time.Since(start) - waited
			moved := r.Allowed != s.allowed || s.allowed && r.Remaining != s.remaining
			if moved && excess > im.slack {
				*stalled = excess
				return false
			}
			slack += excess
		}
		if r.Allowed != s.allowed {
			t.Fatalf("step %d: allowed = %v, want %v (%+v)", i, r.Allowed, s.allowed, r)
		}
		if s.allowed {
			if r.Remaining != s.remaining {
				t.Errorf("step %d: remaining = %d, want %d", i, r.Remaining, s.remaining)
			}
			if r.RetryAfter != 0 {
				t.Errorf("step %d: retry after = %v on an allowed request, want 0", i, r.RetryAfter)
			}
		} else {
			if r.Remaining != 0 {
				t.Errorf("step %d: remaining = %d on a denied request, want 0", i, r.Remaining)
			}
			if s.retryAfter == Never {
				if r.RetryAfter != Never {
					t.Errorf("step %d: retry after = %v, want Never", i, r.RetryAfter)
				}
			} else {
				approx(t, "retry after", r.RetryAfter, s.retryAfter, slack)
			}
		}
		if s.resetAfter >= 0 {
			approx(t, "reset after", r.ResetAfter, s.resetAfter, slack)
		}
	}
	return true
}

// TestStoreConcurrentExact: 50 goroutines race for a burst of 100 on one
// key; exactly 100 pass, on every implementation.
func TestStoreConcurrentExact(t *testing.T) {
	l := Limit{Rate: 100, Period: time.Hour, Burst: 100}
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 50; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 5; i++ {
						r, err := im.allowN("concurrent:"+im.name, l, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							allowed.Add(1)
						} else {
							denied.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if allowed.Load() != 100 || denied.Load() != 150 {
				t.Errorf("allowed %d, denied %d; want exactly 100 and 150", allowed.Load(), denied.Load())
			}
		})
	}
}

// TestStoreKeysIndependent: one key's use does not touch another's.
func TestStoreKeysIndependent(t *testing.T) {
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, k := range []string{"a", "b", "c"} {
				r, err := im.allowN("indep:"+im.name+":"+k, l, 1)
				if err != nil || !r.Allowed {
					t.Fatalf("first request for %s: %+v %v", k, r, err)
				}
			}
			r, _ := im.allowN("indep:"+im.name+":a", l, 1)
			if r.Allowed {
				t.Error("second request for a allowed")
			}
		})
	}
}

// TestResultUncharged checks Uncharged against the arithmetic: whatever
// the key held and whatever the request cost, the answer uncharged tells
// what a key holding the same TAT has (Remaining: what passes now,
// ResetAfter: the time to a full burst), whether the request was allowed
// (and its charge then not made) or refused; an answer no wait lifts is
// left alone.
func TestResultUncharged(t *testing.T) {
	const now = int64(1_800_000_000) * int64(time.Second)
	limits := []Limit{
		{Rate: 3, Period: time.Hour, Burst: 3},
		{Rate: 10, Period: time.Second, Burst: 25},
		{Rate: 7, Period: time.Minute, Burst: 7}, // an emission interval rounded up
	}
	for _, l := range limits {
		e := l.emission()
		for held := int64(-2); held <= l.Burst+1; held++ { // intervals charged before; negative: idle
			tat := now + held*e + e/3
			for n := int64(1); n <= l.Burst+1; n++ {
				t.Run(fmt.Sprintf("%v/held%d/cost%d", l, held, n), func(t *testing.T) {
					_, r := gcra(now, tat, l, n)
					u := r.Uncharged(l, n)
					if n > l.Burst {
						if u != r {
							t.Fatalf("never-passing answer changed: %+v → %+v", r, u)
						}
						return
					}
					left := max(tat, now) - now
					want := Result{Allowed: r.Allowed, Remaining: (l.Burst*e - left) / e, RetryAfter: r.RetryAfter, ResetAfter: time.Duration(left)}
					if want.Remaining < 0 {
						want.Remaining = 0
					}
					if u != want {
						t.Errorf("Uncharged(%+v) = %+v, want %+v", r, u, want)
					}
				})
			}
		}
	}
}

// testStoreTimeout is the Redis deadline of tests that do not test a
// deadline: only a hang reaches it, where a round trip over a second
// under a loaded suite would be decided by the store-error path.
const testStoreTimeout = time.Minute
