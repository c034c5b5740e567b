package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestManyKeysOneScriptRun: concurrent decisions for many different keys
// are exact per key, and outside a Cluster a round trip decides all of
// its keys in one script run instead of one per key.
func TestManyKeysOneScriptRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := Limit{Rate: 3, Period: time.Hour, Burst: 3}
	const keys, perKey = 200, 5
	before := srv.CommandCalls()
	var allowed [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < keys*perKey; i += 64 {
				k := i % keys
				res, err := r.Allow(context.Background(), "many:"+strconv.Itoa(k), l)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	for k := range allowed {
		if n := allowed[k].Load(); n != 3 {
			t.Errorf("key %d: %d of %d allowed, want exactly 3", k, n, perKey)
		}
	}
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if runs >= keys*perKey/4 {
		t.Errorf("%d script runs for %d decisions on %d keys; want one run per round trip", runs, keys*perKey, keys)
	}
	t.Logf("%d decisions on %d keys: %d script runs", keys*perKey, keys, runs)
}

// BenchmarkRedisAllow measures one decision against a real Redis on
// loopback, one caller at a time and with 64 concurrent callers whose
// decisions share pipelined round trips.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	for _, conc := range []int{1, 64} {
		b.Run("callers="+strconv.Itoa(conc), func(b *testing.B) {
			r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
			defer r.Close()
			ks := benchKeys(1024)
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			if conc == 1 {
				for b.Loop() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&1023], benchLimit); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(conc / 2) // GOMAXPROCS is 2 here: conc goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&1023], benchLimit); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestRedisKeyPrefix: a decision made through redis_rate and one made by
// the coalescing script read and write the same key, keyPrefix + key, so
// that Peek, Forget and both paths agree on one TAT.
func TestRedisKeyPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := Limit{Rate: 2, Period: time.Hour, Burst: 2}
	if _, err := r.Allow(context.Background(), "prefixed", l); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Do("EXISTS", keyPrefix+"prefixed"); err != nil || n.(int64) != 1 {
		t.Fatalf("EXISTS %s = %v, %v; want the key redis_rate wrote", keyPrefix+"prefixed", n, err)
	}
	res, err := r.Peek(context.Background(), "prefixed", l)
	if err != nil || res.Remaining != 1 {
		t.Errorf("Peek after one request: %+v, %v; want 1 remaining", res, err)
	}
}
