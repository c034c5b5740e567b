package poll

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery: f is called again and again until ctx ends, never after
// Every returns, and not at all when the interval is not positive.
func TestEvery(t *testing.T) {
	t.Run("until ctx ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Millisecond, func() {
				if calls.Add(1) == 3 {
					cancel()
				}
			})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Every did not return after ctx ended")
		}
		n := calls.Load()
		if n < 3 {
			t.Fatalf("f called %d times before Every returned, want at least 3", n)
		}
		time.Sleep(5 * time.Millisecond)
		if m := calls.Load(); m != n {
			t.Fatalf("f called %d times after Every returned", m-n)
		}
	})
	for _, interval := range []time.Duration{0, -time.Second} {
		t.Run("off at "+interval.String(), func(t *testing.T) {
			called := false
			Every(context.Background(), interval, func() { called = true }) // returns at once, or the test times out
			if called {
				t.Fatal("f called with polling off")
			}
		})
	}
	t.Run("not before the first interval", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		Every(ctx, time.Hour, func() { called = true })
		if called {
			t.Fatal("f called before an interval passed")
		}
	})
}
