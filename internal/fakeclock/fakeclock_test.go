package fakeclock

import (
	"sync"
	"testing"
	"time"
)

// TestClockMovesOnlyWhenAdvanced: the clock stands where it was set until
// Advance moves it, by exactly the sum of what concurrent callers asked.
func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	c := New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Advance(time.Second)
			_ = c.Now()
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(10*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v after ten seconds, want %v", got, want)
	}
}
