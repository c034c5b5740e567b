package idempotency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// lateRun is a go-redis hook that, once armed, holds the next script run
// (or pipeline) back from Redis and answers its caller
// context.DeadlineExceeded, as a claim whose segment is retransmitted, or
// queued behind a busy Redis, while its deadline passes; Land then sends
// it, later, on a connection of its own: the claim reaches Redis after
// what its caller did next (the free of its lost claim, on another
// pooled connection).
type lateRun struct {
	armed atomic.Bool
	mu    sync.Mutex
	held  [][]any
}

func (h *lateRun) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateRun) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			return h.hold(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h *lateRun) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		var err error
		for _, c := range cmds {
			err = h.hold(c)
		}
		return err
	}
}

// hold keeps cmd's arguments, as written (a *string as its value), to
// be sent by Land.
func (h *lateRun) hold(cmd redis.Cmder) error {
	args := make([]any, len(cmd.Args()))
	for i, a := range cmd.Args() {
		switch v := a.(type) {
		case *string:
			args[i] = *v
		case *int64:
			args[i] = *v
		default:
			args[i] = v
		}
	}
	h.mu.Lock()
	h.held = append(h.held, args)
	h.mu.Unlock()
	cmd.SetErr(context.DeadlineExceeded)
	return context.DeadlineExceeded
}

// Land sends the runs held back, as they were, through c.
func (h *lateRun) Land(t *testing.T, c *redis.Client) {
	t.Helper()
	h.land(t, func(args []any) error { return c.Do(context.Background(), args...).Err() })
}

// land sends the runs held back with do.
func (h *lateRun) land(t *testing.T, do func([]any) error) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) == 0 {
		t.Fatal("no run was held back")
	}
	for _, args := range h.held {
		if err := do(args); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("the late run: %v", err)
		}
	}
	h.held = nil
}

// TestLateClaimFencedByItsFree: a claim whose reply was lost is freed in
// the background (freeLost) on another pooled connection than the one it
// went on; when the free reaches Redis first (the claim's segment
// retransmitted, or read later by a busy Redis), it finds nothing to
// free. The claim that lands after it must take nothing: its order was
// refused (503) and never sent, and the client's retry, with the same
// identifier, must be placed. Before, the late claim took the identifier:
// the retry got 409 request_in_progress and then outcome_unknown for the
// whole retention, for an order never placed. The free leaves a fence
// (its holder's tombstone) the late claim sees.
func TestLateClaimFencedByItsFree(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		claim func(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error))
		// ids is how many identifiers the claim holds in the share (a
		// bulk's two).
		ids int64
	}{
		{"own claim", ownClaim, 1},
		{"claim riding with the limits", joinedClaim, 1},
		{"bulk, own claim", bulkClaim, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			h := &lateRun{}
			c := newClient(t, srv.Addr)
			c.AddHook(h)
			s, claim := tc.claim(t, c, o)
			if cl, err := claim(k("warm")); err != nil || cl.Outcome != Claimed { // the scripts are loaded
				t.Fatalf("first claim = %+v %v, want Claimed", cl, err)
			}
			h.Arm()
			if _, err := claim(k("late")); err == nil {
				t.Fatal("the claim held back reported no failure")
			}
			s.background.Wait() // the free has run, and found nothing
			h.Land(t, newClient(t, srv.Addr))
			if v, err := c.Get(context.Background(), s.keyOf(k("late"))[0]).Result(); err == nil && v[0] == 'p' {
				t.Errorf("the late claim holds the identifier: %q", v)
			}
			ids := []string{"late", "late-2"}[:tc.ids]
			mustClaimAll(t, s, "acct", ids, fpA, Claimed) // the retry, on the store's own (the limiter fails fast a while)
			if v, err := c.HGetAll(context.Background(), s.keyOf(k("late"))[1]).Result(); err != nil || countOf(strMap(v)) != 2*tc.ids {
				t.Errorf("account share after the warm claim and the retry: %v %v, want %d identifiers", v, err, 2*tc.ids)
			}
		})
	}
}

// bulkClaim claims a bulk of two orders, the key's identifier and
// another, on the store's own.
func bulkClaim(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error)) {
	s := NewRedis(c, o)
	return s, func(key Key) (Claim, error) {
		return s.ClaimAll(context.Background(), key.Account, "", []string{key.Identifier, key.Identifier + "-2"}, fpA)
	}
}

// Arm holds the next script run or pipeline back.
func (h *lateRun) Arm() { h.armed.Store(true) }

// TestLateClaimFencedInCluster: TestLateClaimFencedByItsFree in a Redis
// Cluster, where the free goes to the master of the claim's keys
// directly (free), the fence in the claim's slot.
func TestLateClaimFencedInCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	h := &lateRun{}
	c := clusterClient(t, cl)
	c.AddHook(h)
	s := NewRedis(c, o)
	mustClaim(t, s, k("warm"), fpA, Claimed) // the scripts are loaded
	h.Arm()
	if _, err := s.Claim(context.Background(), k("late"), fpA); err == nil {
		t.Fatal("the claim held back reported no failure")
	}
	s.background.Wait() // the free has run, and found nothing
	h.land(t, func(args []any) error { return clusterClient(t, cl).Do(context.Background(), args...).Err() })
	if v, err := c.Get(context.Background(), s.keyOf(k("late"))[0]).Result(); err == nil && v[0] == 'p' {
		t.Errorf("the late claim holds the identifier: %q", v)
	}
	mustClaim(t, s, k("late"), fpA, Claimed) // the retry
}

// TestLateClaimsFencedTogether: two lost claims of one identifier (the
// order, and its retry lost alike), each freed before it lands, are both
// fenced: the fence holds each holder's token, and neither takes the
// identifier when it lands; the next retry does.
func TestLateClaimsFencedTogether(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	h := &lateRun{}
	c := newClient(t, srv.Addr)
	c.AddHook(h)
	s := NewRedis(c, o)
	mustClaim(t, s, k("warm"), fpA, Claimed) // the scripts are loaded
	for range 2 {
		h.Arm()
		if _, err := s.Claim(context.Background(), k("late"), fpA); err == nil {
			t.Fatal("the claim held back reported no failure")
		}
		s.background.Wait()
	}
	if v, err := c.Get(context.Background(), s.keyOf(k("late"))[0]).Result(); err != nil || len(v) != 1+2*idLen || v[0] != 'f' {
		t.Fatalf("the fence = %q %v, want f and two holders", v, err)
	}
	h.Land(t, newClient(t, srv.Addr))
	if v, err := c.Get(context.Background(), s.keyOf(k("late"))[0]).Result(); err == nil && v[0] == 'p' {
		t.Errorf("a late claim holds the identifier: %q", v)
	}
	mustClaim(t, s, k("late"), fpA, Claimed) // the retry
}

// TestFenceOutlivesTheRetrysClaim: the fence a free leaves for a claim
// still on its way (TestLateClaimFencedByItsFree) must hold while the
// retry's own claim holds the identifier and after it is settled. The
// retry claims over the fence (another holder) and its order is refused
// in turn (Release: a 4xx, or shed before it was sent); the late claim
// landing after that must still take nothing, and the next retry be
// placed. Before, the retry's claim overwrote the fence and its release
// deleted the key: the late claim took the identifier of an order never
// placed, and every later retry got 409 request_in_progress and then
// outcome_unknown for the retention.
func TestFenceOutlivesTheRetrysClaim(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		claim func(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error))
		ids   int64
	}{
		{"own claim", ownClaim, 1},
		{"claim riding with the limits", joinedClaim, 1},
		{"bulk, own claim", bulkClaim, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			h := &lateRun{}
			c := newClient(t, srv.Addr)
			c.AddHook(h)
			s, claim := tc.claim(t, c, o)
			if cl, err := claim(k("warm")); err != nil || cl.Outcome != Claimed {
				t.Fatalf("first claim = %+v %v, want Claimed", cl, err)
			}
			h.Arm()
			if _, err := claim(k("late")); err == nil {
				t.Fatal("the claim held back reported no failure")
			}
			s.background.Wait() // the free has run, and fenced the claim
			ids := []string{"late", "late-2"}[:tc.ids]
			retry := mustClaimAll(t, s, "acct", ids, fpA, Claimed)
			// Another holder's claim reads the deadline past the fence it carries.
			mustClaimAll(t, s, "acct", ids, fpA, InProgress)
			// The retry's order is refused in turn.
			if err := s.Release(context.Background(), retry); err != nil {
				t.Fatalf("Release of the retry's claim: %v", err)
			}
			h.Land(t, newClient(t, srv.Addr))
			if v, err := c.Get(context.Background(), s.keyOf(k("late"))[0]).Result(); err == nil && v[0] == 'p' {
				t.Errorf("the late claim holds the identifier: %q", v)
			}
			mustClaimAll(t, s, "acct", ids, fpA, Claimed) // the next retry
			if v, err := c.HGetAll(context.Background(), s.keyOf(k("late"))[1]).Result(); err != nil || countOf(strMap(v)) != 2*tc.ids {
				t.Errorf("account share after the warm claim and the last retry: %v %v, want %d identifiers", v, err, 2*tc.ids)
			}
		})
	}
}
