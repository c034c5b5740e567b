package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims acknowledged by replicas. Redis replicates asynchronously: a
// master that acknowledged a claim and died before its replicas had it
// leaves a promoted replica without the claim, and a retry of the same
// order would be Claimed again and placed twice. With
// Options.ReplicaAcks set, a claim is sent with WAIT on the same
// connection, and an order is forwarded only once that many replicas
// hold the claim; otherwise the claim is released (best effort) and the
// store reports ErrNotReplicated, which the proxy answers with 503
// duplicate_protection_unavailable. With one replica per master, the
// one that acknowledged is the one promoted. With more, Sentinel
// promotes, among the replicas of the best replica-priority, the one with
// the most replicated data, which holds every claim any of them
// acknowledged; a Cluster's election only favours that one (a delay by
// rank), and a replica of better priority is chosen whatever it holds: a
// claim one replica acknowledged can then be lost, unless ReplicaAcks
// counts every replica (docs/operations.md, "Redis failover").
//
// Only the claim waits: a lost Complete, Release or MarkUnknown leaves
// the claim in flight, which retries see as InProgress and then Unknown,
// never as free.

// ErrNotReplicated: fewer replicas than Options.ReplicaAcks acknowledged
// a claim within its deadline, so it could be lost in a failover and the
// order is not forwarded.
var ErrNotReplicated = errors.New("idempotency: claim not acknowledged by enough Redis replicas")

// pipeliner is a client that sends a pipeline on one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// connFor returns a client whose pipelines reach the master holding key
// on one connection: the node's client in a Cluster (whose own pipelines
// are split by node), else the client itself.
func (s *Redis) connFor(ctx context.Context, key string) (pipeliner, error) {
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case pipeliner:
		return c, nil
	}
	return nil, fmt.Errorf("idempotency: replica_acks needs a client with pipelines, have %T", s.c)
}

// waitTimeout is how long WAIT blocks for the replicas: half the call's
// deadline, at least 1ms (WAIT 0 would block for ever).
func (s *Redis) waitTimeout() time.Duration {
	return max(time.Millisecond, s.o.Timeout/2)
}

// runAcked runs the claim p on the master holding its keys (one hash
// slot) followed by WAIT for Options.ReplicaAcks replicas, in one round
// trip on one connection, and returns the claim's reply once acked says
// enough replicas hold it.
func (s *Redis) runAcked(ctx context.Context, p *Prepared) ([]any, error) {
	conn, err := s.connFor(ctx, p.Keys[0])
	if err != nil {
		return nil, err
	}
	// EVAL, not EVALSHA: after NOSCRIPT the retry would wait for the
	// replicas a second time. Redis caches the script by its hash all
	// the same; orders are few, the bytes do not matter.
	pl := conn.Pipeline()
	cmd := s.claim.Eval(ctx, pl, p.Keys, p.Args...)
	wait := redis.NewIntCmd(ctx, "wait", s.o.ReplicaAcks, s.waitTimeout().Milliseconds())
	_ = pl.Process(ctx, wait)
	_, _ = pl.Exec(ctx)
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	acked, werr := wait.Result()
	if err := s.acked(ctx, p, res, acked, werr); err != nil {
		return nil, err
	}
	return res, nil
}

// acked checks that the replicas acknowledged the claim p whose reply is
// res: WAIT answered acked, or failed with werr. A claim taken but not
// acknowledged is freed and ErrNotReplicated returned.
func (s *Redis) acked(ctx context.Context, p *Prepared, res []any, acked int64, werr error) error {
	if werr == nil && acked >= int64(p.ReplicaAcks) {
		return nil
	}
	if len(res) > 0 && res[0] == "claimed" {
		// Not forwarded: free the identifier for the retry. Should this
		// be lost too, the retry meets an in-flight claim (409), not a
		// second placement.
		_, _ = s.free(ctx, p)
	}
	if werr != nil {
		return fmt.Errorf("%w: WAIT: %v", ErrNotReplicated, werr)
	}
	return fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acked, p.ReplicaAcks, p.WaitTimeout)
}
