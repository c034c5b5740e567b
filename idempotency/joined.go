package idempotency

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims joined to the rate limits' round trip. When the rate limits
// keep their state in the same Redis (ratelimit.Redis, whose decision
// script is built with ClaimFunc), an order's claim need not be a round
// trip of its own: the proxy prepares it (Joiner.Prepare), the limiter
// runs it in the script run that decides the order's limits, right after
// them and only when they let the order pass, and the proxy reads its
// reply back (Joiner.Settle). An order with an identifier then waits for
// one round trip and one deadline, not two. The claim is the same
// function (ClaimFunc) on the same keys either way, so the outcomes, and
// the guarantee that concurrent identical orders produce one Claimed,
// are the same.

// Prepared is a claim made ready to run inside another script's run:
// ClaimFunc's KEYS and ARGV, and what the round trip carrying it must
// honour.
type Prepared struct {
	// Keys and Args are ClaimFunc's KEYS and ARGV. The keys share the
	// account's hash tag, so they live in one Cluster slot.
	Keys []string
	Args []any
	// Timeout is the deadline of the round trip carrying the claim
	// (Options.Timeout).
	Timeout time.Duration
	// ReplicaAcks is how many replicas must acknowledge the claim: the
	// round trip then sends WAIT after the script, on the same
	// connection (Options.ReplicaAcks).
	ReplicaAcks int
	// WaitTimeout is how long that WAIT blocks.
	WaitTimeout time.Duration
	// At is when the claim was prepared, on Options.Now: the start of
	// its round trip, near enough.
	At time.Time

	key  Key
	fp   Fingerprint
	id   string // the holder's token
	slot int64  // the account-share slot the claim counts in
}

// Joined is what the round trip that carried a Prepared claim reports.
type Joined struct {
	// Reply is ClaimFunc's reply.
	Reply []any
	// Err reports that the claim could not be decided: the round trip
	// failed or timed out (it is then unknown whether the claim was
	// made), Redis answered the whole run with an error, or the claim
	// failed in Redis (Redis refusing writes at maxmemory, which is
	// ErrFull).
	Err error
	// Acked is how many replicas WAIT reported; AckErr is WAIT's
	// failure. Both matter only with Prepared.ReplicaAcks.
	Acked  int64
	AckErr error
}

// Joiner is a Store whose claims can ride in another script's run on
// the same Redis. A Prepared claim that was never sent is claimed with
// Store.Claim instead.
type Joiner interface {
	Store
	// Prepare fills p with a claim of key for a request with
	// fingerprint fp.
	Prepare(p *Prepared, key Key, fp Fingerprint)
	// Settle returns the claim p's round trip reported, as Claim would
	// have: a claim the replicas did not acknowledge is freed and
	// reported as ErrNotReplicated, a failed round trip as a store
	// failure.
	Settle(ctx context.Context, p *Prepared, j Joined) (Claim, error)
}

// Prepare implements Joiner.
func (s *Redis) Prepare(p *Prepared, key Key, fp Fingerprint) { s.prepare(p, key, fp) }

// Settle implements Joiner. A round trip Redis answered with an error
// for the whole run (the limits' writes refused at maxmemory, say) says
// nothing of the claim's outcome that the claim itself could not say
// again: the claim is made on its own, with a new holder, as Claim would
// have. That is safe whatever the failed run did, since a claim it took
// answers the new one InProgress, never Claimed.
func (s *Redis) Settle(ctx context.Context, p *Prepared, j Joined) (Claim, error) {
	var reply redis.Error
	if errors.As(j.Err, &reply) {
		return s.Claim(ctx, p.key, p.fp)
	}
	if j.Err != nil {
		s.failed(ctx, j.Err)
		return Claim{}, storeError("claim", j.Err)
	}
	if p.ReplicaAcks > 0 {
		if err := s.acked(ctx, p, j.Reply, j.Acked, j.AckErr); err != nil {
			return Claim{}, err
		}
	}
	return p.outcome(j.Reply)
}
