package lograte

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var l OncePerSecond
	for _, tt := range []struct {
		at   time.Duration // after t0
		want bool
	}{
		{0, true},                       // the first event passes
		{500 * time.Millisecond, false}, // within the second
		{999 * time.Millisecond, false},
		{time.Second, true}, // a second after the last that passed
		{1500 * time.Millisecond, false},
		{5 * time.Second, true},
	} {
		if got := l.Allow(t0.Add(tt.at)); got != tt.want {
			t.Errorf("Allow(t0+%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
}

// TestAllowRacing checks that of events racing at one instant, exactly
// one passes.
func TestAllowRacing(t *testing.T) {
	var l OncePerSecond
	var passed atomic.Int64
	now := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.Allow(now) {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	if passed.Load() != 1 {
		t.Fatalf("%d events passed, want 1", passed.Load())
	}
}
