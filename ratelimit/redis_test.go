package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/clusterslot"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestManyKeysOneScriptRun: concurrent decisions for many different keys
// are exact per key, and outside a Cluster a round trip decides all of
// its keys in one script run instead of one per key.
func TestManyKeysOneScriptRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
	defer r.Close()
	l := Limit{Rate: 3, Period: time.Hour, Burst: 3}
	const keys, perKey = 200, 5
	before := srv.CommandCalls()
	var allowed [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < keys*perKey; i += 64 {
				k := i % keys
				res, err := r.Allow(context.Background(), "many:"+strconv.Itoa(k), l)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	for k := range allowed {
		if n := allowed[k].Load(); n != 3 {
			t.Errorf("key %d: %d of %d allowed, want exactly 3", k, n, perKey)
		}
	}
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if runs >= keys*perKey/4 {
		t.Errorf("%d script runs for %d decisions on %d keys; want one run per round trip", runs, keys*perKey, keys)
	}
	t.Logf("%d decisions on %d keys: %d script runs", keys*perKey, keys, runs)
}

// BenchmarkRedisAllow measures one decision against a real Redis on
// loopback, one caller at a time and with 64 concurrent callers whose
// decisions share pipelined round trips, each on a key of its own: keys
// of a pool of 1024, which stay in Redis (warm), or of one so large that
// every decision's key is new to Redis, as in the many-keys benchmark
// (new), with one round trip in flight (the default) or more
// (inflight=2, 4: smaller runs, less waiting). With 64 callers it
// reports per decision the CPU this process and redis-server spent, the
// script runs and the microseconds Redis counted in them.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name                  string
		conc, nkeys, inFlight int
	}{
		{"callers=1", 1, 1 << 10, 0}, {"callers=64", 64, 1 << 10, 0}, {"callers=64/new", 64, 1 << 18, 0},
		{"callers=64/new/inflight=2", 64, 1 << 18, 2}, {"callers=64/new/inflight=4", 64, 1 << 18, 4},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout, MaxInFlight: bc.inFlight})
			defer r.Close()
			ks := benchKeys(bc.nkeys)
			mask := int64(bc.nkeys - 1)
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			if bc.conc == 1 {
				for b.Loop() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&mask], benchLimit); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(bc.conc / 2) // GOMAXPROCS is 2 here: conc goroutines
			defer reportRedisCost(b, srv)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&mask], benchLimit); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// reportRedisCost resets b's timer and returns the function that reports,
// per operation, what Redis and this process spent since: the script
// runs, the microseconds Redis counted in them, and the CPU of both.
func reportRedisCost(b *testing.B, srv *redistest.Server) func() {
	before, runs := scriptMicros(b, srv), srv.CommandCalls()["evalsha"]
	cpu, redisCPU := processCPU(b), srv.CPU(b)
	b.ResetTimer()
	return func() {
		b.ReportMetric((scriptMicros(b, srv)-before)/float64(b.N), "redis-µs/op")
		b.ReportMetric(float64(srv.CommandCalls()["evalsha"]-runs)/float64(b.N), "runs/op")
		// CPU rather than time: on a shared machine they differ.
		b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(srv.CPU(b)-redisCPU)/float64(b.N), "redis-cpu-ns/op")
	}
}

// TestRedisKeyPrefix: a decision is stored under keyPrefix + key (the key
// redis_rate used, so that replicas that decided through it share counts
// during an upgrade), where Peek reads it.
func TestRedisKeyPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
	defer r.Close()
	l := Limit{Rate: 2, Period: time.Hour, Burst: 2}
	if _, err := r.Allow(context.Background(), "prefixed", l); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Do("EXISTS", keyPrefix+"prefixed"); err != nil || n.(int64) != 1 {
		t.Fatalf("EXISTS %s = %v, %v; want the key the decision wrote", keyPrefix+"prefixed", n, err)
	}
	res, err := r.Peek(context.Background(), "prefixed", l)
	if err != nil || res.Remaining != 1 {
		t.Errorf("Peek after one request: %+v, %v; want 1 remaining", res, err)
	}
}

// TestRedisClusterFailover: a request whose limits live on two masters
// of a Cluster fails, as a store failure, while one
// master is lost; what the other master charged meanwhile is given back;
// once the replica is promoted decisions resume where the counts were.
func TestRedisClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	cl := redistest.StartReplicatedCluster(t, 3, time.Second)
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 200 * time.Millisecond
	r := NewRedis(client, RedisOptions{Timeout: timeout, Backoff: 50 * time.Millisecond})
	defer r.Close()
	l := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	// Two keys on two different masters.
	a, b := "failover:a", ""
	ownerA, err := cl.SlotOwner(cl.Servers[0], int(clusterslot.Of(keyPrefix+a)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; b == ""; i++ {
		k := "failover:b" + strconv.Itoa(i)
		if o, err := cl.SlotOwner(cl.Servers[0], int(clusterslot.Of(keyPrefix+k))); err == nil && o != ownerA {
			b = k
		}
	}
	q := Request{Checks: []Check{{Key: a, Limit: l}, {Key: b, Limit: l}}}
	var ans Answer
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := r.AllowAll(ctx, &q, &ans); err != nil || !ans.Allowed {
			t.Fatalf("request %d before the failover: %+v %v", i, ans, err)
		}
	}
	// The counts reach the lost master's replica first: a write in their
	// slot, then WAIT on its connection.
	sync := redis.NewClient(&redis.Options{Addr: ownerA, PoolSize: 1, MaxRetries: -1})
	if err := sync.Do(ctx, "SET", "{"+keyPrefix+a+"}:sync", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := sync.Do(ctx, "WAIT", 1, 30000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}
	_ = sync.Close()
	cl.Server(ownerA).Stop()

	failures := 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.AllowAll(ctx, &q, &ans)
		if err == nil {
			break
		}
		failures++
		if time.Now().After(deadline) {
			t.Fatalf("no decision 20s after the master was lost: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if failures == 0 {
		t.Error("no decision failed while a master was lost")
	}
	// Three requests before, one after: 6 left on the lost master's key.
	// The failed decisions charged the other key and gave it back, but
	// not while the Cluster refused every write (CLUSTERDOWN, from the
	// node timeout to the promotion): a give-back that fails leaves the
	// charge, as a failed decision always did before.
	if !ans.Allowed || ans.Results[0].Result.Remaining != 6 {
		t.Errorf("after the failover (%d failed decisions): %+v, want 6 remaining on the lost master's key", failures, ans)
	}
	if got := ans.Results[1].Result.Remaining; got > 6 || got < 3 {
		t.Errorf("after %d failed decisions the other key has %d remaining, want 6 (at most 3 charges not given back as the Cluster went down)", failures, got)
	}
	t.Logf("%d failed decisions; the other key has %d remaining of 6", failures, ans.Results[1].Result.Remaining)
}

// BenchmarkRedisAllowAll measures a request decided against two limits
// at once, with 64 concurrent callers: a hot key every request shares
// (one client address) and a key of its own (a new token each time, as in
// the many-keys benchmark), decided in one script run per round trip.
func BenchmarkRedisAllowAll(b *testing.B) {
	srv := redistest.Start(b)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
	defer r.Close()
	ks := benchKeys(1 << 16)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // GOMAXPROCS is 2 here: 64 goroutines
	b.RunParallel(func(pb *testing.PB) {
		var ans Answer
		q := Request{Checks: make([]Check, 2)}
		for pb.Next() {
			i := n.Add(1)
			q.Checks[0] = Check{Key: "bench:hot", Limit: benchLimit}
			q.Checks[1] = Check{Key: ks[i&(1<<16-1)], Limit: benchLimit}
			if err := r.AllowAll(ctx, &q, &ans); err != nil || !ans.Allowed {
				b.Error(ans, err)
				return
			}
		}
	})
}

// scriptMicros returns the microseconds Redis has spent running scripts
// (EVALSHA and EVAL), from INFO commandstats.
func scriptMicros(tb testing.TB, srv *redistest.Server) float64 {
	return commandMicros(tb, srv, "evalsha", "eval")
}

// commandMicros returns the microseconds Redis has spent in the named
// commands (those a script calls counted too), from INFO commandstats.
func commandMicros(tb testing.TB, srv *redistest.Server, names ...string) float64 {
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if us, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(us, 64)
				total += n
			}
		}
	}
	return total
}

// BenchmarkDecisionScript measures Redis's side of a decision alone:
// script runs of 32 single-limit requests, each on a key new to Redis (as
// in the many-keys benchmark), sent one after another. Per decision it
// reports the microseconds Redis counted in the script runs, and of them
// in reading the keys (GET, MGET) and in SET, and redis-server's CPU.
//
// With EXGATE_BENCH_REDIS set to an address, it sends its runs there and
// reports nothing of Redis's: to count the instructions a decision costs
// a redis-server run under callgrind (docs/performance-history.md, "Many keys:
// what Redis does per decision").
func BenchmarkDecisionScript(b *testing.B) {
	var srv *redistest.Server
	var c *redis.Client
	if addr := os.Getenv("EXGATE_BENCH_REDIS"); addr != "" {
		c = redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
	} else {
		srv = redistest.Start(b)
		c = srv.Client()
	}
	ctx := context.Background()
	const perRun = 32
	ks := benchKeys(1 << 18)
	reqs := make([]Request, perRun)
	for i := range reqs {
		reqs[i] = Request{Checks: make([]Check, 1)}
	}
	bld := runBuilder{d: newDecision("")}
	n, eval := 0, true
	run := func() {
		bld.reset()
		for i := range reqs {
			reqs[i].Checks[0] = Check{Key: ks[n&(1<<18-1)], Limit: benchLimit}
			n++
			bld.add(&reqs[i], modeDecide, nil, false, false, false)
		}
		cmd := bld.cmd(ctx, eval, false)
		if err := c.Process(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
	run() // Redis knows the script: EVALSHA from here on
	eval = false
	if srv == nil {
		b.ResetTimer()
		for i := 0; i < b.N; i += perRun {
			run()
		}
		return
	}
	script, get, set := scriptMicros(b, srv), commandMicros(b, srv, "get", "mget"), commandMicros(b, srv, "set", "setex")
	cpu := srv.CPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i += perRun {
		run()
	}
	d := float64(b.N)
	b.ReportMetric((scriptMicros(b, srv)-script)/d, "script-µs/op")
	b.ReportMetric((commandMicros(b, srv, "get", "mget")-get)/d, "get-µs/op")
	b.ReportMetric((commandMicros(b, srv, "set", "setex")-set)/d, "set-µs/op")
	b.ReportMetric(float64(srv.CPU(b)-cpu)/d, "redis-cpu-ns/op")
}

// TestRedisCloseWithRoundTripInFlight: with Redis paused, the first caller
// sends its round trip itself and the callers after it queue; Close fails
// the queued calls at once, waits for the round trip in flight (which
// ends by its deadline), and calls after Close fail. Nothing waits for
// ever and no call is answered twice.
func TestRedisCloseWithRoundTripInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	r := NewRedis(client, RedisOptions{Timeout: timeout, Backoff: time.Millisecond, MaxInFlight: 1})
	ctx := context.Background()
	if _, err := r.Allow(ctx, "close:warm", benchLimit); err != nil { // the connection is open
		t.Fatal(err)
	}
	srv.Freeze()
	defer srv.Thaw()
	errs := make(chan error, 5)
	// lane returns how many round trips of the limits' lane are in
	// flight and how many calls wait in its queue.
	lane := func() (sending, queued int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.decide.sending, len(r.decide.queue)
	}
	waitFor := func(what string, sending, queued int) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			if s, q := lane(); s == sending && q == queued {
				return
			}
			if time.Now().After(deadline) {
				s, q := lane()
				t.Fatalf("%s: %d round trips in flight, %d calls queued", what, s, q)
			}
		}
	}
	go func() { _, err := r.Allow(ctx, "close:0", benchLimit); errs <- err }()
	waitFor("close:0's round trip in flight", 1, 0)
	for i := 1; i < 5; i++ {
		go func() { _, err := r.Allow(ctx, "close:"+strconv.Itoa(i), benchLimit); errs <- err }()
	}
	waitFor("the others queued", 1, 4)
	// Close returns while Redis is still paused: the round trip in flight
	// ends by its deadline. The 30s only bounds a hang.
	done := make(chan error, 1)
	go func() { done <- r.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return with Redis paused")
	}
	closed, failed := 0, 0
	for range 5 {
		select {
		case err := <-errs:
			switch {
			case errors.Is(err, errClosed):
				closed++
			case err != nil:
				failed++
			default:
				t.Error("a call was allowed with Redis paused")
			}
		case <-time.After(30 * time.Second): // only bounds a hang: Redis stays paused
			t.Fatal("a call was not answered after Close")
		}
	}
	if closed != 4 || failed != 1 {
		t.Errorf("%d calls failed as closed and %d otherwise; want the 4 queued closed and the one in flight past its deadline", closed, failed)
	}
	time.Sleep(10 * time.Millisecond) // past the backoff: the call reaches submit
	if _, err := r.Allow(ctx, "close:after", benchLimit); !errors.Is(err, errClosed) {
		t.Errorf("after Close: %v, want errClosed", err)
	}
}

// processCPU is the CPU time this process has used so far (user and
// system, all threads).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// replyError is a reply Redis sent as an error, as go-redis reports one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestStoreFailure: which errors put the limiter in its backoff, and
// which replies say a node served nothing (Unserved), for the limiter
// and for duplicate protection's joined claims alike; a reply wrapped by
// the round trip's error is read the same.
func TestStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		name              string
		err               error
		failure, unserved bool
	}{
		{"none", nil, false, false},
		{"nil reply", redis.Nil, false, false},
		{"script error", replyError("ERR user_script:1: bad"), false, false},
		{"noscript", replyError("NOSCRIPT No matching script"), false, false},
		{"out of memory", replyError("OOM command not allowed when used memory > 'maxmemory'"), false, false},
		{"connection refused", syscall.ECONNREFUSED, true, false},
		{"deadline", context.DeadlineExceeded, true, false},
		{"moved", replyError("MOVED 3999 127.0.0.1:6381"), true, true},
		{"ask", replyError("ASK 3999 127.0.0.1:6381"), true, true},
		{"cluster down", replyError("CLUSTERDOWN The cluster is down"), true, true},
		{"try again", replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true, true},
		{"loading", replyError("LOADING Redis is loading the dataset in memory"), true, true},
		{"master down", replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'"), true, true},
		{"wrapped moved", fmt.Errorf("ratelimit: redis: %w", replyError("MOVED 3999 127.0.0.1:6381")), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isStoreFailure(tc.err); got != tc.failure {
				t.Errorf("isStoreFailure(%v) = %v, want %v", tc.err, got, tc.failure)
			}
			if got := Unserved(tc.err); got != tc.unserved {
				t.Errorf("Unserved(%v) = %v, want %v", tc.err, got, tc.unserved)
			}
		})
	}
}

// heldClient is a client of a real Redis whose round trips wait at a
// gate while hold is set: each announces itself on entered and goes on
// when released.
type heldClient struct {
	*redis.Client
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldClient) Process(ctx context.Context, cmd redis.Cmder) error {
	if h.hold.Load() {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Client.Process(ctx, cmd)
}

// TestRedisSenderAnswersItsOwnCaller: the caller whose round trip is in
// flight when others queue gets its answer when that round trip ends,
// and the first queued caller sends the next one: the sender does not
// go on sending the queue, where its own caller's answer would wait for
// every round trip of a steady load.
func TestRedisSenderAnswersItsOwnCaller(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	hc := &heldClient{Client: srv.Client(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	r := NewRedis(hc, RedisOptions{Timeout: time.Minute})
	defer r.Close()
	ctx := context.Background()
	if _, err := r.Allow(ctx, "sender:warm", benchLimit); err != nil { // the script is loaded
		t.Fatal(err)
	}
	hc.hold.Store(true)
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := r.Allow(ctx, "sender:first", benchLimit); first <- err }()
	<-hc.entered // the first caller's round trip is held
	go func() { _, err := r.Allow(ctx, "sender:second", benchLimit); second <- err }()
	for queued := 0; queued == 0; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		queued = len(r.decide.queue)
		r.mu.Unlock()
	}
	hc.release <- struct{}{}
	<-hc.entered // the second caller's round trip is held
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // only bounds a hang
		hc.hold.Store(false)
		close(hc.release) // lets Close end the round trip held
		t.Fatal("the first caller's answer waited for the round trip of a call queued after it")
	}
	hc.hold.Store(false)
	hc.release <- struct{}{}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}
