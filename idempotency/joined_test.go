package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// joinedStore is a Redis store whose claims ride in the rate limiter's
// round trip, as the proxy sends them when the limits and duplicate
// protection share a Redis: each claim is decided with one limit of the
// account (limit), in one script run.
type joinedStore struct {
	*Redis
	lim   *ratelimit.Redis
	limit ratelimit.Limit
}

func newJoined(t *testing.T, c *redis.Client, o Options, limit ratelimit.Limit) *joinedStore {
	lim := ratelimit.NewRedis(c, ratelimit.RedisOptions{ClaimFunc: ClaimFunc})
	t.Cleanup(func() { _ = lim.Close() })
	return &joinedStore{Redis: NewRedis(c, o), lim: lim, limit: limit}
}

// errLimited is a joined claim refused by its limit.
var errLimited = errors.New("limited")

// Claim decides the account's limit and claims key in one round trip.
func (s *joinedStore) Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error) {
	var p Prepared
	s.Prepare(&p, key, fp)
	q := ratelimit.Request{
		Checks: []ratelimit.Check{{Key: s.o.KeyPrefix + "limit:" + key.Account, Limit: s.limit}},
		Claim:  &p.ClaimPart,
	}
	var ans ratelimit.Answer
	err := s.lim.AllowAll(ctx, &q, &ans)
	if !ans.Claim.Sent {
		return Claim{}, errors.New("joinedStore: the claim was not sent with the limits")
	}
	if err == nil && !ans.Allowed {
		if ans.Claim.Run {
			return Claim{}, errors.New("joinedStore: a refused request ran its claim")
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

	var wg sync.WaitGroup
	outcomes := make([]Outcome, 32)
	errs := make([]error, len(outcomes))
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := stores[i%4].Claim(context.Background(), k("same"), fpA)
			outcomes[i], errs[i] = c.Outcome, err
		}()
	}
	wg.Wait()
	claimed := 0
	for i, o := range outcomes {
		if errs[i] != nil {
			t.Fatalf("concurrent claim %d: %v", i, errs[i])
		}
		if o == Claimed {
			claimed++
		} else if o != InProgress {
			t.Errorf("concurrent claim %d = %s, want claimed or in_progress", i, o)
		}
	}
	if claimed != 1 {
		t.Errorf("%d concurrent identical claims: %d Claimed, want exactly 1", len(outcomes), claimed)
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
	if n, err := srv.Do("EXISTS", s.keys(k("second"))[0]); err != nil || n != int64(0) {
		t.Errorf("a refused request's claim key: EXISTS = %v %v, want 0", n, err)
	}
	if v, err := srv.Do("HVALS", s.keys(k("second"))[1]); err != nil || len(v.([]any)) != 1 || v.([]any)[0] != "1" {
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
	if d < o.Timeout || d > o.Timeout+80*time.Millisecond {
		t.Errorf("claim with Redis stopped failed after %v, want one deadline (%v)", d, o.Timeout)
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
			if v, err := replica.Do("GET", s.keys(k)[0]); err != nil || !strings.HasPrefix(v.(string), "p") {
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
		if d := time.Since(start); d > o.Timeout+100*time.Millisecond {
			t.Errorf("refused after %v, want within the %v deadline", d, o.Timeout)
		}
		if n, err := alone.Do("EXISTS", s.keys(k)[0]); err != nil || n != int64(0) {
			t.Errorf("unacknowledged claim left on the master: EXISTS = %v %v", n, err)
		}
	})
}
