package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/fakeclock"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// leaseTest starts the redis-server of a lease test (skipped with
// -short) and returns it with the limit the lease tests decide, far from
// reach and refilling one request every 3.6s (what a few seconds of a
// loaded machine refill is a count a test can bound), and the size of
// that limit's leases.
func leaseTest(t *testing.T) (*redistest.Server, Limit, int64) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	l := Limit{Rate: 1e6, Period: 1000 * time.Hour, Burst: 1e6}
	return redistest.Start(t), l, leaseSize(l.Burst)
}

// seedLease gives r a lease of size requests on k as a round trip would
// (without charging Redis), with Redis last reporting known remaining.
func seedLease(r *Redis, k leaseKey, size, known int64) *lease {
	now := time.Now().UnixNano()
	l := r.leases.get(k)
	l.settle(size, known, time.Hour, now)
	return l
}

// renewalsInFlight returns r's renewals in flight.
func renewalsInFlight(r *Redis) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewing
}

// leaseState returns l's tokens and whether a renewal is in flight.
func leaseState(l *lease) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens, l.renewing
}

// waitRenewed waits until l's renewal has ended.
func waitRenewed(t *testing.T, l *lease) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, renewing := leaseState(l); !renewing {
			return
		}
	}
	t.Fatal("the renewal did not end within a minute")
}

// pastMark warms r's script, gives it a lease of size requests on k
// with Redis reporting the key far from its limit, freezes srv and takes
// the lease below its low-water mark, which starts a renewal against the
// frozen Redis. srv is left frozen; it is thawed if a call fails.
func pastMark(t *testing.T, srv *redistest.Server, r *Redis, k leaseKey, size int64) *lease {
	t.Helper()
	ctx := context.Background()
	if _, err := r.Allow(ctx, k.key+":warm", k.limit); err != nil {
		t.Fatal(err)
	}
	ls := seedLease(r, k, size, k.limit.Burst-size)
	srv.Freeze()
	for i := int64(0); i <= size-size/leaseLowWater; i++ {
		if _, err := r.Allow(ctx, k.key, k.limit); err != nil {
			srv.Thaw()
			t.Fatalf("call %d, Redis frozen, lease not empty: %v", i, err)
		}
	}
	return ls
}

// TestLeaseRenewedAheadOfNeed drives a hot key's lease down with real
// redis-server frozen (SIGSTOP), so that any caller that waited for Redis
// would block for the limiter's whole timeout: every call is answered
// from the lease at once; the call that takes the lease below a quarter
// starts one renewal, and no later one starts another; the renewal, once
// Redis answers, adds a lease, in one script run that Observe reports as
// carrying no caller's request. A key near its limit is not renewed.
// (Memory decides every request in process: it has no leases, and none of
// this applies to it.)
func TestLeaseRenewedAheadOfNeed(t *testing.T) {
	srv, l, size := leaseTest(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		known     int64 // what Redis last reported remaining
		wantRenew bool
	}{
		{"far from its limit", l.Burst - size, true},
		{"near its limit", leaseMargin*size - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var carried []int
			// A deadline far beyond the loop's: the renewal stays in
			// flight while Redis is frozen.
			r := NewRedis(srv.Client(), RedisOptions{Timeout: 30 * time.Second, Observe: func(_ time.Duration, n int, _ error) {
				mu.Lock()
				carried = append(carried, n)
				mu.Unlock()
			}})
			defer r.Close()
			k := leaseKey{key: "renew-ahead:" + tc.name, limit: l}
			if _, err := r.Allow(ctx, "renew-ahead:warm", l); err != nil { // the script is loaded
				t.Fatal(err)
			}
			mu.Lock()
			carried = nil
			mu.Unlock()
			ls := seedLease(r, k, size, tc.known)
			before := srv.CommandCalls()
			srv.Freeze()
			frozen := true
			defer func() {
				if frozen {
					srv.Thaw()
				}
			}()
			// A caller that waited for the renewal would wait out its 30s
			// deadline and find it ended, failed, no longer in flight.
			mark := size - size/leaseLowWater // the call that leaves fewer than a quarter
			for i := int64(1); i <= size; i++ {
				res, err := r.Allow(ctx, k.key, l)
				if err != nil || !res.Allowed {
					t.Fatalf("call %d: %+v, %v", i, res, err)
				}
				want := 0
				if tc.wantRenew && i > mark {
					want = 1
				}
				if got := renewalsInFlight(r); got != want {
					t.Fatalf("after call %d of a lease of %d: %d renewals in flight, want %d", i, size, got, want)
				}
			}
			thawed := time.Now()
			srv.Thaw()
			frozen = false
			waitRenewed(t, ls)
			after := srv.CommandCalls()
			runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
			tokens, _ := leaseState(ls)
			mu.Lock()
			seen := carried
			mu.Unlock()
			if !tc.wantRenew {
				if runs != 0 || tokens != 0 || len(seen) != 0 {
					t.Errorf("near its limit: %d script runs, %d tokens leased, round trips %v; want none", runs, tokens, seen)
				}
				return
			}
			if runs != 1 || tokens != size {
				t.Errorf("renewal: %d script runs and %d tokens leased, want 1 and %d", runs, tokens, size)
			}
			if len(seen) != 1 || seen[0] != 0 {
				t.Errorf("Observe saw round trips carrying %v requests, want one carrying 0 (a renewal is no caller's)", seen)
			}
			// The renewal was counted in Redis: the key's remaining fell by
			// the lease.
			q := Request{Checks: []Check{{Key: k.key, Limit: l}}, Cost: 2} // not leasable: Redis's own answer
			var ans Answer
			if err := r.AllowAll(ctx, &q, &ans); err != nil || !ans.Allowed {
				t.Fatalf("after the renewal: %+v, %v", ans, err)
			}
			// GCRA refills one request every 3.6s here: those of the
			// time since the renewal may have come back.
			refill := int64(time.Since(thawed)/time.Duration(l.emission())) + 1
			if got, want := ans.Results[0].Result.Remaining, l.Burst-size-2; got < want || got > want+refill {
				t.Errorf("after a renewal of %d and a request of 2, Redis has %d remaining, want %d (+%d refilled at most)", size, got, want, refill)
			}
		})
	}
}

// TestLeaseRenewalAndClose: Close with a renewal in flight (Redis frozen)
// waits for its round trip and leaves no renewal running; a lease taken
// below its mark after Close starts none.
func TestLeaseRenewalAndClose(t *testing.T) {
	srv, l, size := leaseTest(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: 2 * time.Second})
	ls := pastMark(t, srv, r, leaseKey{key: "close", limit: l}, size)
	if renewalsInFlight(r) != 1 {
		srv.Thaw()
		t.Fatal("no renewal in flight")
	}
	// Its round trip is sent (a renewal not sent yet when Close comes is
	// never sent: that Close does not wait for Redis).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		sending := r.decide.sending
		r.mu.Unlock()
		if sending == 1 {
			break
		}
		if time.Now().After(deadline) {
			srv.Thaw()
			t.Fatal("the renewal's round trip was never sent")
		}
	}
	closed := make(chan struct{})
	go func() { _ = r.Close(); close(closed) }()
	select {
	case <-closed:
		srv.Thaw()
		t.Fatal("Close returned with a renewal's round trip in flight")
	case <-time.After(100 * time.Millisecond):
	}
	srv.Thaw()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute of Redis answering")
	}
	if _, renewing := leaseState(ls); renewing || renewalsInFlight(r) != 0 {
		t.Fatalf("after Close: lease renewing %v, %d renewals in flight", renewing, renewalsInFlight(r))
	}
	// A fresh lease on a closed limiter: taking it below its mark starts
	// nothing, and leaves the lease free to be renewed by no one.
	k2 := leaseKey{key: "after-close", limit: l}
	ls2 := seedLease(r, k2, size, l.Burst-size)
	for i := int64(0); i < size; i++ {
		_, _, renew, n := r.leases.take(k2, time.Now().UnixNano())
		if renew != nil {
			r.renew(k2, renew, n)
		}
	}
	if _, renewing := leaseState(ls2); renewing || renewalsInFlight(r) != 0 {
		t.Errorf("a renewal started after Close: lease renewing %v, %d in flight", renewing, renewalsInFlight(r))
	}
}

// TestLeaseRenewalFailure: a renewal whose round trip fails (Redis frozen
// past the timeout) puts the limiter in its backoff like any failed round
// trip: the next calls fail fast with ErrStoreUnavailable although the
// lease still holds requests, as they would after any caller's failed
// round trip, and the lease is renewed again once Redis is back.
func TestLeaseRenewalFailure(t *testing.T) {
	srv, l, size := leaseTest(t)
	ctx := context.Background()
	var failed atomic.Int64
	// As exgate configures its client (limiter/redisclient.go): the
	// round trip's deadline bounds the socket reads, no retries.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	// The deadline is far beyond a loaded machine's stalls while Redis
	// answers (the renewal waits it out, Redis frozen); the backoff
	// ends when the test moves the clock, however long it took to look.
	clock := fakeclock.New(time.Now())
	r := NewRedis(client, RedisOptions{Timeout: 2 * time.Second, Backoff: time.Second, Now: clock.Now,
		Observe: func(_ time.Duration, _ int, err error) {
			if err != nil {
				failed.Add(1)
			}
		}})
	defer r.Close()
	k := leaseKey{key: "fail", limit: l}
	ls := pastMark(t, srv, r, k, size)
	waitRenewed(t, ls)
	srv.Thaw()
	if failed.Load() != 1 {
		t.Errorf("%d failed round trips observed, want the renewal's", failed.Load())
	}
	if _, err := r.Allow(ctx, k.key, l); !errors.Is(err, ErrStoreUnavailable) {
		t.Errorf("right after a failed renewal: %v, want ErrStoreUnavailable (the backoff)", err)
	}
	clock.Advance(1100 * time.Millisecond) // past the backoff
	for i := 0; i < 10; i++ {
		if _, err := r.Allow(ctx, k.key, l); err != nil {
			t.Fatalf("after the backoff: %v", err)
		}
	}
	waitRenewed(t, ls)
	if got, _ := leaseState(ls); got == 0 {
		t.Error("after the backoff, Redis back, the key was not leased again")
	}
}

// BenchmarkLeaseHotKey measures one hot key far from its limit answered
// from leases, with callers arriving at a steady 20,000 per second (one
// every 50µs, open loop, like the fixed-rate benchmark) and in a closed
// loop of 16 callers: waited/op is the share of callers that waited for a
// Redis round trip (the rest were answered from a lease in process), and
// trips/op the round trips per call.
func BenchmarkLeaseHotKey(b *testing.B) {
	srv := redistest.Start(b)
	l := Limit{Rate: 1e9, Period: time.Hour, Burst: 1e9}
	for _, mode := range []string{"paced-20k", "closed-16"} {
		b.Run(mode, func(b *testing.B) {
			var waited, trips atomic.Int64
			r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout, Observe: func(_ time.Duration, n int, _ error) {
				waited.Add(int64(n))
				trips.Add(1)
			}})
			defer r.Close()
			ctx := context.Background()
			key := "hot:" + mode
			// A first group of concurrent calls leases the key.
			for try := 0; !r.leases.recent(leaseKey{key: key, limit: l}, time.Now().UnixNano()); try++ {
				if try == 100 {
					b.Skip("concurrent calls never met in a round trip")
				}
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() { defer wg.Done(); _, _ = r.Allow(ctx, key, l) }()
				}
				wg.Wait()
			}
			waited.Store(0)
			trips.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			if mode == "paced-20k" {
				const every = 50 * time.Microsecond
				next := time.Now()
				for b.Loop() {
					for time.Now().Before(next) { // spin: a sleep is coarser than the pace
					}
					next = next.Add(every)
					if _, err := r.Allow(ctx, key, l); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := r.Allow(ctx, key, l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(waited.Load())/float64(b.N), "waited/op")
			b.ReportMetric(float64(trips.Load())/float64(b.N), "trips/op")
		})
	}
}
