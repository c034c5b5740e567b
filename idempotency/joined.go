package idempotency

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/ratelimit"
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
//
// In a Redis Cluster the order's limits and its claim may live on
// different masters, each decided in a script run of its own (all sent
// at once, one round trip): a claim can then run although a limit on
// another node refused the order, or failed. Such a claim is freed before
// the order is answered (Joiner.Abandon), as the store frees a claim its
// replicas did not acknowledge. A free that fails leaves the claim in
// flight: a retry of the order meets 409 in progress and, after
// idempotency.in_flight_timeout, the unknown outcome, never a second
// placement.

// Prepared is a claim made ready to run inside the rate limiter's
// script run: the ratelimit.ClaimPart it rides as (ClaimFunc's KEYS and
// ARGV, the deadline Options.Timeout, the replica acks
// Options.ReplicaAcks and how long their WAIT blocks), and what Settle
// reads its reply with. In a Cluster the keys share the account's hash
// tag, so they live in one slot (Redis.keys).
type Prepared struct {
	ratelimit.ClaimPart
	// At is when the claim was prepared, on Options.Now: the start of
	// its round trip, near enough.
	At time.Time

	key    Key      // the first identifier
	client string   // whose share it is charged to (Store.ClaimAll)
	more   []string // the other identifiers (a bulk's)
	fp     Fingerprint
	id     string // the holder's token
	slot   int64  // the account-share slot the claim counts in
	charge int64  // the bytes it charges the account's share
}

// errNotRun is the failure of a claim its round trip carried but did not
// run, although the limits let the request pass: the limits were decided
// by on_store_error after a failure.
var errNotRun = errors.New("idempotency: the claim did not run with the limits")

// Joiner is a Store whose claims can ride in another script's run on
// the same Redis. A Prepared claim that was never sent is claimed with
// Store.ClaimAll instead.
type Joiner interface {
	Store
	// Prepare fills p with a claim of account's identifiers ids (an
	// order's one, a bulk's all, as Store.ClaimAll claims them), charged
	// to client's share (Key), for a
	// request with fingerprint fp.
	Prepare(p *Prepared, account, client string, ids []string, fp Fingerprint)
	// Settle returns the claim p's round trip reported (r, whose Sent
	// is true), as Claim would have: a claim the replicas did not
	// acknowledge is freed and reported as ErrNotReplicated, a failed
	// round trip, or one that did not run the claim, as a store failure.
	// A call it makes to the store (the claim made again, a free) is
	// bounded by Options.Timeout even when ctx has no deadline, and is
	// not cancelled with ctx (its values are kept): the order's client
	// hanging up must not leave a claim half made.
	Settle(ctx context.Context, p *Prepared, r ratelimit.ClaimReply) (Claim, error)
	// Abandon frees the claim p if its round trip ran it and it took the
	// identifier (r.Run, reply "claimed"), for a request that is not let
	// through: refused or failed by a limit that was decided in another
	// script run than the claim (a Cluster's other node), or by
	// on_store_error after the round trip failed without a reply, when
	// the claim may have run (r.Sent and r.Err). It does nothing for a
	// claim that did not run or did not take the identifier. The free is
	// best effort, within Options.Timeout.
	Abandon(ctx context.Context, p *Prepared, r ratelimit.ClaimReply) error
}

// Prepare implements Joiner.
func (s *Redis) Prepare(p *Prepared, account, client string, ids []string, fp Fingerprint) {
	s.prepare(p, account, client, ids, fp)
}

// Settle implements Joiner. A round trip Redis answered with an error
// for the whole run (the limits' writes refused at maxmemory, say) says
// nothing of the claim's outcome that the claim itself could not say
// again: the claim is made on its own, with a new holder, as Claim would
// have. That is safe whatever the failed run did, since a claim it took
// answers the new one InProgress, never Claimed. A run a Cluster node
// did not serve (MOVED or ASK after a failover or a resharding,
// CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN) is a store failure, as it
// is for the limits: the order is refused, one deadline, and the
// limiter's next round trip goes by the reloaded slot map.
func (s *Redis) Settle(ctx context.Context, p *Prepared, r ratelimit.ClaimReply) (Claim, error) {
	if r.Err == nil && !r.Run {
		r.Err = errNotRun
	}
	if r.Err != nil && redisError(r.Err) && !ratelimit.Unserved(r.Err) {
		return s.ClaimAll(context.WithoutCancel(ctx), p.key.Account, p.client, p.ids(), p.fp)
	}
	if r.Err != nil {
		s.failed(ctx, r.Err)
		s.freeLost(ctx, p, r.Err, true)
		return Claim{}, storeError("claim", r.Err)
	}
	if p.ReplicaAcks > 0 {
		if err := s.acked(context.WithoutCancel(ctx), p, r.Reply, r.Acked, r.AckErr); err != nil {
			return Claim{}, err
		}
	}
	return p.outcome(r.Reply)
}

// redisError reports whether err is, or wraps, an error reply from
// Redis.
func redisError(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// Abandon implements Joiner. A claim whose round trip failed without a
// reply (r.Err: a deadline, a connection broken) may have run all the
// same: it is freed in the background (freeLost), as a claim on its own
// is.
func (s *Redis) Abandon(ctx context.Context, p *Prepared, r ratelimit.ClaimReply) error {
	if !r.Run {
		if r.Sent {
			s.freeLost(ctx, p, r.Err, true)
		}
		return nil
	}
	if len(r.Reply) == 0 || r.Reply[0] != "claimed" {
		return nil
	}
	_, err := s.free(ctx, p)
	return err
}

// free releases the claim p, taken by its holder: the identifier's key
// is deleted and the account's share given back (n 1; 0 when p's holder
// does not hold it). When the identifier holds no claim the claim p has
// yet to reach Redis (it went on another connection, its segment
// retransmitted or queued behind a busy Redis) or never will: free then
// fences p's holder for Options.InFlightTimeout, and the claim, should it
// land, takes nothing (finishScript's "lost"), where it took the
// identifier of an order never sent, every retry refused 409 in
// progress and then unknown for the retention. It runs within Options.Timeout
// even when ctx is done (the caller may be answering a client that left).
// In a Cluster it goes to the master of the claim's keys directly, as the
// claim did: a Cluster client built with go-redis's routing policies
// (its default) fetches COMMAND from random nodes on its first command
// under a 5s deadline of its own, which a node failing (as one may have,
// for the claim to be freed) would hold.
func (s *Redis) free(ctx context.Context, p *Prepared) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.Timeout)
	defer cancel()
	var c redis.Scripter = s.c
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, p.Keys[0])
		if err != nil {
			return 0, storeError("free", err)
		}
		c = node
	}
	s.finishRuns.Add(1)
	n, err := s.finish.Run(ctx, c, p.Keys, p.id, "lost", s.fenceTTLArg, "", p.slot, p.charge, 0).Int64()
	if err != nil {
		s.failed(ctx, err)
		return 0, storeError("free", err)
	}
	return n, nil
}

// mayHaveRun reports whether a claim whose call failed with err may have
// run in Redis all the same: no reply came back (the call's deadline
// passed while Redis ran it, or the connection broke after the claim was
// sent). A reply from Redis (an error, OOM, MOVED; the claim's own error
// in a run of the limits, ratelimit.ClaimError) says what it did, and a
// dial that failed that the claim was never sent. A claim its replicas
// did not acknowledge (ErrNotReplicated) had its reply, and was freed
// then (acked).
func mayHaveRun(err error) bool {
	var claimErr ratelimit.ClaimError
	return err != nil && !redisError(err) && !errors.As(err, &claimErr) && !NotSent(err) &&
		!errors.Is(err, ErrNotReplicated)
}

// ids returns the identifiers p claims.
func (p *Prepared) ids() []string { return append([]string{p.key.Identifier}, p.more...) }
