package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// counting counts the calls that reach the limiter behind it.
type counting struct {
	next  Store
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, k string, l Limit) (Result, error) {
	c.calls.Add(1)
	return c.next.Allow(ctx, k, l)
}

func (c *counting) AllowN(ctx context.Context, k string, l Limit, n int64) (Result, error) {
	c.calls.Add(1)
	return c.next.AllowN(ctx, k, l, n)
}

func (c *counting) AllowAll(ctx context.Context, q *Request, ans *Answer) error {
	c.calls.Add(1)
	return c.next.AllowAll(ctx, q, ans)
}

func (c *counting) Refund(ctx context.Context, q *Request) error {
	c.calls.Add(1)
	return c.next.Refund(ctx, q)
}

func TestDenyCacheAnswersWithoutTheStore(t *testing.T) {
	clock := newFakeClock()
	store := &counting{next: NewMemory(MemoryOptions{Now: clock.Now})}
	dc := NewDenyCache(store, 1000, clock.Now)
	l := Limit{Rate: 1, Period: time.Second, Burst: 2}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if r, _ := dc.Allow(ctx, "k", l); !r.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	r, _ := dc.Allow(ctx, "k", l) // the store denies; the cache remembers
	if r.Allowed || store.calls.Load() != 3 {
		t.Fatalf("third: %+v, store calls %d", r, store.calls.Load())
	}
	clock.Advance(400 * time.Millisecond)
	for i := 0; i < 1000; i++ {
		r, _ = dc.Allow(ctx, "k", l)
		if r.Allowed || r.RetryAfter != 600*time.Millisecond {
			t.Fatalf("cached deny: %+v", r)
		}
	}
	if store.calls.Load() != 3 || dc.Hits() != 1000 {
		t.Errorf("store calls %d, hits %d; want 3 and 1000", store.calls.Load(), dc.Hits())
	}
	// A deny under one limit does not answer for another limit on the
	// same key: that decision goes to the store.
	dc.Allow(ctx, "k", Limit{Rate: 100, Period: time.Second, Burst: 100})
	if store.calls.Load() != 4 {
		t.Errorf("a different limit was answered from the cache (store calls %d, want 4)", store.calls.Load())
	}
	clock.Advance(600 * time.Millisecond)
	if r, _ := dc.Allow(ctx, "k", l); !r.Allowed {
		t.Errorf("after the retry delay: %+v", r)
	}
}

// TestDenyCacheTellsNeverForACostAboveTheBurst: a key the cache knows to
// be denied is still answered Never, not with the denial's wait, for a
// cost above its burst — alone (AllowN) and in a request (AllowAll) — so
// that its client is told the request can never pass at that size rather
// than to wait and be told so then.
func TestDenyCacheTellsNeverForACostAboveTheBurst(t *testing.T) {
	clock := newFakeClock()
	dc := NewDenyCache(NewMemory(MemoryOptions{Now: clock.Now}), 1000, clock.Now)
	l := Limit{Rate: 1, Period: time.Second, Burst: 2}
	ctx := context.Background()
	for i := 0; i < 3; i++ { // the third is denied and cached
		dc.Allow(ctx, "k", l)
	}
	for _, tc := range []struct {
		cost int64
		want time.Duration
	}{{2, time.Second}, {3, Never}} {
		t.Run(fmt.Sprint(tc.cost), func(t *testing.T) {
			if r, _ := dc.AllowN(ctx, "k", l, tc.cost); r.Allowed || r.RetryAfter != tc.want {
				t.Errorf("AllowN: %+v, want refused with RetryAfter %v", r, tc.want)
			}
			q := Request{Checks: []Check{{Key: "k", Limit: l}}, Cost: tc.cost}
			var ans Answer
			if err := dc.AllowAll(ctx, &q, &ans); err != nil || ans.Allowed || ans.Results[0].Result.RetryAfter != tc.want {
				t.Errorf("AllowAll: %+v, %v; want refused with RetryAfter %v", ans, err, tc.want)
			}
		})
	}
}

func TestDenyCacheBounded(t *testing.T) {
	clock := newFakeClock()
	dc := NewDenyCache(NewMemory(MemoryOptions{Now: clock.Now}), 640, clock.Now)
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	for i := 0; i < 10000; i++ {
		k := fmt.Sprint("k", i)
		dc.Allow(context.Background(), k, l)
		dc.Allow(context.Background(), k, l)
	}
	if n := dc.entries.Len(); n > 640 {
		t.Errorf("deny cache holds %d entries, want at most 640", n)
	}
}

func BenchmarkDenyCacheHit(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	dc := NewDenyCache(m, 1000, nil)
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	ctx := context.Background()
	dc.Allow(ctx, "hot", l)
	dc.Allow(ctx, "hot", l)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = dc.Allow(ctx, "hot", l)
		}
	})
}

// TestDenyCacheCacheOnly: a CacheOnly request is refused from the cache
// when it knows the key denied, and otherwise gets ErrNotCached without
// reaching the store or charging anything; the limiters themselves
// decide nothing CacheOnly.
func TestDenyCacheCacheOnly(t *testing.T) {
	clock := newFakeClock()
	mem := NewMemory(MemoryOptions{Now: clock.Now})
	store := &counting{next: mem}
	dc := NewDenyCache(store, 1000, clock.Now)
	ctx := context.Background()
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	only := func(key string) *Request {
		return &Request{Checks: []Check{{Key: key, Limit: l}}, CacheOnly: true}
	}
	var ans Answer
	if err := dc.AllowAll(ctx, only("k"), &ans); err != ErrNotCached || store.calls.Load() != 0 {
		t.Fatalf("unknown key: %v, %d store calls; want ErrNotCached, none", err, store.calls.Load())
	}
	if res, err := dc.Allow(ctx, "k", l); err != nil || !res.Allowed {
		t.Fatalf("first request after a CacheOnly one: %+v %v, want allowed (nothing charged)", res, err)
	}
	if res, _ := dc.Allow(ctx, "k", l); res.Allowed {
		t.Fatal("second request allowed")
	}
	calls := store.calls.Load()
	if err := dc.AllowAll(ctx, only("k"), &ans); err != nil || ans.Allowed || !ans.Results[0].Applied || ans.Results[0].Result.RetryAfter <= 0 {
		t.Errorf("denied key: %+v %v, want refused from the cache with a wait", ans, err)
	}
	if store.calls.Load() != calls {
		t.Error("a CacheOnly request reached the store")
	}
	if err := mem.AllowAll(ctx, only("other"), &ans); err != ErrNotCached {
		t.Errorf("Memory CacheOnly: %v, want ErrNotCached", err)
	}
	if res, _ := mem.Allow(ctx, "other", l); !res.Allowed {
		t.Error("Memory charged a CacheOnly request")
	}
}

// TestDenyCacheCacheAsked: a request whose checks the cache was just
// asked about (CacheAsked) goes to the store without a second look-up,
// and the store's answer is the cached one's: refused, charging nothing.
func TestDenyCacheCacheAsked(t *testing.T) {
	clock := newFakeClock()
	store := &counting{next: NewMemory(MemoryOptions{Now: clock.Now})}
	dc := NewDenyCache(store, 1000, clock.Now)
	ctx := context.Background()
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	var ans Answer
	for i, want := range []bool{true, false} { // the second is denied, and cached
		if err := dc.AllowAll(ctx, &Request{Checks: []Check{{Key: "k", Limit: l}}}, &ans); err != nil || ans.Allowed != want {
			t.Fatalf("request %d: allowed %v (%v), want %v", i, ans.Allowed, err, want)
		}
	}
	calls, hits := store.calls.Load(), dc.Hits()
	if err := dc.AllowAll(ctx, &Request{Checks: []Check{{Key: "k", Limit: l}}, CacheAsked: true}, &ans); err != nil || ans.Allowed || ans.Results[0].Result.RetryAfter <= 0 {
		t.Fatalf("CacheAsked request: %+v %v, want refused by the store with a wait", ans, err)
	}
	if store.calls.Load() != calls+1 || dc.Hits() != hits {
		t.Errorf("store calls +%d, cache hits +%d; want +1 and +0", store.calls.Load()-calls, dc.Hits()-hits)
	}
	if err := dc.AllowAll(ctx, &Request{Checks: []Check{{Key: "k", Limit: l}}}, &ans); err != nil || ans.Allowed || dc.Hits() != hits+1 {
		t.Errorf("a request after it: %+v %v, hits +%d; want refused from the cache", ans, err, dc.Hits()-hits)
	}
}
