package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// joinedStore is a Redis store whose claims ride in the rate limiter's
// round trip, as the proxy sends them when the limits and duplicate
// protection share a Redis: each claim is decided with one limit of the
// account (limit), in one round trip. A claim that ran for a request the
// limit refused (in a Cluster, where the limit may be on another master)
// is freed, as the proxy frees it.
type joinedStore struct {
	*Redis
	lim      *ratelimit.Redis
	limit    ratelimit.Limit
	cluster  bool
	sameSlot bool         // the limit's key shares the account's hash tag
	trips    atomic.Int64 // the limiter's round trips
}

func newJoined(t *testing.T, c redis.UniversalClient, o Options, limit ratelimit.Limit) *joinedStore {
	s := &joinedStore{Redis: NewRedis(c, o), limit: limit}
	_, s.cluster = c.(*redis.ClusterClient)
	s.lim = ratelimit.NewRedis(c, ratelimit.RedisOptions{ClaimFunc: ClaimFunc, Timeout: o.Timeout,
		Observe: func(time.Duration, int, error) { s.trips.Add(1) }})
	t.Cleanup(func() { _ = s.lim.Close() })
	return s
}

// errLimited is a joined claim refused by its limit.
var errLimited = errors.New("limited")

// limitKey is the key of the account's limit.
func (s *joinedStore) limitKey(account string) string {
	if s.sameSlot {
		return s.o.KeyPrefix + "{" + accountTag(account) + "}limit"
	}
	return s.o.KeyPrefix + "limit:" + account
}

// Claim decides the account's limit and claims key in one round trip.
func (s *joinedStore) Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error) {
	return s.ClaimAll(ctx, key.Account, "", []string{key.Identifier}, fp)
}

// ClaimAll decides the account's limit and claims ids in one round trip.
func (s *joinedStore) ClaimAll(ctx context.Context, account, client string, ids []string, fp Fingerprint) (Claim, error) {
	var p Prepared
	s.Prepare(&p, account, client, ids, fp)
	q := ratelimit.Request{
		Checks: []ratelimit.Check{{Key: s.limitKey(account), Limit: s.limit}},
		Claim:  &p.ClaimPart,
	}
	var ans ratelimit.Answer
	err := s.lim.AllowAll(ctx, &q, &ans)
	if !ans.Claim.Sent {
		return Claim{}, errors.New("joinedStore: the claim was not sent with the limits")
	}
	if err == nil && !ans.Allowed {
		if ans.Claim.Run && (!s.cluster || s.sameSlot) {
			return Claim{}, errors.New("joinedStore: a refused request ran its claim in the limit's own run")
		}
		if err := s.Abandon(ctx, &p, ans.Claim); err != nil {
			return Claim{}, err
		}
		return Claim{}, errLimited
	}
	if err == nil && !ans.Claim.Run {
		return Claim{}, errors.New("joinedStore: an allowed request did not run its claim")
	}
	return s.Settle(ctx, &p, ans.Claim)
}

// generous is a limit the store table never reaches.
var generous = ratelimit.Limit{Rate: 1000000, Period: time.Second, Burst: 1000000}

func joinedHarness(srv *redistest.Server) harness {
	return harness{name: "joined", replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			out[i] = newJoined(t, newClient(t, srv.Addr), o, generous) // one client per replica
		}
		return out
	}}
}

// TestJoinedStore runs the store table with every claim decided in the
// rate limiter's round trip.
func TestJoinedStore(t *testing.T) {
	srv := redistest.Start(t)
	runStoreCases(t, joinedHarness(srv))
}

// TestJoinedOneRoundTrip: a claim joined to its limits is one script run
// on Redis, and concurrent identical claims from several replicas give
// exactly one Claimed.
func TestJoinedOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	stores := joinedHarness(srv).replicas(t, 4, o)
	mustClaim(t, stores[0], k("warm"), fpA, Claimed) // the script is loaded
	before := srv.CommandCalls()
	for i := range 10 {
		mustClaim(t, stores[i%4], k("one"+strconv.Itoa(i)), fpA, Claimed)
	}
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if runs != 10 {
		t.Errorf("10 claims with their limits took %d script runs, want 10", runs)
	}
	claimOnceEach(t, 32, func(i int) (Claim, error) {
		return stores[i%4].Claim(context.Background(), k("same"), fpA)
	}, func(int) int { return 0 })
}

// claimOnceEach makes n claims at once, claim i by claim(i), and checks
// that of the claims of each account (account(i)), all of one identifier,
// exactly one was Claimed and the others found it InProgress.
func claimOnceEach(t *testing.T, n int, claim func(i int) (Claim, error), account func(i int) int) {
	t.Helper()
	var wg sync.WaitGroup
	outcomes := make([]Outcome, n)
	errs := make([]error, n)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := claim(i)
			outcomes[i], errs[i] = c.Outcome, err
		}()
	}
	wg.Wait()
	claimed := map[int]int{}
	for i, o := range outcomes {
		if errs[i] != nil {
			t.Fatalf("concurrent claim %d: %v", i, errs[i])
		}
		claimed[account(i)] += 0 // an account none of whose claims was Claimed is counted too
		if o == Claimed {
			claimed[account(i)]++
		} else if o != InProgress {
			t.Errorf("concurrent claim %d = %s, want claimed or in_progress", i, o)
		}
	}
	for a, c := range claimed {
		if c != 1 {
			t.Errorf("account %d: %d Claimed of its concurrent identical claims, want exactly 1", a, c)
		}
	}
}

// TestJoinedRefusedClaimsNothing: a request its limit refuses runs no
// claim: the identifier's key is never written, and the account's share
// is not counted.
func TestJoinedRefusedClaimsNothing(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := newJoined(t, newClient(t, srv.Addr), o, ratelimit.Limit{Rate: 1, Period: time.Hour, Burst: 1})
	mustClaim(t, s, k("first"), fpA, Claimed)
	_, err := s.Claim(context.Background(), k("second"), fpA)
	if !errors.Is(err, errLimited) {
		t.Fatalf("claim over the limit = %v, want refused by the limit", err)
	}
	if n, err := srv.Do("EXISTS", s.keyOf(k("second"))[0]); err != nil || n != int64(0) {
		t.Errorf("a refused request's claim key: EXISTS = %v %v, want 0", n, err)
	}
	if v, err := srv.Do("HGETALL", s.keyOf(k("second"))[1]); err != nil || len(v.(map[any]any)) != 2 || countOf(v) != 1 {
		t.Errorf("account share after one claim and one refusal = %v %v, want one claim", v, err)
	}
}

// TestJoinedPausedOneDeadline: with Redis stopped (SIGSTOP), a claim
// joined to its limits fails after one deadline, the claim's, as a store
// failure.
func TestJoinedPausedOneDeadline(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Timeout = 100 * time.Millisecond
	o.KeyPrefix = uniquePrefix()
	s := newJoined(t, newClient(t, srv.Addr), o, generous)
	mustClaim(t, s, k("warm"), fpA, Claimed)
	srv.Freeze()
	defer srv.Thaw()
	start := time.Now()
	_, err := s.Claim(context.Background(), k("paused"), fpA)
	d := time.Since(start)
	if err == nil || errors.Is(err, errLimited) {
		t.Fatalf("claim with Redis stopped = %v, want a store failure", err)
	}
	if d < o.Timeout {
		t.Errorf("claim with Redis stopped failed after %v, before its deadline (%v)", d, o.Timeout)
	}
	t.Logf("claim and limits with Redis stopped: failed after %v (deadline %v)", d, o.Timeout)
}

// TestJoinedReplicaAcks: a joined claim that asks for a replica's
// acknowledgement is Claimed only once the replica holds it (WAIT on the
// round trip's connection); without a replica it is refused with
// ErrNotReplicated and the identifier left free.
func TestJoinedReplicaAcks(t *testing.T) {
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.StartReplica(t, master)
	alone := redistest.Start(t)
	o := testOptions(newClock())
	o.ReplicaAcks = 1
	o.Timeout = 2 * time.Second // see TestReplicaAcks
	o.KeyPrefix = "acks:"

	t.Run("acknowledged", func(t *testing.T) {
		s := newJoined(t, newClient(t, master.Addr), o, generous)
		for i := range 10 {
			k := Key{Account: "acct", Identifier: "k" + strconv.Itoa(i)}
			cl := mustClaim(t, s, k, fpA, Claimed)
			if v, err := replica.Do("GET", s.keyOf(k)[0]); err != nil || !strings.HasPrefix(v.(string), "p") {
				t.Fatalf("replica's copy of claim %v right after Claimed: %q %v", k, v, err)
			}
			must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("{}")}))
			mustClaim(t, s, k, fpA, Replay)
		}
	})

	t.Run("no replica", func(t *testing.T) {
		s := newJoined(t, newClient(t, alone.Addr), o, generous)
		k := Key{Account: "acct", Identifier: "k"}
		start := time.Now()
		if _, err := s.Claim(context.Background(), k, fpA); !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("joined claim without a replica = %v, want ErrNotReplicated", err)
		}
		if d := time.Since(start); d > 30*time.Second { // only bounds a WAIT with no deadline
			t.Errorf("refused after %v, want the %v deadline", d, o.Timeout)
		}
		if n, err := alone.Do("EXISTS", s.keyOf(k)[0]); err != nil || n != int64(0) {
			t.Errorf("unacknowledged claim left on the master: EXISTS = %v %v", n, err)
		}
	})
}

// clusterClient returns a Cluster client as the proxy builds it.
func clusterClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// masterOf returns the address of the master holding key.
func masterOf(t *testing.T, c *redis.ClusterClient, key string) string {
	t.Helper()
	node, err := c.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}

// splitAccount returns an account whose limit key (under s's prefix) and
// claim keys live on different masters.
func splitAccount(t *testing.T, c *redis.ClusterClient, s *joinedStore) string {
	t.Helper()
	for i := range 1000 {
		a := "acct" + strconv.Itoa(i)
		if masterOf(t, c, "rate:"+s.limitKey(a)) != masterOf(t, c, s.keyOf(Key{Account: a})[0]) {
			return a
		}
	}
	t.Fatal("no account with its limit and its claims on different masters")
	return ""
}

// TestJoinedClusterStore runs the store table on a 3-master Redis
// Cluster, every claim decided in the round trip of its account's limit,
// which lives on another master for most accounts.
func TestJoinedClusterStore(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	runStoreCases(t, harness{name: "joined cluster", accountShares: true, replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			out[i] = newJoined(t, clusterClient(t, cl), o, generous) // one client per replica
		}
		return out
	}})
}

// TestJoinedCluster: in a Cluster an order's claim and its limit, on
// different masters, take one round trip; concurrent identical claims
// from several replicas give one Claimed; a claim that ran for a request
// a limit on another master refused is freed at once (identifier and
// account share), and one whose limit shares its slot never runs; a
// stopped master holding the claim fails the request after one deadline.
func TestJoinedCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	base := testOptions(newClock())

	t.Run("one round trip", func(t *testing.T) { checkJoinedOneRoundTrip(t, cl, base) })

	t.Run("32 concurrent identical claims from 4 replicas", func(t *testing.T) {
		o := base
		o.KeyPrefix = uniquePrefix()
		stores := make([]*joinedStore, 4)
		for i := range stores {
			stores[i] = newJoined(t, clusterClient(t, cl), o, generous)
		}
		claimOnceEach(t, 32, func(i int) (Claim, error) {
			return stores[i%4].Claim(context.Background(), Key{Account: "acct-many" + strconv.Itoa(i%3), Identifier: "same"}, fpA)
		}, func(i int) int { return i % 3 })
	})

	t.Run("refused by a limit on another master: freed", func(t *testing.T) { checkJoinedRefusedElsewhereFreed(t, cl, base) })

	t.Run("refused by a limit in the claim's slot: never run", func(t *testing.T) {
		o := base
		o.KeyPrefix = uniquePrefix()
		c := clusterClient(t, cl)
		s := newJoined(t, c, o, ratelimit.Limit{Rate: 1, Period: time.Hour, Burst: 1})
		s.sameSlot = true
		acct := "acct-same-slot"
		mustClaim(t, s, Key{Account: acct, Identifier: "first"}, fpA, Claimed)
		if _, err := s.Claim(context.Background(), Key{Account: acct, Identifier: "second"}, fpA); !errors.Is(err, errLimited) {
			t.Fatalf("claim over the limit = %v, want refused by the limit (without running the claim)", err)
		}
	})

	t.Run("a run a node did not serve: a store failure", func(t *testing.T) { checkJoinedMovedIsStoreFailure(t, cl, base) })

	t.Run("the claim's master stopped: one deadline", func(t *testing.T) {
		o := base
		o.KeyPrefix = uniquePrefix()
		o.Timeout = 200 * time.Millisecond
		c := clusterClient(t, cl)
		s := newJoined(t, c, o, generous)
		acct := splitAccount(t, c, s)
		mustClaim(t, s, Key{Account: acct, Identifier: "warm"}, fpA, Claimed)
		srv := cl.Server(masterOf(t, c, s.keyOf(Key{Account: acct})[0]))
		srv.Freeze()
		defer srv.Thaw()
		start := time.Now()
		_, err := s.Claim(context.Background(), Key{Account: acct, Identifier: "paused"}, fpA)
		d := time.Since(start)
		if err == nil || errors.Is(err, errLimited) {
			t.Fatalf("claim with its master stopped = %v, want a store failure", err)
		}
		if d < o.Timeout {
			t.Errorf("claim with its master stopped failed after %v, before its deadline (%v)", d, o.Timeout)
		}
		t.Logf("claim and limits, the claim's master stopped: failed after %v (deadline %v)", d, o.Timeout)
	})
}

// checkJoinedMovedIsStoreFailure checks that a claim answered MOVED is a
// store failure, and that Settle then claims nothing on its own.
func checkJoinedMovedIsStoreFailure(t *testing.T, cl *redistest.Cluster, base Options) {
	o := base
	o.KeyPrefix = uniquePrefix()
	c := clusterClient(t, cl)
	s := newJoined(t, c, o, generous)
	key := Key{Account: "acct-moved", Identifier: "moved"}
	var p Prepared
	s.Prepare(&p, key.Account, "", []string{key.Identifier}, fpA)
	// A real MOVED: the claim's key asked of a master that does not
	// hold it, as a run sent by a stale slot map is answered.
	owner := masterOf(t, c, p.Keys[0])
	var other string
	for _, a := range cl.Addrs {
		if a != owner {
			other = a
			break
		}
	}
	moved := newClient(t, other).Get(context.Background(), p.Keys[0]).Err()
	if _, ok := redis.IsMovedError(moved); !ok {
		t.Fatalf("GET on another master: %v, want MOVED", moved)
	}
	r := ratelimit.ClaimReply{Sent: true, Err: fmt.Errorf("ratelimit: redis: %w", moved)}
	if _, err := s.Settle(context.Background(), &p, r); err == nil || errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Settle after MOVED = %v, want a store failure", err)
	}
	if n, err := c.Exists(context.Background(), p.Keys[0]).Result(); err != nil || n != 0 {
		t.Errorf("Settle after MOVED claimed on its own: EXISTS = %v %v, want 0", n, err)
	}
}

// checkJoinedRefusedElsewhereFreed checks that a claim that ran for a
// request a limit on another master refused is freed at once, its identifier
// and the account share.
func checkJoinedRefusedElsewhereFreed(t *testing.T, cl *redistest.Cluster, base Options) {
	o := base
	o.KeyPrefix = uniquePrefix()
	c := clusterClient(t, cl)
	s := newJoined(t, c, o, ratelimit.Limit{Rate: 1, Period: time.Hour, Burst: 1})
	acct := splitAccount(t, c, s)
	mustClaim(t, s, Key{Account: acct, Identifier: "first"}, fpA, Claimed)
	share := s.keyOf(Key{Account: acct})[1]
	before, err := c.HGetAll(context.Background(), share).Result()
	if err != nil {
		t.Fatal(err)
	}
	second := Key{Account: acct, Identifier: "second"}
	if _, err := s.Claim(context.Background(), second, fpA); !errors.Is(err, errLimited) {
		t.Fatalf("claim over the limit = %v, want refused by the limit", err)
	}
	if n, err := c.Exists(context.Background(), s.keyOf(second)[0]).Result(); err != nil || n != 0 {
		t.Errorf("a refused request's claim left held: EXISTS = %v %v, want 0", n, err)
	}
	after, err := c.HGetAll(context.Background(), share).Result()
	if err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("account share after a refused request's claim = %v %v, want it back at %v", after, err, before)
	}
	// The identifier is free at once for the retry (claimed here
	// without the spent limit).
	mustClaim(t, s.Redis, second, fpA, Claimed)
}

// checkJoinedOneRoundTrip checks that claims whose limit is on another
// master take one round trip each, with two script runs.
func checkJoinedOneRoundTrip(t *testing.T, cl *redistest.Cluster, base Options) {
	o := base
	o.KeyPrefix = uniquePrefix()
	c := clusterClient(t, cl)
	s := newJoined(t, c, o, generous)
	acct := splitAccount(t, c, s)
	mustClaim(t, s, Key{Account: acct, Identifier: "warm"}, fpA, Claimed) // the scripts are loaded
	scripts := func() int64 {
		var n int64
		for _, srv := range cl.Servers {
			calls := srv.CommandCalls()
			n += calls["evalsha"] + calls["eval"]
		}
		return n
	}
	trips, runs := s.trips.Load(), scripts()
	for i := range 10 {
		mustClaim(t, s, Key{Account: acct, Identifier: "one" + strconv.Itoa(i)}, fpA, Claimed)
	}
	if n := s.trips.Load() - trips; n != 10 {
		t.Errorf("10 claims with their limits took %d round trips, want 10", n)
	}
	if n := scripts() - runs; n != 20 {
		t.Errorf("10 claims with their limits on another master ran %d scripts, want 20 (a limit's run and a claim's each)", n)
	}
}

// TestJoinedClusterResharded: a claim's run sent by a stale slot map
// (its slot moved to another master meanwhile) is answered MOVED: a
// store failure, its claim not taken anywhere; the next claim, after the
// limiter's backoff, goes by the reloaded map to the new master.
func TestJoinedClusterResharded(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	c := clusterClient(t, cl)
	s := newJoined(t, c, o, generous)
	for i := range 12 { // the scripts loaded on every master
		mustClaim(t, s, Key{Account: "warm" + strconv.Itoa(i), Identifier: "w"}, fpA, Claimed)
	}
	key := Key{Account: "resharded", Identifier: "r"}
	claimKey := s.keyOf(key)[0]
	slot, err := c.ClusterKeySlot(ctx, claimKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	from := cl.Server(masterOf(t, c, claimKey))
	var to *redistest.Server
	for _, a := range cl.Addrs[:3] {
		if srv := cl.Server(a); srv != from && masterOf(t, c, "rate:"+s.limitKey(key.Account)) != a {
			to = srv
		}
	}
	if to == nil {
		t.Fatal("no master to move the claim's slot to")
	}
	id := func(srv *redistest.Server) string {
		v, err := srv.Do("CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		return v.(string)
	}
	fromID, toID := id(from), id(to)
	// The slot holds no key yet: moved by CLUSTER SETSLOT alone.
	steps := []struct {
		srv  *redistest.Server
		args []any
	}{
		{to, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", fromID}},
		{from, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", toID}},
		{to, []any{"CLUSTER", "SETSLOT", slot, "NODE", toID}},
		{from, []any{"CLUSTER", "SETSLOT", slot, "NODE", toID}},
	}
	for _, st := range steps {
		if _, err := st.srv.Do(st.args...); err != nil {
			t.Fatalf("%v on %s: %v", st.args, st.srv.Addr, err)
		}
	}
	_, err = s.Claim(ctx, key, fpA)
	if _, moved := redis.IsMovedError(err); !moved || errors.Is(err, errLimited) {
		t.Fatalf("claim sent to the slot's old master = %v, want a store failure, MOVED", err)
	}
	for _, srv := range []*redistest.Server{from, to} {
		if n, err := srv.Do("EXISTS", claimKey); err == nil && n != int64(0) {
			t.Errorf("claim taken on %s after MOVED", srv.Addr)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond) // the limiter's backoff, and the slot map reloaded
		cl, err := s.Claim(ctx, key, fpA)
		if err == nil && cl.Outcome == Claimed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim after the slot map reload: %+v %v", cl, err)
		}
	}
	if n, err := to.Do("EXISTS", claimKey); err != nil || n != int64(1) {
		t.Errorf("claim on the slot's new master: EXISTS = %v %v, want 1", n, err)
	}
}

// TestJoinedClusterReplicaAcks: in a Cluster with a replica per master,
// a joined claim asking for a replica's acknowledgement is Claimed once
// its master's replica holds it; with that replica cut off it is refused
// with ErrNotReplicated and the identifier left free.
func TestJoinedClusterReplicaAcks(t *testing.T) {
	cl := redistest.StartReplicatedCluster(t, 3, 2*time.Second)
	c := clusterClient(t, cl)
	o := testOptions(newClock())
	o.ReplicaAcks = 1
	o.Timeout = time.Second
	o.KeyPrefix = "acks:"
	s := newJoined(t, c, o, generous)
	acct := splitAccount(t, c, s)
	for i := range 5 {
		k := Key{Account: acct, Identifier: "k" + strconv.Itoa(i)}
		mustClaim(t, s, k, fpA, Claimed)
	}
	master := cl.Server(masterOf(t, c, s.keyOf(Key{Account: acct})[0]))
	info, err := master.Info("replication")
	if err != nil {
		t.Fatal(err)
	}
	var replica *redistest.Server
	for _, r := range cl.Servers {
		if strings.Contains(info["slave0"], "port="+r.Port()+",") {
			replica = r
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s in %v", master.Addr, info)
	}
	replica.Freeze()
	defer replica.Thaw()
	if _, err := master.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	k := Key{Account: acct, Identifier: "cut-off"}
	if _, err := s.Claim(context.Background(), k, fpA); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("joined claim with the replica cut off = %v, want ErrNotReplicated", err)
	}
	if n, err := master.Do("EXISTS", s.keyOf(k)[0]); err != nil || n != int64(0) {
		t.Errorf("unacknowledged claim left on the master: EXISTS = %v %v", n, err)
	}
}

// countOf returns the identifiers an account's share counter (HGETALL)
// holds.
func countOf(v any) int64 {
	var n int64
	for f, x := range v.(map[any]any) {
		if strings.HasPrefix(f.(string), "n") {
			c, _ := strconv.ParseInt(x.(string), 10, 64)
			n += c
		}
	}
	return n
}
