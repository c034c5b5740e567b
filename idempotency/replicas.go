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
// duplicate_protection_unavailable. Sentinel and Cluster promote the
// replica with the most replicated data, so a claim held by one replica
// survives the loss of its master.
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

// runAcked runs the claim script on the master holding keys (one hash
// slot) followed by WAIT for Options.ReplicaAcks replicas, in one round
// trip on one connection. A claim taken but not acknowledged is freed
// and ErrNotReplicated returned.
func (s *Redis) runAcked(ctx context.Context, keys []string, id string, slot int64, args ...any) ([]any, error) {
	conn, err := s.connFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	// EVAL, not EVALSHA: after NOSCRIPT the retry would wait for the
	// replicas a second time. Redis caches the script by its hash all
	// the same; orders are few, the bytes do not matter.
	p := conn.Pipeline()
	cmd := s.claim.Eval(ctx, p, keys, args...)
	wait := redis.NewIntCmd(ctx, "wait", s.o.ReplicaAcks, s.waitTimeout().Milliseconds())
	_ = p.Process(ctx, wait)
	_, _ = p.Exec(ctx)
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	acked, werr := wait.Result()
	if werr == nil && acked >= int64(s.o.ReplicaAcks) {
		return res, nil
	}
	if len(res) > 0 && res[0] == "claimed" {
		// Not forwarded: free the identifier for the retry. Should this
		// be lost too, the retry meets an in-flight claim (409), not a
		// second placement.
		free, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.Timeout)
		defer cancel()
		_ = s.finish.Run(free, s.c, keys, id, "free", ms(s.o.Retention), "", slot).Err()
	}
	if werr != nil {
		return nil, fmt.Errorf("%w: WAIT: %v", ErrNotReplicated, werr)
	}
	return nil, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acked, s.o.ReplicaAcks, s.waitTimeout())
}
