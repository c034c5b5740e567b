package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAllowHash: a key given by its hash is decided as a string key is
// (the same GCRA), and callers at one instant get exactly its burst
// between them, whatever their number: decided under the shard's lock.
func TestAllowHash(t *testing.T) {
	l := Limit{Rate: 10, Period: time.Second, Burst: 5}
	cases := []struct {
		name string
		at   []time.Duration // the instants of the calls, from the start
		want int             // how many are allowed
	}{
		{"a burst of its depth", []time.Duration{0, 0, 0, 0, 0, 0, 0}, 5},
		{"one back an interval later", []time.Duration{0, 0, 0, 0, 0, 0, 100 * time.Millisecond, 100 * time.Millisecond}, 6},
		{"full again once refilled", []time.Duration{0, 0, 0, 0, 0, 0, time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			m := NewMemory(MemoryOptions{Now: clock.Now})
			byHash := NewMemory(MemoryOptions{})
			got := 0
			for i, at := range tc.at {
				clock.Advance(start.Add(at).Sub(clock.Now()))
				r := byHash.AllowHash(7, clock.Now(), l, 1)
				if want := m.AllowLocal("k", l, 1); r != want {
					t.Fatalf("call %d: AllowHash = %+v, AllowLocal = %+v", i, r, want)
				}
				if r.Allowed {
					got++
				}
			}
			if got != tc.want {
				t.Fatalf("%d allowed, want %d", got, tc.want)
			}
		})
	}
	t.Run("concurrent callers", func(t *testing.T) {
		m := NewMemory(MemoryOptions{})
		now := time.Unix(1_800_000_000, 0)
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					if m.AllowHash(7, now, l, 1).Allowed {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n.Load() != l.Burst {
			t.Fatalf("%d allowed at one instant, want the burst, %d", n.Load(), l.Burst)
		}
	})
}

func TestMemoryStaysBounded(t *testing.T) {
	clock := newFakeClock()
	m := NewMemory(MemoryOptions{Now: clock.Now, MaxKeys: 6400})
	l := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	for i := 0; i < 100000; i++ {
		m.AllowLocal(fmt.Sprint("addr-", i), l, 1)
	}
	if n := m.Len(); n > 6400 || n < 6000 {
		t.Errorf("keys kept %d, want close to and at most 6400", n)
	}
	// Keys whose bucket is full again are dropped by the next sweep of
	// their shard, which an insertion into the shard triggers.
	clock.Advance(2 * time.Hour)
	for i := 0; i < 1000; i++ {
		m.AllowLocal(fmt.Sprint("fresh-", i), l, 1)
	}
	if n := m.Len(); n != 1000 {
		t.Errorf("after every old bucket refilled %d keys remain, want the 1000 fresh ones", n)
	}
}

// benchLimit never refuses within a benchmark, and its interval (3.6µs)
// is well above the TAT's float precision, so that every decision writes
// its key as a real one does.
var benchLimit = Limit{Rate: 1e9, Period: time.Hour, Burst: 1e9}

// keys returns n distinct keys, made before the timer starts.
func benchKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "bench:" + strconv.Itoa(i)
	}
	return ks
}

func BenchmarkMemoryAllow(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	ks := benchKeys(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = m.Allow(ctx, ks[i&1023], benchLimit)
			i++
		}
	})
}
