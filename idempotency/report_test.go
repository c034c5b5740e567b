package idempotency

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// failedFinishes is a go-redis hook that, while on, refuses every finish
// run (a free, a settlement) before it reaches Redis, as a Redis that
// went away would.
type failedFinishes struct{ on atomic.Bool }

var errFinishRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func (h *failedFinishes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failedFinishes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && h.on.Load() && isFinish(cmd.Args()) {
			cmd.SetErr(errFinishRefused)
			return errFinishRefused
		}
		return next(ctx, cmd)
	}
}

func (h *failedFinishes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isFinish reports a run of the finish script: its arguments hold a
// state ("d", "u", "free", or "lost": the free of a lost claim) after
// the holder's token.
func isFinish(args []any) bool {
	return slices.ContainsFunc(args, func(a any) bool {
		s, ok := a.(*string)
		return ok && (*s == "free" || *s == "d") || a == "lost"
	})
}

// TestBackgroundWorkReported: what the Redis store does in the
// background — the free of a claim whose reply was lost, a settlement
// retried — is reported when it ends (Options.Report), naming the request
// it was for (RequestContext) and how it ended, so that an operator sees
// the claims left held (a log line, a metric: cmd/exgate's reportWork).
// Before, a failed free was not reported at all: the claim of an order
// never sent stayed held, and nothing said so.
func TestBackgroundWorkReported(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		// lost loses the next script run (the claim's, or the
		// settlement's); fail refuses every finish run after it.
		lost       *redistest.LostReply
		fail       bool
		settle     bool // the claim is taken, then completed: the settlement is what fails
		want       Work
		wantErr    error // nil, ErrClaimLost, or errFinishRefused: a failure
		atShutdown bool
	}{
		{name: "free of a lost claim, done", lost: &redistest.LostReply{}, want: WorkFree},
		{name: "free of a lost claim, failed", lost: &redistest.LostReply{}, fail: true, want: WorkFree, wantErr: errFinishRefused},
		{name: "free of a claim that never ran", lost: &redistest.LostReply{Unsent: true}, want: WorkFree, wantErr: ErrClaimLost},
		{name: "completion retried, done", lost: &redistest.LostReply{Unsent: true, Err: errFinishRefused}, settle: true, want: WorkComplete},
		{name: "completion retried, failed to the end", lost: &redistest.LostReply{Unsent: true, Err: errFinishRefused}, fail: true,
			settle: true, want: WorkComplete, wantErr: errFinishRefused, atShutdown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []Background
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			o.Timeout = time.Second // a retry's first wait; a round trip never takes it
			o.Report = func(b Background) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, b)
			}
			c := newClient(t, srv.Addr)
			fail := &failedFinishes{}
			c.AddHook(tc.lost)
			c.AddHook(fail)
			s := NewRedis(c, o)
			// The scripts are loaded: the runs that fail are the test's.
			must(t, s.Complete(context.Background(), mustClaim(t, s, k("warm"), fpA, Claimed), Record{Status: 201}))
			ctx := &RequestContext{Context: context.Background(), ID: "req-7"}
			if tc.settle {
				held := mustClaim(t, s, k("a"), fpA, Claimed)
				tc.lost.Arm()
				fail.on.Store(tc.fail)
				if err := s.Complete(ctx, held, Record{Status: 201, Body: []byte("{}")}); err == nil {
					t.Fatal("the completion whose run failed reported no failure")
				}
			} else {
				tc.lost.Arm()
				fail.on.Store(tc.fail)
				if _, err := s.ClaimAll(ctx, "acct", "", []string{"a"}, fpA); err == nil {
					t.Fatal("the claim whose reply was lost reported no failure")
				}
			}
			if tc.atShutdown {
				s.Wait()
			} else {
				s.background.Wait()
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0].Work != tc.want || got[0].RequestID != "req-7" {
				t.Fatalf("reported %+v, want one %s for req-7", got, tc.want)
			}
			switch err := got[0].Err; {
			case tc.wantErr == nil && err != nil, tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("reported error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestRanOnlyOnProof: a request's RequestContext.Ran — the give-back of
// what its limits' run charged — is called once the free of its lost
// claim proves the run ran (the claim its holder took was there), and
// only for a claim that rode with the limits: not when the run never
// reached Redis (nothing was charged: a give-back would let the client
// past its limit), nor for a claim made on its own (the limits were
// decided in another run, whose answer came back).
func TestRanOnlyOnProof(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		claim func(t *testing.T, c *redis.Client, o Options) (*Redis, func(context.Context, Key) (Claim, error))
		lost  *redistest.LostReply
		want  bool
	}{
		{"riding with the limits, ran", joinedCtxClaim, &redistest.LostReply{}, true},
		{"riding with the limits, never reached Redis", joinedCtxClaim, &redistest.LostReply{Unsent: true}, false},
		{"on its own, ran", ownCtxClaim, &redistest.LostReply{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			c := newClient(t, srv.Addr)
			c.AddHook(tc.lost)
			s, claim := tc.claim(t, c, o)
			if cl, err := claim(context.Background(), k("warm")); err != nil || cl.Outcome != Claimed { // the scripts are loaded
				t.Fatalf("first claim = %+v %v, want Claimed", cl, err)
			}
			var ran atomic.Int64
			tc.lost.Arm()
			ctx := &RequestContext{Context: context.Background(), ID: "req-8", Ran: func() { ran.Add(1) }}
			if _, err := claim(ctx, k("lost")); err == nil {
				t.Fatal("the claim whose reply was lost reported no failure")
			}
			s.Wait()
			if got, want := ran.Load(), map[bool]int64{true: 1}[tc.want]; got != want {
				t.Errorf("Ran called %d times, want %d", got, want)
			}
		})
	}
}

// ownCtxClaim and joinedCtxClaim are ownClaim and joinedClaim with the
// call's context.
func ownCtxClaim(t *testing.T, c *redis.Client, o Options) (*Redis, func(context.Context, Key) (Claim, error)) {
	s := NewRedis(c, o)
	return s, func(ctx context.Context, key Key) (Claim, error) { return s.Claim(ctx, key, fpA) }
}

func joinedCtxClaim(t *testing.T, c *redis.Client, o Options) (*Redis, func(context.Context, Key) (Claim, error)) {
	s := newJoined(t, c, o, generous)
	return s.Redis, func(ctx context.Context, key Key) (Claim, error) { return s.Claim(ctx, key, fpA) }
}
