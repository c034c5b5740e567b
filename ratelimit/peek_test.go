package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestPeekChangesNothing runs one table against every Inspector: Peek
// reports what Allow last left (remaining, and the retry delay of a
// denial), any number of peeks leave every counter as it was, and
// Forget gives the key back its full burst. Redis counts on its own
// clock, real time: the limit refills one request an hour, so no stall of
// a loaded machine refills the key between two calls, and a reset or a
// retry read later is the earlier one less the time that passed between
// them (measured around the calls), where a peek that charged would add
// an hour.
func TestPeekChangesNothing(t *testing.T) {
	type inspected struct {
		name string
		lim  interface {
			Store
			Inspector
		}
		slack time.Duration
	}
	clock := newFakeClock()
	mem := NewMemory(MemoryOptions{Now: clock.Now})
	list := []inspected{
		{name: "memory", lim: mem},
		{name: "memory+denycache", lim: NewDenyCache(NewMemory(MemoryOptions{Now: clock.Now}), 100, clock.Now)},
	}
	if !testing.Short() {
		srv := redistest.Start(t)
		rl := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		rl2 := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl2.Close() })
		list = append(list,
			inspected{name: "redis", lim: rl, slack: 80 * time.Millisecond},
			inspected{name: "redis+denycache", lim: NewDenyCache(rl2, 100, nil), slack: 80 * time.Millisecond})
	}
	l := Limit{Rate: 3, Period: 3 * time.Hour, Burst: 3}
	ctx := context.Background()
	for _, im := range list {
		t.Run(im.name, func(t *testing.T) {
			key := "peek:" + im.name
			p, err := im.lim.Peek(ctx, key, l)
			if err != nil || !p.Allowed || p.Remaining != 3 || p.RetryAfter != 0 || p.ResetAfter != 0 {
				t.Fatalf("fresh key: %+v, %v", p, err)
			}
			passed := elapsedOn(im.slack != 0)
			allowedAt := time.Now()
			a, _ := im.lim.Allow(ctx, key, l)
			for i := 0; i < 20; i++ { // peeks charge nothing
				if p, _ = im.lim.Peek(ctx, key, l); p.Remaining != a.Remaining || !p.Allowed {
					t.Fatalf("peek %d after one request: %+v, allow said %+v", i, p, a)
				}
			}
			lessAtMost(t, "reset after one", p.ResetAfter, a.ResetAfter, passed(allowedAt), im.slack)
			for i := 0; i < 2; i++ {
				if a, _ = im.lim.Allow(ctx, key, l); !a.Allowed {
					t.Fatalf("request %d refused after peeks: %+v", i+2, a)
				}
			}
			deniedAt := time.Now()
			denied, _ := im.lim.Allow(ctx, key, l)
			if denied.Allowed {
				t.Fatalf("fourth request allowed: %+v", denied)
			}
			for i := 0; i < 5; i++ {
				p, _ = im.lim.Peek(ctx, key, l)
				if p.Allowed || p.Remaining != 0 {
					t.Fatalf("peek of a spent key: %+v", p)
				}
				lessAtMost(t, "peek retry", p.RetryAfter, denied.RetryAfter, passed(deniedAt), im.slack)
			}
			again, _ := im.lim.Allow(ctx, key, l)
			if again.Allowed {
				t.Fatal("peeks refilled the key")
			}
			lessAtMost(t, "retry after peeks", again.RetryAfter, denied.RetryAfter, passed(deniedAt), im.slack)
			if err := im.lim.Forget(ctx, key, l); err != nil {
				t.Fatal(err)
			}
			if p, _ = im.lim.Peek(ctx, key, l); p.Remaining != 3 {
				t.Fatalf("after Forget: %+v", p)
			}
			if a, _ = im.lim.Allow(ctx, key, l); !a.Allowed || a.Remaining != 2 {
				t.Fatalf("first request after Forget: %+v", a)
			}
		})
	}
}

// elapsedOn returns how much real time has passed since an instant, for
// a store on real time, or 0 for one on a clock standing still.
func elapsedOn(real bool) func(time.Time) time.Duration {
	return func(t0 time.Time) time.Duration {
		if !real {
			return 0
		}
		return time.Since(t0)
	}
}

// lessAtMost fails unless got is want less at most passed, within slack:
// a duration read passed after want was (a reset, a retry) on a clock
// that moved on.
func lessAtMost(t *testing.T, what string, got, want, passed, slack time.Duration) {
	t.Helper()
	if got < want-passed-slack || got > want+slack {
		t.Errorf("%s = %v, want %v less at most the %v passed since (±%v)", what, got, want, passed, slack)
	}
}
