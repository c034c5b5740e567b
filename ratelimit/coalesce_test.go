package ratelimit

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCoalescedMatchesSequential: deciding k requests for each of several
// keys in one script run answers each as redis_rate deciding them one
// after another would.
func TestCoalescedMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	l := Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}
	r := NewRedis(c, RedisOptions{Timeout: time.Second, Workers: 1, MaxBatch: 1})
	defer r.Close()
	counts := []int{7, 1, 3, 6}
	seq := make([][]Result, len(counts))
	for k, n := range counts {
		for i := 0; i < n; i++ {
			res, err := r.Allow(ctx, "seq"+strconv.Itoa(k), l)
			if err != nil {
				t.Fatal(err)
			}
			seq[k] = append(seq[k], res)
		}
	}
	// The same requests as one group per key, as the batcher builds
	// them, decided by one script run.
	var gs []*group
	for k, n := range counts {
		key := keyPrefix + "coalesced" + strconv.Itoa(k)
		g := &group{rc: rateCall{key: key, burst: 5, rate: 5, period: 2}}
		for i := 0; i < n; i++ {
			g.calls = append(g.calls, &call{cmd: redis.NewCmd(ctx, "evalsha", "x", 1, key, 5, 5, 2.0, 1)})
		}
		gs = append(gs, g)
	}
	cmd := coalescedCmd(ctx, gs, true)
	if err := c.Process(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	answerCoalesced(cmd, gs, time.Now().UnixNano())
	for k, g := range gs {
		for i, cl := range g.calls {
			v, err := cl.cmd.Slice()
			if err != nil {
				t.Fatal(err)
			}
			allowed, remaining := v[0].(int64) == 1, v[1].(int64)
			want := seq[k][i]
			if allowed != want.Allowed || remaining != want.Remaining {
				t.Errorf("key %d request %d: coalesced allowed=%v remaining=%d, sequential %+v", k, i, allowed, remaining, want)
			}
			retry, _ := strconv.ParseFloat(v[2].(string), 64)
			if !allowed && math.Abs(retry-want.RetryAfter.Seconds()) > 0.1 {
				t.Errorf("key %d request %d: retry %vs, sequential %v", k, i, retry, want.RetryAfter)
			}
			reset, _ := strconv.ParseFloat(v[3].(string), 64)
			if math.Abs(reset-want.ResetAfter.Seconds()) > 0.1 {
				t.Errorf("key %d request %d: reset %vs, sequential %v", k, i, reset, want.ResetAfter)
			}
		}
	}
}

// TestCoalescingUnderLoad: many concurrent callers on one key are exact
// and cost Redis far fewer script runs than decisions.
func TestCoalescingUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
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
