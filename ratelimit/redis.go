package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// keyPrefix starts every key the Redis limiter stores: keyPrefix + the
// caller's key holds that key's TAT, as float seconds since redisEpoch.
// It is the prefix redis_rate's allowN puts before the keys it is given
// (single decisions go through redis_rate); the coalescing script, Peek
// and Forget address the same keys, so that all of them read and write
// one TAT per key. TestRedisKeyPrefix checks that the two agree.
const keyPrefix = "rate:"

// Client is what the Redis limiter needs of a go-redis client: scripts
// and pipelines. redis.UniversalClient (standalone, Cluster, Sentinel)
// satisfies it.
type Client interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// RedisOptions configure a Redis limiter. The zero value is usable.
type RedisOptions struct {
	// Timeout is the deadline of every round trip to Redis. Zero means
	// 25ms.
	Timeout time.Duration
	// Backoff is how long calls fail fast with ErrStoreUnavailable after
	// a round trip failed, before Redis is tried again. Zero means 250ms.
	Backoff time.Duration
	// MaxBatch bounds how many decisions share one pipelined round trip.
	// Zero means 256.
	MaxBatch int
	// Workers is how many round trips may be in flight at once. Zero
	// means 2.
	Workers int
	// Observe, when set, is called after every round trip with its
	// duration, the number of decisions it carried and its error.
	Observe func(d time.Duration, n int, err error)
	// Now is the clock used for the backoff. Nil means time.Now.
	Now func() time.Time
}

// Redis is a Limiter backed by Redis through redis_rate (GCRA computed by
// a Lua script on Redis's own clock, so replicas with skewed clocks agree).
// Concurrent decisions are batched: callers queue their EVALSHA and a few
// workers send whatever is queued as one pipeline, so under load one
// round trip carries many decisions; outside a Cluster one script run
// decides all of them (coalesceSrc), in a Cluster one per key. Every
// round trip has a deadline.
type Redis struct {
	rl      *redis_rate.Limiter
	client  Client
	queue   chan *call
	timeout time.Duration
	backoff time.Duration
	max     int
	observe func(time.Duration, int, error)
	now     func() time.Time

	leases    *leases
	multiKey  bool         // one script run may decide keys of different hash slots: not a Cluster or Ring
	downUntil atomic.Int64 // unix ns; calls before it fail fast
	closeOnce sync.Once
	done      chan struct{} // closed by Close: workers stop
	closed    chan struct{} // closed once the workers stopped and the queue was drained
	wg        sync.WaitGroup
	calls     sync.Pool
}

// call is one queued script invocation.
type call struct {
	cmd      *redis.Cmd
	deadline time.Time // the caller's: queued at most this long, in all
	done     chan struct{}
}

// NewRedis returns a Redis limiter on client and starts its workers; Close
// stops them.
func NewRedis(client Client, o RedisOptions) *Redis {
	r := &Redis{
		client:  client,
		timeout: o.Timeout,
		backoff: o.Backoff,
		max:     o.MaxBatch,
		observe: o.Observe,
		now:     o.Now,
		done:    make(chan struct{}),
		closed:  make(chan struct{}),
		leases:  newLeases(),
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		// A script's keys must live on one node (one hash slot in a
		// Cluster): each key gets its own script run there.
	default:
		r.multiKey = true
	}
	if r.timeout <= 0 {
		r.timeout = 25 * time.Millisecond
	}
	if r.backoff <= 0 {
		r.backoff = 250 * time.Millisecond
	}
	if r.max <= 0 {
		r.max = 256
	}
	if r.now == nil {
		r.now = time.Now
	}
	workers := o.Workers
	if workers <= 0 {
		workers = 2
	}
	r.queue = make(chan *call, 4*r.max)
	r.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	r.rl = redis_rate.NewLimiter(batcher{r})
	r.wg.Add(workers)
	for i := 0; i < workers; i++ {
		go r.work()
	}
	return r
}

// Allow implements Limiter.
func (r *Redis) Allow(ctx context.Context, key string, l Limit) (Result, error) {
	return r.AllowN(ctx, key, l, 1)
}

// AllowN decides a request of cost n; a cost above the burst never
// passes, and Redis is not asked.
func (r *Redis) AllowN(ctx context.Context, key string, l Limit, n int64) (Result, error) {
	if !l.valid(n) {
		return never(), nil
	}
	now := r.now().UnixNano()
	if now < r.downUntil.Load() {
		return Result{}, ErrStoreUnavailable
	}
	if n == 1 {
		lk := leaseKey{key: key, burst: int(l.Burst), rate: int(l.Rate), period: l.Period.Seconds()}
		if res, ok := r.leases.take(lk, now); ok {
			return res, nil
		}
	}
	res, err := r.rl.AllowN(ctx, key, redis_rate.Limit{
		Rate: int(l.Rate), Period: l.Period, Burst: int(l.Burst),
	}, int(n))
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: redis: %w", err)
	}
	out := Result{Allowed: res.Allowed > 0, ResetAfter: res.ResetAfter}
	if out.Allowed {
		out.Remaining = int64(res.Remaining)
	} else {
		out.RetryAfter = res.RetryAfter
	}
	if out.ResetAfter < 0 {
		out.ResetAfter = 0
	}
	return out, nil
}

// Reset forgets key under limit's accounting, as if it were never used.
func (r *Redis) Reset(ctx context.Context, key string) error {
	return r.rl.Reset(ctx, key)
}

// Close stops the workers and fails the calls still queued. Calls after
// Close fail. It does not close the client.
func (r *Redis) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		r.wg.Wait()
		for {
			select {
			case c := <-r.queue:
				c.cmd.SetErr(errClosed)
				c.done <- struct{}{}
				continue
			default:
			}
			break
		}
		close(r.closed)
	})
	return nil
}

// errClosed is returned by calls made after Close.
var errClosed = errors.New("ratelimit: redis limiter closed")

// submit queues cmd and waits for its round trip, or for ctx.
func (r *Redis) submit(ctx context.Context, cmd *redis.Cmd) {
	c := r.calls.Get().(*call)
	c.cmd = cmd
	c.deadline = r.now().Add(r.timeout)
	select {
	case r.queue <- c:
	case <-ctx.Done():
		cmd.SetErr(ctx.Err())
		c.cmd = nil
		r.calls.Put(c)
		return
	case <-r.done:
		cmd.SetErr(errClosed)
		c.cmd = nil
		r.calls.Put(c)
		return
	}
	// A worker always answers within its own deadline, so waiting for it
	// is bounded; the call is only reused once answered.
	select {
	case <-c.done:
		c.cmd = nil
		r.calls.Put(c)
	case <-r.closed:
		// Queued after Close drained the queue: no one will answer, and
		// no one else holds the call.
		if cmd.Err() == nil {
			cmd.SetErr(errClosed)
		}
	}
}

// work sends queued calls in pipelines until Close.
func (r *Redis) work() {
	defer r.wg.Done()
	batch := make([]*call, 0, r.max)
	var groups []group
	index := make(map[rateCall]int)
	for {
		var first *call
		select {
		case first = <-r.queue:
		case <-r.done:
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < r.max {
			select {
			case c := <-r.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		groups = groupBatch(batch, groups, index)
		r.roundTrip(batch, groups)
	}
}

// roundTrip sends batch, sorted into groups, as one pipeline and answers
// every call in it. A group of several calls for one key and limit is
// decided by one coalesced script run. Each call's deadline runs from
// when it was queued: calls already past it fail without being sent, and
// the round trip ends by the earliest deadline of those sent, so that no
// decision waits more than RedisOptions.Timeout in all.
func (r *Redis) roundTrip(batch []*call, groups []group) {
	start := r.now()
	deadline := start.Add(r.timeout)
	live := groups[:0] // filtered in place
	for i := range groups {
		g := &groups[i]
		if g.calls[0].deadline.After(start) { // the oldest of the group
			live = append(live, *g)
			if g.calls[0].deadline.Before(deadline) {
				deadline = g.calls[0].deadline
			}
			continue
		}
		for _, c := range g.calls {
			c.cmd.SetErr(context.DeadlineExceeded)
		}
	}
	if len(live) == 0 {
		r.answerAll(batch, start, context.DeadlineExceeded)
		return
	}
	groups = live
	// The deadline is on r.now's clock, which need not be the runtime's
	// (a replica's clock is only ever compared with itself): the context
	// gets the time left, not the instant.
	ctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(start))
	defer cancel()
	// The script runs: outside a Cluster one for every redis_rate call of
	// the batch, in a Cluster one per group of several calls for a key. A
	// call in no run (alone for its key in a Cluster, or alone in the
	// batch) is sent as redis_rate made it.
	var runs [][]*group
	for i := range groups {
		g := &groups[i]
		if g.rc.key == "" {
			continue // not a single-request redis_rate call: sent as it is
		}
		if len(g.calls) > 1 {
			if k, ok := strings.CutPrefix(g.rc.key, keyPrefix); ok {
				g.lease = r.leases.get(leaseKey{key: k, burst: g.rc.burst, rate: g.rc.rate, period: g.rc.period})
				g.extra = g.lease.extra(g.rc.burst, len(g.calls), start.UnixNano())
			}
		}
		switch {
		case r.multiKey && len(runs) > 0:
			runs[0] = append(runs[0], g)
		case r.multiKey || len(g.calls) > 1:
			runs = append(runs, []*group{g})
		}
	}
	if len(runs) == 1 && len(runs[0]) == 1 && len(runs[0][0].calls) == 1 {
		runs = nil // one decision: redis_rate's own call
	}
	cmds := make([]redis.Cmder, 0, len(groups))
	for _, run := range runs {
		for _, g := range run {
			g.scripted = true
		}
		cmds = append(cmds, coalescedCmd(ctx, run, false))
	}
	for i := range groups {
		if g := &groups[i]; !g.scripted {
			cmds = append(cmds, g.calls[0].cmd)
		}
	}
	var err error
	if len(cmds) == 1 {
		err = r.client.Process(ctx, cmds[0])
	} else {
		p := r.client.Pipeline()
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		_, err = p.Exec(ctx)
	}
	for i, run := range runs {
		cmd := cmds[i].(*redis.Cmd)
		if isNoScript(cmd.Err()) { // Redis restarted: send the script itself
			cmd = coalescedCmd(ctx, run, true)
			if e := r.client.Process(ctx, cmd); e != nil && err == nil {
				err = e
			}
		}
		answerCoalesced(cmd, run, r.now().UnixNano())
	}
	r.answerAll(batch, start, err)
}

// answerAll records the round trip's outcome and wakes every caller. A
// reply error that is not a store failure (NOSCRIPT, which redis_rate
// answers by sending the script) is not counted as one.
func (r *Redis) answerAll(batch []*call, start time.Time, err error) {
	if !isStoreFailure(err) {
		err = nil
	} else {
		r.downUntil.Store(r.now().Add(r.backoff).UnixNano())
		if c, ok := r.client.(*redis.ClusterClient); ok {
			// A master lost or failed over: go-redis reloads the slot map
			// on MOVED, not on a refused or silent node, and otherwise
			// only every few seconds. Reloading (in the background, at
			// most every 200ms) after each failed round trip sends the
			// next one, after the backoff, to the promoted replica.
			c.ReloadState(context.Background())
		}
	}
	if r.observe != nil {
		r.observe(r.now().Sub(start), len(batch), err)
	}
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// isStoreFailure reports whether err means Redis could not be reached or
// did not answer in time (as opposed to a script error such as NOSCRIPT,
// which redis_rate handles by sending the script).
func isStoreFailure(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// A reply from Redis: the store is up. LOADING and similar
		// transient states are still failures to decide.
		msg := rerr.Error()
		return strings.HasPrefix(msg, "LOADING") || strings.HasPrefix(msg, "CLUSTERDOWN") ||
			strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "MASTERDOWN")
	}
	return true
}

// batcher gives redis_rate the script methods it needs, queueing EVALSHA
// (the per-decision call) for the pipelines and sending the rest (EVAL
// after NOSCRIPT, script loading, DEL) directly.
type batcher struct{ r *Redis }

func (b batcher) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 3, 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = "evalsha", sha1, len(keys)
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // routes the call to the key's node in a Cluster
	}
	b.r.submit(ctx, cmd)
	return cmd
}

func (b batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	return b.r.client.Eval(ctx, script, keys, args...)
}

func (b batcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	return b.r.client.EvalRO(ctx, script, keys, args...)
}

func (b batcher) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	return b.r.client.EvalShaRO(ctx, sha1, keys, args...)
}

func (b batcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.r.client.ScriptExists(ctx, hashes...)
}

func (b batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.r.client.ScriptLoad(ctx, script)
}

func (b batcher) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	ctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	return b.r.client.Del(ctx, keys...)
}
