package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/poll"
	"github.com/exgate/exgate/metrics"
)

// idempotencyHealthEvery is how often the duplicate-protection store's room
// (and, with replica_acks, its replicas) is checked besides /readyz's
// probes: the metrics and the log follow it.
const idempotencyHealthEvery = 10 * time.Second

// healthChecker is a duplicate-protection store that reports its room
// (both of idempotency's).
type healthChecker interface {
	Health(ctx context.Context) (idempotency.Health, error)
}

// idempotencyHealth watches duplicate protection's store: its room, and in
// Redis the replicas its claims wait for (idempotency's Health). /readyz
// runs its check, the console shows its last state, the metrics
// (exgate_idempotency_store_bytes, _max_bytes, _full) follow it, and the
// log says when it changes: at start, "duplicate protection ready", or
// what refuses orders (a store full, a master without the replicas
// replica_acks waits for).
type idempotencyHealth struct {
	probe   healthChecker
	m       *metrics.IdempotencyStore
	log     *zap.Logger
	mode    string // "memory", or the Redis topology
	acks    int
	ids     int   // an account's share: identifiers
	bytes   int64 // and bytes
	timeout time.Duration
	last    atomic.Pointer[idempotencyState]
	stop    context.CancelFunc
}

// idempotencyState is the result of a check.
type idempotencyState struct {
	h   idempotency.Health
	err error
}

// newIdempotencyHealth returns the watcher of store s under cfg and starts
// its checks: one now, then every idempotencyHealthEvery until stop.
func newIdempotencyHealth(cfg *config.Config, s healthChecker, m *metrics.IdempotencyStore, log *zap.Logger) *idempotencyHealth {
	d := &idempotencyHealth{probe: s, m: m, log: log, mode: cfg.IdempotencyStore(), acks: cfg.IdempotencyReplicaAcks(),
		timeout: max(time.Second, cfg.Idempotency.Timeout)}
	if d.mode == config.StoreRedis {
		d.mode = redisTopology(cfg.Limiter.Redis)
	}
	d.ids, d.bytes = cfg.IdempotencyShare()
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	go func() {
		_ = d.checkWithin(ctx)
		poll.Every(ctx, idempotencyHealthEvery, func() { _ = d.checkWithin(ctx) })
	}()
	return d
}

// checkWithin checks the store within d.timeout.
func (d *idempotencyHealth) checkWithin(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return d.check(ctx)
}

// check probes the store, records the result and logs a change.
func (d *idempotencyHealth) check(ctx context.Context) error {
	h, err := d.probe.Health(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return err // stopping
	}
	err = describeHealth(err)
	d.m.SetRoom(h.Bytes, h.MaxBytes, h.Full)
	prev := d.last.Swap(&idempotencyState{h: h, err: err})
	switch {
	case err != nil && (prev == nil || prev.err == nil || prev.err.Error() != err.Error()):
		d.log.Error("duplicate protection: orders with an identifier are refused (503)", zap.String("store", d.mode), zap.Error(err))
	case err == nil && (prev == nil || prev.err != nil):
		d.log.Info("duplicate protection ready", zap.String("store", d.mode), zap.Int("replica_acks", d.acks),
			zap.Int("account_identifiers", d.ids), zap.Int64("account_bytes", d.bytes),
			zap.Int64("store_bytes", h.Bytes), zap.Int64("store_max_bytes", h.MaxBytes))
	}
	return err
}

// describeHealth says what a finding of the store's Health means for
// orders, with the code they are refused with.
func describeHealth(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idempotency.ErrReplicasMissing):
		return fmt.Errorf("claims cannot be acknowledged by replicas (503 duplicate_protection_unavailable): %w", err)
	case errors.Is(err, idempotency.ErrFull):
		return fmt.Errorf("duplicate-protection store full, new identifiers refused (503 duplicate_protection_full): %w", err)
	}
	return fmt.Errorf("duplicate-protection store unreachable (503 duplicate_protection_unavailable): %w", err)
}

// status is the console's view of the last check.
func (d *idempotencyHealth) status() *admin.IdempotencyStatus {
	st := &admin.IdempotencyStatus{Mode: d.mode, ReplicaAcks: d.acks, ShareIdentifiers: d.ids, ShareBytes: d.bytes}
	if l := d.last.Load(); l != nil {
		st.Bytes, st.MaxBytes, st.Full, st.Identifiers = l.h.Bytes, l.h.MaxBytes, l.h.Full, l.h.Identifiers
		if l.err != nil {
			st.Error = l.err.Error()
		}
	}
	return st
}

// redisTopology names a Redis set-up: standalone, Sentinel or Cluster.
func redisTopology(r config.Redis) string {
	switch {
	case r.MasterName != "":
		return "redis sentinel"
	case len(r.Addrs) > 1:
		return "redis cluster"
	}
	return "redis standalone"
}
