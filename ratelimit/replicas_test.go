package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// TestReplicasShareManyKeysExactly: two replicas share one real Redis,
// each a Redis store with its own client and pipelined sender behind a
// deny cache, as gateways run them; one of them, in the second run, runs
// the decision script of the last version to write TATs as numbers
// (testdata/decide-0b2af22.lua; its reply in the current shape:
// earlierScript), as during a rolling upgrade. 32
// concurrent callers send requests of two checks each (a key of its own,
// burst 5, and its group's, burst 30) over 40 keys in 4 groups: no key
// and no group ever lets more than its burst through, and each group
// lets exactly its burst (its keys hold more).
func TestReplicasShareManyKeysExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	old := earlierScript(t)
	const keys, groups, keyBurst, groupBurst = 40, 4, 5, 30
	keyLimit := Limit{Rate: keyBurst, Period: time.Hour, Burst: keyBurst}
	groupLimit := Limit{Rate: groupBurst, Period: time.Hour, Burst: groupBurst}
	for run, upgrade := range []bool{false, true} {
		t.Run(fmt.Sprintf("upgrade=%v", upgrade), func(t *testing.T) {
			var stores [2]Store
			for i := range stores {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = c.Close() })
				r := NewRedis(c, RedisOptions{Timeout: testStoreTimeout})
				t.Cleanup(func() { _ = r.Close() })
				if upgrade && i == 1 {
					src := noClaimFunc + old
					r.d = &decision{src: src, script: redis.NewScript(src)}
				}
				stores[i] = NewDenyCache(r, 1000, nil)
			}
			var (
				mu        sync.Mutex
				perKey    [keys]int
				perGroup  [groups]int
				wg        sync.WaitGroup
				keyName   = func(k int) string { return fmt.Sprintf("replicas%d:key%d", run, k) }
				groupName = func(g int) string { return fmt.Sprintf("replicas%d:group%d", run, g) }
			)
			for w := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					var ans Answer
					for range 60 {
						k := rng.IntN(keys)
						q := &Request{Checks: []Check{{Key: keyName(k), Limit: keyLimit}, {Key: groupName(k % groups), Limit: groupLimit}}}
						if err := stores[w%2].AllowAll(context.Background(), q, &ans); err != nil {
							t.Error(err)
							return
						}
						if ans.Allowed {
							mu.Lock()
							perKey[k]++
							perGroup[k%groups]++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			for k, n := range perKey {
				if n > keyBurst {
					t.Errorf("key %d let %d through, over its burst %d", k, n, keyBurst)
				}
			}
			for g, n := range perGroup {
				if n != groupBurst {
					t.Errorf("group %d let %d through, want exactly its burst %d", g, n, groupBurst)
				}
			}
		})
	}
}

// TestRedisAnswersReachTheirOwnCallers: calls batched into pipelined
// round trips (94dfcb0's hand-off of the queue) each get their own
// answer: 64 callers on one store, small batches, two round trips in
// flight, a third of the calls given up by their callers midway; each
// caller's key has a burst of its own, and every answer it gets tells
// exactly what is left of its own key.
func TestRedisAnswersReachTheirOwnCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	for _, o := range []RedisOptions{{Timeout: testStoreTimeout, MaxBatch: 3}, {Timeout: testStoreTimeout, MaxBatch: 3, MaxInFlight: 2}} {
		t.Run(fmt.Sprintf("inflight=%d", o.MaxInFlight), func(t *testing.T) {
			r := NewRedis(srv.Client(), o)
			t.Cleanup(func() { _ = r.Close() })
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					burst := int64(20 + w)
					l := Limit{Rate: burst, Period: time.Hour, Burst: burst}
					key := fmt.Sprintf("own%d:%d", o.MaxInFlight, w)
					charged := int64(0)
					var ans Answer
					for i := range 15 {
						ctx, cancel := context.WithCancel(context.Background())
						if i%3 == 2 {
							cancel() // given up before or while its round trip is sent
						}
						err := r.AllowAll(ctx, &Request{Checks: []Check{{Key: key, Limit: l}}}, &ans)
						cancel()
						if err != nil {
							if i%3 != 2 {
								t.Errorf("caller %d, call %d: %v", w, i, err)
							}
							// A call given up may or may not have been
							// charged: read the key to know.
							charged = -1
							continue
						}
						if !ans.Allowed {
							t.Errorf("caller %d, call %d refused with %d of %d charged", w, i, charged, burst)
							continue
						}
						left := ans.Results[0].Result.Remaining
						if charged >= 0 && left != burst-charged-1 {
							t.Errorf("caller %d, call %d: %d left, want %d of its own burst %d", w, i, left, burst-charged-1, burst)
						}
						charged = burst - left
					}
				}()
			}
			wg.Wait()
		})
	}
}
