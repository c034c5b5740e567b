package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/clusterslot"
	"github.com/exgate/exgate/internal/redistest"
)

// testClaimFunc is a claim function for the tests: it records ARGV[1]
// in KEYS[1] unless the key is taken, and raises an error for "boom".
const testClaimFunc = `
local function claim(KEYS, ARGV)
  if ARGV[1] == "boom" then
    return redis.call("INCR", "not-a-number-" .. KEYS[1], "extra")
  end
  if redis.call("SET", KEYS[1], ARGV[1], "NX") then
    return {"claimed", ARGV[1]}
  end
  return {"taken", redis.call("GET", KEYS[1])}
end
`

func claimRequest(key, claimKey, arg string, l Limit) *Request {
	return &Request{
		Checks: []Check{{Key: key, Limit: l}},
		Claim:  &ClaimPart{Keys: []string{claimKey}, Args: []any{arg}, Timeout: time.Second},
	}
}

// TestClaimRidesWithRequest: a request's claim runs in its script run
// only when its limits let it pass, and the request is charged only when
// its claim takes what it claims (a claim refused, or failed, charges
// nothing); a claim that fails fails alone; a limiter without a claim
// function, and the memory limiter, do not send it.
func TestClaimRidesWithRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	ctx := context.Background()
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout, ClaimFunc: testClaimFunc})
	defer r.Close()
	one := Limit{Rate: 1, Period: time.Hour, Burst: 1}

	cases := []struct {
		name                string
		q                   *Request
		allowed, run        bool
		reply               []any
		claimErr, keyExists bool
		charged             bool
	}{
		{"allowed: claimed", claimRequest("c:1", "claim:1", "v1", one), true, true, []any{"claimed", "v1"}, false, true, true},
		{"allowed: taken", claimRequest("c:2", "claim:1", "v2", one), true, true, []any{"taken", "v1"}, false, true, false},
		{"refused: not run", claimRequest("c:1", "claim:refused", "v3", one), false, false, nil, false, false, true},
		{"claim fails alone", claimRequest("c:3", "claim:boom", "boom", one), true, true, nil, true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ans Answer
			if err := r.AllowAll(ctx, tc.q, &ans); err != nil {
				t.Fatal(err)
			}
			cl := ans.Claim
			if ans.Allowed != tc.allowed || !cl.Sent || cl.Run != tc.run {
				t.Fatalf("allowed %v, claim %+v; want allowed %v, sent, run %v", ans.Allowed, cl, tc.allowed, tc.run)
			}
			var ce ClaimError
			if tc.claimErr != errors.As(cl.Err, &ce) {
				t.Errorf("claim error %v, want a ClaimError: %v", cl.Err, tc.claimErr)
			}
			if len(cl.Reply) != len(tc.reply) {
				t.Fatalf("reply %v, want %v", cl.Reply, tc.reply)
			}
			for i := range tc.reply {
				if cl.Reply[i] != tc.reply[i] {
					t.Errorf("reply %v, want %v", cl.Reply, tc.reply)
				}
			}
			n, err := srv.Do("EXISTS", tc.q.Claim.Keys[0])
			if err != nil || (n == int64(1)) != tc.keyExists {
				t.Errorf("claim key exists = %v %v, want %v", n, err, tc.keyExists)
			}
			if ans.Uncharged != (tc.allowed && !tc.charged) {
				t.Errorf("Uncharged = %v for a request charged: %v", ans.Uncharged, tc.charged)
			}
			// Its key holds one request (the limit's burst) when it was charged.
			if res, err := r.Peek(ctx, tc.q.Checks[0].Key, one); err != nil || (res.Remaining == 0) != tc.charged {
				t.Errorf("its key after the request: %+v %v, want charged: %v", res, err, tc.charged)
			}
		})
	}

	t.Run("concurrent claims, batched, one claimed", func(t *testing.T) { checkConcurrentClaimsOneClaimed(t, r) })

	t.Run("not sent", func(t *testing.T) {
		plain := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		defer plain.Close()
		mem := NewMemory(MemoryOptions{})
		for name, lim := range map[string]Store{"redis without a claim function": plain, "memory": mem} {
			var ans Answer
			q := claimRequest("c:ns:"+name, "claim:ns", "v", one)
			if err := lim.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || ans.Claim.Sent {
				t.Errorf("%s: allowed %v, claim %+v, %v; want allowed, not sent", name, ans.Allowed, ans.Claim, err)
			}
		}
		if n, err := srv.Do("EXISTS", "claim:ns"); err != nil || n != int64(0) {
			t.Errorf("a claim not sent was run: EXISTS = %v %v", n, err)
		}
	})

	t.Run("store down", func(t *testing.T) { checkClaimWithStoreDown(t, srv, one) })
}

// checkClaimWithStoreDown checks that with srv stopped a claim is sent and
// fails after its deadline, and that in the backoff that follows it is not
// sent: the caller claims on its own.
func checkClaimWithStoreDown(t *testing.T, srv *redistest.Server, one Limit) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	r := NewRedis(c, RedisOptions{Timeout: 50 * time.Millisecond, ClaimFunc: testClaimFunc})
	defer r.Close()
	srv.Freeze()
	defer srv.Thaw()
	var ans Answer
	q := claimRequest("c:down", "claim:down", "v", one)
	q.Claim.Timeout = 200 * time.Millisecond
	start := time.Now()
	err := r.AllowAll(context.Background(), q, &ans)
	d := time.Since(start)
	if err == nil || !ans.Claim.Sent || ans.Claim.Err == nil {
		t.Fatalf("with Redis stopped: %v, claim %+v; want an error, the claim sent and failed", err, ans.Claim)
	}
	if d < q.Claim.Timeout {
		t.Errorf("with Redis stopped: failed after %v, before the claim's deadline %v", d, q.Claim.Timeout)
	}
	// Failing fast in the backoff: not sent, the caller claims on
	// its own.
	ans = Answer{}
	if err := r.AllowAll(context.Background(), claimRequest("c:down", "claim:down", "v", one), &ans); !errors.Is(err, ErrStoreUnavailable) || ans.Claim.Sent {
		t.Errorf("in the backoff: %v, claim %+v; want ErrStoreUnavailable, not sent", err, ans.Claim)
	}
}

// checkConcurrentClaimsOneClaimed sends 50 concurrent requests through r,
// batched, all claiming one key, and checks that one claimed it.
func checkConcurrentClaimsOneClaimed(t *testing.T, r *Redis) {
	ctx := context.Background()
	many := Limit{Rate: 1000, Period: time.Second, Burst: 1000}
	var wg sync.WaitGroup
	var mu sync.Mutex
	claimed := 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ans Answer
			if err := r.AllowAll(ctx, claimRequest("c:many", "claim:same", strconv.Itoa(i), many), &ans); err != nil {
				t.Error(err)
				return
			}
			if ans.Claim.Run && ans.Claim.Reply[0] == "claimed" {
				mu.Lock()
				claimed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if claimed != 1 {
		t.Errorf("50 concurrent claims of one key: %d claimed, want 1", claimed)
	}
}

// keyOn returns a key starting with prefix whose slot a master other
// than (or, with same, the same as) the one serving slot s serves.
func keyOn(t *testing.T, cl *redistest.Cluster, prefix string, s uint16, same bool) string {
	t.Helper()
	owner, err := cl.SlotOwner(cl.Servers[0], int(s))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		k := prefix + strconv.Itoa(i)
		o, err := cl.SlotOwner(cl.Servers[0], int(clusterslot.Of(keyPrefix+k)))
		if err == nil && (o == owner) == same && clusterslot.Of(keyPrefix+k) != s {
			return k
		}
	}
	t.Fatalf("no key %s* on a master %s %s", prefix, map[bool]string{true: "same as", false: "other than"}[same], owner)
	return ""
}

// claimTag is the hash tag of the keys the cluster tests claim: their slot
// is the claim's slot.
const claimTag = "{acct}"

// claimCluster is a Redis Cluster of three masters and a limiter on it with
// the test claim function, counting its round trips.
type claimCluster struct {
	t      *testing.T // the test the keys are looked up for
	cl     *redistest.Cluster
	client *redis.ClusterClient
	r      *Redis
	trips  atomic.Int64
	// one is a limit of one request an hour; many is one that lets
	// every request of a test pass.
	one, many Limit
}

// newClaimCluster starts the cluster and its limiter for t.
func newClaimCluster(t *testing.T) *claimCluster {
	f := &claimCluster{t: t, cl: redistest.StartCluster(t, 3),
		one:  Limit{Rate: 1, Period: time.Hour, Burst: 1},
		many: Limit{Rate: 1000, Period: time.Second, Burst: 1000}}
	f.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: f.cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = f.client.Close() })
	f.r = NewRedis(f.client, RedisOptions{Timeout: testStoreTimeout, ClaimFunc: testClaimFunc, Observe: func(time.Duration, int, error) {
		f.trips.Add(1)
	}})
	t.Cleanup(func() { _ = f.r.Close() })
	return f
}

// same returns a limit key in the claim's slot (a hash tag).
func (f *claimCluster) same(name string) string { return claimTag + name }

// other returns a limit key on another master than the claim's.
func (f *claimCluster) other(name string) string {
	return keyOn(f.t, f.cl, "other:"+name+":", clusterslot.Of(claimTag), false)
}

// req returns a request of checks claiming claimKey in the claim's slot.
func (f *claimCluster) req(claimKey string, checks ...Check) *Request {
	return &Request{Checks: checks, Claim: &ClaimPart{Keys: []string{claimTag + claimKey}, Args: []any{claimKey}, Timeout: time.Second}}
}

// spent returns key after spending its limit of one.
func (f *claimCluster) spent(key string) string {
	if res, err := f.r.Allow(context.Background(), key, f.one); err != nil || !res.Allowed {
		f.t.Fatalf("spending %s: %+v %v", key, res, err)
	}
	return key
}

// TestClaimRidesInCluster: in a Redis Cluster a request's claim goes in
// the same round trip as its limits, on the master of its keys' slot:
// after the request's part in that slot, run only when that part passes;
// with no part there, on its own, whatever the other parts decide. A
// claim that ran keeps its reply when another node fails, and
// concurrent identical claims from several limiters give one claimed.
func TestClaimRidesInCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-servers")
	}
	f := newClaimCluster(t)
	ctx := context.Background()
	cases := []struct {
		name         string
		q            *Request
		allowed, run bool
	}{
		{"part in the claim's slot passes", f.req("c1", Check{Key: f.same("l1"), Limit: f.one}), true, true},
		{"part in the claim's slot refuses", f.req("c2", Check{Key: f.spent(f.same("l2")), Limit: f.one}), false, false},
		{"no part in the claim's slot, passes", f.req("c3", Check{Key: f.other("l3"), Limit: f.one}), true, true},
		{"no part in the claim's slot, refused: the claim ran", f.req("c4", Check{Key: f.spent(f.other("l4")), Limit: f.one}), false, true},
		{"claim's part passes, another refuses", f.req("c5", Check{Key: f.same("l5"), Limit: f.one}, Check{Key: f.spent(f.other("l5")), Limit: f.one}), false, true},
		{"claim's part refuses, another passes", f.req("c6", Check{Key: f.spent(f.same("l6")), Limit: f.one}, Check{Key: f.other("l6"), Limit: f.one}), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.trips.Load()
			var ans Answer
			if err := f.r.AllowAll(ctx, tc.q, &ans); err != nil {
				t.Fatal(err)
			}
			cl := ans.Claim
			if ans.Allowed != tc.allowed || !cl.Sent || cl.Run != tc.run || cl.Err != nil {
				t.Fatalf("allowed %v, claim %+v; want allowed %v, sent, run %v", ans.Allowed, cl, tc.allowed, tc.run)
			}
			if tc.run && (len(cl.Reply) != 2 || cl.Reply[0] != "claimed") {
				t.Errorf("reply %v, want claimed", cl.Reply)
			}
			if n := f.trips.Load() - before; n != 1 {
				t.Errorf("%d round trips, want 1: the request's parts and its claim together", n)
			}
			exists, err := f.client.Exists(ctx, tc.q.Claim.Keys[0]).Result()
			if err != nil || (exists == 1) != tc.run {
				t.Errorf("claim key exists = %v %v, want %v", exists, err, tc.run)
			}
		})
	}
	// A part that passed, on another node, was given back when its
	// request was refused: the limit of one is free again.
	if res, err := f.r.Allow(ctx, cases[4].q.Checks[0].Key, f.one); err != nil || !res.Allowed {
		t.Errorf("the passing part of a refused request was not given back: %+v %v", res, err)
	}

	t.Run("claim not taken: no part charged, on any master", func(t *testing.T) { checkClaimNotTaken(t, f) })
	t.Run("guard sent alone first: the claim goes with the checks", func(t *testing.T) { checkGuardAloneFirst(t, f) })
	t.Run("scripts flushed: sent again to the masters directly", func(t *testing.T) { checkScriptsFlushed(t, f) })
	t.Run("guard sent alone fails: the claim not sent", func(t *testing.T) { checkGuardAloneFails(t, f) })
	t.Run("32 concurrent claims from 4 limiters, one claimed", func(t *testing.T) { checkConcurrentClaimsInCluster(t, f) })
	t.Run("another node fails: the claim keeps its reply", func(t *testing.T) { checkClaimKeepsItsReply(t, f) })
}

// checkClaimKeepsItsReply checks that a claim that ran keeps its reply when the master of another part of its request is stopped.
func checkClaimKeepsItsReply(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	key := f.other("down")
	owner, err := f.cl.SlotOwner(f.cl.Servers[0], int(clusterslot.Of(keyPrefix+key)))
	if err != nil {
		t.Fatal(err)
	}
	r := NewRedis(f.client, RedisOptions{Timeout: 200 * time.Millisecond, ClaimFunc: testClaimFunc})
	defer r.Close()
	// Warm: the script loaded on both nodes.
	var ans Answer
	if err := r.AllowAll(ctx, f.req("warm", Check{Key: key, Limit: f.many}), &ans); err != nil || !ans.Allowed {
		t.Fatalf("warm: %v %+v", err, ans)
	}
	down := f.cl.Server(owner)
	down.Freeze()
	defer down.Thaw()
	q := f.req("down", Check{Key: key, Limit: f.many})
	ans = Answer{}
	start := time.Now()
	err = r.AllowAll(ctx, q, &ans)
	d := time.Since(start)
	if err == nil || ans.Allowed {
		t.Fatalf("with the limit's master stopped: %v, allowed %v; want a store failure", err, ans.Allowed)
	}
	if !ans.Claim.Run || ans.Claim.Err != nil || len(ans.Claim.Reply) == 0 || ans.Claim.Reply[0] != "claimed" {
		t.Errorf("claim on the live master: %+v, want run and claimed, no error", ans.Claim)
	}
	t.Logf("answered after %v (deadline %v)", d, time.Second)
}

// checkConcurrentClaimsInCluster sends 32 concurrent identical claims through 4 limiters and checks that one claimed.
func checkConcurrentClaimsInCluster(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	lims := make([]*Redis, 4)
	for i := range lims {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: f.cl.Addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		lims[i] = NewRedis(c, RedisOptions{Timeout: testStoreTimeout, ClaimFunc: testClaimFunc})
		defer lims[i].Close()
	}
	var wg sync.WaitGroup
	var claimed, taken atomicCount
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half with a limit in the claim's slot, half on another node.
			key := f.same("many")
			if i%2 == 1 {
				key = "many:" + strconv.Itoa(i%3)
			}
			q := &Request{Checks: []Check{{Key: key, Limit: f.many}},
				Claim: &ClaimPart{Keys: []string{claimTag + "same"}, Args: []any{strconv.Itoa(i)}, Timeout: testStoreTimeout}}
			var ans Answer
			if err := lims[i%4].AllowAll(ctx, q, &ans); err != nil || !ans.Claim.Run {
				t.Errorf("claim %d: %v, %+v", i, err, ans.Claim)
				return
			}
			switch ans.Claim.Reply[0] {
			case "claimed":
				claimed.add()
			case "taken":
				taken.add()
			}
		}()
	}
	wg.Wait()
	if claimed.n != 1 || taken.n != 31 {
		t.Errorf("32 concurrent claims of one key: %d claimed, %d taken; want 1 and 31", claimed.n, taken.n)
	}
}

// checkGuardAloneFails checks that when the round trip of a guard sent alone fails, the caller learns that the claim was not sent.
func checkGuardAloneFails(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	// The guard on a master of its own, the checks with the claim:
	// the guard goes alone first; with its master stopped that
	// round trip fails and the claim never reaches Redis. The
	// caller must learn it was not sent (so that it may claim on
	// its own), not that it may have run.
	guard := keyOn(t, f.cl, "guard-down:", clusterslot.Of(claimTag), false)
	guardOwner, err := f.cl.SlotOwner(f.cl.Servers[0], int(clusterslot.Of(guard)))
	if err != nil {
		t.Fatal(err)
	}
	q := f.req("guard-down", Check{Key: f.same("gd1"), Limit: f.many, Branch: IfAdmitted}, Check{Key: f.same("gd2"), Limit: f.many, Branch: IfRefused})
	q.Guard = Guard{Key: guard, Member: "m", Max: 10, Window: time.Minute}
	lim := NewRedis(f.client, RedisOptions{Timeout: 200 * time.Millisecond, ClaimFunc: testClaimFunc})
	defer lim.Close()
	var ans Answer
	if err := lim.AllowAll(ctx, f.req("warm-guard", Check{Key: guard, Limit: f.many}), &ans); err != nil {
		t.Fatal(err) // the scripts loaded on the guard's master
	}
	down := f.cl.Server(guardOwner)
	down.Freeze()
	ans = Answer{}
	err = lim.AllowAll(ctx, q, &ans)
	down.Thaw()
	if err == nil {
		t.Fatalf("with the guard's master stopped: no error, %+v", ans)
	}
	if ans.Claim.Sent || ans.Claim.Run {
		t.Errorf("claim %+v after the guard's round trip failed; want not sent", ans.Claim)
	}
	if n, err := f.client.Exists(ctx, q.Claim.Keys[0]).Result(); err != nil || n != 0 {
		t.Errorf("claim key exists = %v %v, want 0", n, err)
	}
}

// checkScriptsFlushed checks that after SCRIPT FLUSH on every master a run is sent again, with its source, to its master directly.
func checkScriptsFlushed(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	// After a restart or a failover a master may not know the
	// script (NOSCRIPT): the run is sent again with its source, to
	// its master as it went, not through the Cluster client (which
	// would follow a redirect past what a run sent by a stale map
	// means, and may look up COMMAND first).
	for _, s := range f.cl.Servers {
		if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	var h processCount
	f.client.AddHook(&h)
	q := f.req("flushed", Check{Key: f.same("f1"), Limit: f.many}, Check{Key: f.other("f2"), Limit: f.many})
	var ans Answer
	if err := f.r.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || !ans.Claim.Run || ans.Claim.Reply[0] != "claimed" {
		t.Fatalf("after SCRIPT FLUSH: %v, allowed %v, claim %+v; want allowed and claimed", err, ans.Allowed, ans.Claim)
	}
	if n := h.n.Load(); n != 0 {
		t.Errorf("%d commands went through the Cluster client, want none", n)
	}
}

// checkGuardAloneFirst checks that a request whose guard is on a master of its own sends the guard alone first, then its checks with its claim.
func checkGuardAloneFirst(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	guard := keyOn(t, f.cl, "guard:", clusterslot.Of(claimTag), false)
	q := f.req("guarded", Check{Key: f.same("g1"), Limit: f.many, Branch: IfAdmitted}, Check{Key: f.other("g2"), Limit: f.many, Branch: IfRefused})
	q.Guard = Guard{Key: guard, Member: "m", Max: 10, Window: time.Minute}
	if _, err := f.client.Del(ctx, q.Claim.Keys[0]).Result(); err != nil {
		t.Fatal(err)
	}
	before := f.trips.Load()
	var ans Answer
	if err := f.r.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || !ans.Admitted {
		t.Fatalf("guarded request: %v, %+v", err, ans)
	}
	if !ans.Claim.Run || ans.Claim.Reply[0] != "claimed" {
		t.Errorf("claim %+v, want run and claimed", ans.Claim)
	}
	if n := f.trips.Load() - before; n != 2 {
		t.Errorf("%d round trips, want 2: the guard alone, then the checks and the claim", n)
	}
}

// checkClaimNotTaken checks that a request whose claim is taken is allowed and charged in none of its parts, on any master.
func checkClaimNotTaken(t *testing.T, f *claimCluster) {
	ctx := context.Background()
	for _, q := range []*Request{
		f.req("c1", Check{Key: f.same("t1"), Limit: f.one}, Check{Key: f.other("t1"), Limit: f.one}), // c1 is held
		f.req("c1", Check{Key: f.other("t2"), Limit: f.one}),                                         // the claim alone in its slot
	} {
		var ans Answer
		if err := f.r.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || !ans.Uncharged || ans.Claim.Reply[0] != "taken" {
			t.Fatalf("a request whose claim is taken: %v, %+v; want allowed, uncharged", err, ans)
		}
		for _, c := range q.Checks {
			if res, err := f.r.Allow(ctx, c.Key, f.one); err != nil || !res.Allowed {
				t.Errorf("%s was charged for a request whose claim took nothing: %+v %v", c.Key, res, err)
			}
		}
	}
}

// processCount is a go-redis hook counting the commands and pipelines
// a client processes itself.
type processCount struct{ n atomic.Int64 }

func (h *processCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *processCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *processCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// atomicCount is a counter for concurrent test goroutines.
type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
