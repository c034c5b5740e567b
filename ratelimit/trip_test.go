package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestCoalescingUnderLoad: many concurrent callers on one key are exact
// and cost Redis far fewer script runs than decisions.
func TestCoalescingUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
	defer r.Close()
	l := Limit{Rate: 1000, Period: time.Hour, Burst: 1000}
	before := srv.CommandCalls()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				res, err := r.Allow(context.Background(), "hot", l)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if allowed.Load() != 1000 {
		t.Errorf("allowed %d of 1600, want exactly 1000", allowed.Load())
	}
	if runs >= 1600/2 {
		t.Errorf("%d script runs for 1600 decisions on one key; want them coalesced", runs)
	}
	t.Logf("1600 decisions on one key: %d script runs", runs)
}
