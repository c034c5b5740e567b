package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestLostClaimReplyFreed: a claim that ran in Redis but whose reply never
// reached exgate (its deadline passed while Redis ran it, or the
// connection broke after it was sent) fails, and its order is not sent;
// the claim it left is freed, so that the client's retry of the same
// order, which the refusal (503 duplicate_protection_unavailable) tells
// it to send with the same identifier, is placed. Before, the claim
// stayed in flight: the retry got 409 request_in_progress and then
// outcome_unknown for the whole retention, for an order never sent.
func TestLostClaimReplyFreed(t *testing.T) {
	srv := redistest.Start(t)
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	redistest.StartReplica(t, master)
	for _, path := range []struct {
		name string
		addr string
		acks int
		// claim makes the claim that loses its reply, through the store
		// built on the hooked client.
		claim func(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error))
	}{
		{"own claim", srv.Addr, 0, ownClaim},
		{"own claim, replica acks", master.Addr, 1, ownClaim},
		{"claim riding with the limits", srv.Addr, 0, joinedClaim},
		{"claim riding with the limits, replica acks", master.Addr, 1, joinedClaim},
	} {
		for _, lost := range []struct {
			name string
			err  error
		}{
			{"deadline", context.DeadlineExceeded},
			{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}},
		} {
			t.Run(path.name+"/"+lost.name, func(t *testing.T) {
				o := testOptions(newClock())
				o.KeyPrefix = uniquePrefix()
				o.ReplicaAcks = path.acks
				o.Timeout = 2 * time.Second // a WAIT's answer on a loaded machine; never reached
				h := &redistest.LostReply{Err: lost.err}
				c := newClient(t, path.addr)
				c.AddHook(h)
				s, claim := path.claim(t, c, o)
				// The scripts are loaded: the run that loses its reply is the
				// claim's, not a NOSCRIPT.
				if cl, err := claim(k("warm")); err != nil || cl.Outcome != Claimed {
					t.Fatalf("first claim = %+v %v, want Claimed", cl, err)
				}
				h.Arm()
				if _, err := claim(k("lost")); err == nil || !errors.Is(err, lost.err) && !errors.Is(err, ErrNotReplicated) {
					t.Fatalf("claim whose reply was lost = %v, want a store failure", err)
				}
				s.background.Wait()
				if v, err := c.Get(context.Background(), s.keyOf(k("lost"))[0]).Result(); !errors.Is(err, redis.Nil) {
					t.Errorf("the claim whose reply was lost is still in Redis: %q %v", v, err)
				}
				mustClaim(t, s, k("lost"), fpA, Claimed) // the retry
				if v, err := c.HGetAll(context.Background(), s.keyOf(k("lost"))[1]).Result(); err != nil || countOf(strMap(v)) != 2 {
					t.Errorf("account share after two claims, one of them freed: %v %v, want 2 identifiers", v, err)
				}
			})
		}
	}
}

// ownClaim claims on the store's own.
func ownClaim(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error)) {
	s := NewRedis(c, o)
	return s, func(key Key) (Claim, error) { return s.Claim(context.Background(), key, fpA) }
}

// joinedClaim claims riding with a limit, as the proxy does when the
// limits share duplicate protection's Redis.
func joinedClaim(t *testing.T, c *redis.Client, o Options) (*Redis, func(Key) (Claim, error)) {
	s := newJoined(t, c, o, generous)
	return s.Redis, func(key Key) (Claim, error) { return s.Claim(context.Background(), key, fpA) }
}

// strMap is HGETALL's reply as countOf reads it.
func strMap(m map[string]string) map[any]any {
	out := make(map[any]any, len(m))
	for f, v := range m {
		out[f] = v
	}
	return out
}

// TestMayHaveRun: a claim is freed after its call failed only when no
// reply came back: a reply from Redis, the claim's own error in a run of
// the limits, or a dial that failed say it took nothing.
func TestMayHaveRun(t *testing.T) {
	srv := redistest.Start(t)
	replyErr := newClient(t, srv.Addr).Do(context.Background(), "NOSUCHCOMMAND").Err()
	if replyErr == nil {
		t.Fatal("an unknown command did not fail")
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", context.DeadlineExceeded, true},
		{"deadline, as the limiter wraps it", fmt.Errorf("ratelimit: redis: %w", context.DeadlineExceeded), true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"a reply from Redis", replyErr, false},
		{"a reply from Redis, wrapped", fmt.Errorf("ratelimit: redis: %w", replyErr), false},
		{"the claim's own error in the limits' run", ratelimit.ClaimError("OOM command not allowed"), false},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"not acknowledged by the replicas (freed then)", fmt.Errorf("%w: 0 of 1", ErrNotReplicated), false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayHaveRun(tc.err); got != tc.want {
				t.Errorf("mayHaveRun(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
