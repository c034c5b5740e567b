package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestCostsMixedWithCoalescingAndLeases: bulks (cost > 1) and single
// requests on one hot key, across replicas whose single requests are
// coalesced and leased, never admit more than the burst in total, and a
// bulk is admitted whole or not at all (its cost is charged exactly).
func TestCostsMixedWithCoalescingAndLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	l := Limit{Rate: 3000, Period: time.Hour, Burst: 3000}
	var replicas []*Redis
	for i := 0; i < 2; i++ {
		r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		defer r.Close()
		replicas = append(replicas, r)
	}
	var admitted atomic.Int64 // in cost units
	var wg sync.WaitGroup
	start := time.Now()
	for ri, r := range replicas {
		for g := 0; g < 24; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 60; i++ {
					cost := int64(1)
					if (g+i+ri)%3 == 0 {
						cost = 7 // a bulk of seven orders
					}
					res, err := r.AllowN(context.Background(), "mixed", l, cost)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(cost)
					}
				}
			}()
		}
	}
	wg.Wait()
	// One unit refills every 1.2s: a loaded machine's run may earn some.
	refilled := int64(time.Since(start))/l.emission() + 1
	maxLease := int64(min(3000/leaseFraction, leaseMax))
	if got := admitted.Load(); got > 3000+refilled || got < 3000-2*maxLease-7 {
		t.Errorf("admitted %d units, want at most 3000 (+%d refilled) and at least %d", got, refilled, 3000-2*maxLease-7)
	}
	// What Redis holds agrees: nothing is left for even one more request
	// beyond what leases hold back.
	res, err := replicas[0].AllowN(context.Background(), "mixed", l, 2*maxLease+8)
	if err != nil || res.Allowed {
		t.Errorf("after the run a bulk of %d still passed (%+v, %v): costs were undercharged", 2*maxLease+8, res, err)
	}
	t.Logf("admitted %d of 3000 units", admitted.Load())
}

// TestHotKeyLeases: a hot key far from its limit is decided mostly from
// leases (few Redis calls); leases never let more than the limit through,
// across replicas, and leave at most a lease per replica unused.
func TestHotKeyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	l := Limit{Rate: 5000, Period: time.Hour, Burst: 5000}
	var replicas []*Redis
	for i := 0; i < 3; i++ {
		r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		defer r.Close()
		replicas = append(replicas, r)
	}
	before := srv.CommandCalls()
	var allowed, decisions atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range replicas {
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					res, err := r.Allow(context.Background(), "leased", l)
					if err != nil {
						t.Error(err)
						return
					}
					decisions.Add(1)
					if res.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	// GCRA refills one request per emission interval (720ms here) on
	// Redis's clock; every decision fell inside [start, now], so at most
	// the burst plus the whole intervals of that span can have passed.
	refill := int64(time.Since(start) / time.Duration(l.emission()))
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	maxLease := int64(min(5000/leaseFraction, leaseMax))
	if got := allowed.Load(); got > 5000+refill || got < 5000-3*maxLease {
		t.Errorf("allowed %d of %d, want at most 5000 (+%d refilled during the run) and at least %d", got, decisions.Load(), refill, 5000-3*maxLease)
	}
	if runs > decisions.Load()/4 {
		t.Errorf("%d script runs for %d decisions on a hot key far from its limit", runs, decisions.Load())
	}
	leased := 0
	for _, r := range replicas {
		r.leases.mu.RLock()
		for _, l := range r.leases.m {
			l.mu.Lock()
			if l.until > 0 {
				leased++
			}
			l.mu.Unlock()
		}
		r.leases.mu.RUnlock()
	}
	if leased == 0 {
		t.Error("no replica was ever given a lease on a hot key far from its limit")
	}
	t.Logf("%d decisions, %d allowed, %d script runs, %d replicas leased", decisions.Load(), allowed.Load(), runs, leased)
}

// TestHotKeyLeaseRenewedByOneCall: once a key was leased, a caller alone
// in its round trip renews the lease when it runs out, so that one caller
// at a time on a hot key makes about one round trip per lease, not one
// per request; a key never leased gets none from single calls.
func TestHotKeyLeaseRenewedByOneCall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	l := Limit{Rate: 1e6, Period: time.Hour, Burst: 1e6}
	maxLease := min(l.Burst/leaseFraction, leaseMax)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		leased  bool // two concurrent calls met in a round trip first
		maxRuns int64
		minRuns int64
	}{
		{"leased before", true, 2 + 4*1000/maxLease, 1},
		{"never leased", false, 1000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
			defer r.Close()
			key := "renew:" + tc.name
			if tc.leased {
				// Concurrent calls: the first is sent alone and holds the
				// round trip while the others queue behind it; the first
				// group that meets learns how far the key is from its
				// limit, a later one is given a lease.
				for try := 0; !r.leases.recent(leaseKey{key: key, limit: l}, time.Now().UnixNano()); try++ {
					if try == 50 {
						t.Skip("concurrent calls never met in a round trip")
					}
					var wg sync.WaitGroup
					for i := 0; i < 8; i++ {
						wg.Add(1)
						go func() { defer wg.Done(); _, _ = r.Allow(ctx, key, l) }()
					}
					wg.Wait()
				}
			}
			before := srv.CommandCalls()
			for i := 0; i < 1000; i++ {
				if res, err := r.Allow(ctx, key, l); err != nil || !res.Allowed {
					t.Fatalf("call %d: %+v, %v", i, res, err)
				}
			}
			after := srv.CommandCalls()
			runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
			if runs > tc.maxRuns || runs < tc.minRuns {
				t.Errorf("%d script runs for 1000 calls one at a time, want %d to %d (leases of %d)", runs, tc.minRuns, tc.maxRuns, maxLease)
			}
			t.Logf("%d script runs for 1000 calls one at a time", runs)
		})
	}
}
