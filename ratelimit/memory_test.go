package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

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
