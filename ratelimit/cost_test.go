package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestAllowAllCostAboveBurst: a request of all its limits at once whose
// cost is above one limit's burst is refused with that check's
// RetryAfter exactly Never (not an overflowing or huge wait), the others
// decided as usual, and charges nothing — alike in memory, Redis and a
// Redis Cluster (where the checks' keys fall in different slots).
func TestAllowAllCostAboveBurst(t *testing.T) {
	big := Limit{Rate: 100, Period: time.Hour, Burst: 100}
	small := Limit{Rate: 100, Period: time.Minute, Burst: 5}
	stores := []struct {
		name string
		lim  Store
	}{{"memory", NewMemory(MemoryOptions{})}}
	if !testing.Short() {
		rl := NewRedis(redistest.Start(t).Client(), RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		cl := redistest.StartCluster(t, 3)
		crl := NewRedis(cl.Client(t), RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = crl.Close() })
		stores = append(stores, struct {
			name string
			lim  Store
		}{"redis", rl}, struct {
			name string
			lim  Store
		}{"redis-cluster", crl})
	}
	ctx := context.Background()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			checks := []Check{{Key: t.Name() + ":big", Limit: big}, {Key: t.Name() + ":small", Limit: small}}
			var ans Answer
			for _, cost := range []int64{6, 1 << 40} {
				if err := st.lim.AllowAll(ctx, &Request{Checks: checks, Cost: cost}, &ans); err != nil {
					t.Fatal(err)
				}
				b, s := ans.Results[0], ans.Results[1]
				if ans.Allowed || !s.Applied || s.Result.Allowed || s.Result.RetryAfter != Never {
					t.Fatalf("cost %d: allowed %v, small limit %+v; want refused with RetryAfter Never", cost, ans.Allowed, s)
				}
				if cost == 6 && (!b.Applied || !b.Result.Allowed) {
					t.Errorf("cost 6: the big limit would allow it on its own: %+v", b)
				}
			}
			// Nothing was charged: the small limit's whole burst passes,
			// and the big limit has 100 - 5 left.
			if err := st.lim.AllowAll(ctx, &Request{Checks: checks, Cost: 5}, &ans); err != nil {
				t.Fatal(err)
			}
			if !ans.Allowed || ans.Results[0].Result.Remaining != 95 || ans.Results[1].Result.Remaining != 0 {
				t.Errorf("cost 5 after the refusals: %+v (a refusal charged something)", ans)
			}
			// A shadow limit's burst refuses nothing.
			checks[1].Shadow = true
			checks[1].Key += ":shadow"
			if err := st.lim.AllowAll(ctx, &Request{Checks: checks, Cost: 6}, &ans); err != nil {
				t.Fatal(err)
			}
			if !ans.Allowed || ans.Results[1].Result.RetryAfter != Never {
				t.Errorf("cost 6 over a shadow limit's burst: %+v", ans)
			}
		})
	}
}
