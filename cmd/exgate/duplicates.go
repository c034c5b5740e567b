package main

import (
	"context"
	"errors"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
)

// openDuplicateStore returns duplicate protection's store, timed and
// counted by observedStore: in Redis (duplicatesInRedis), shared by every
// replica, or in this process. With the limits in Redis it is their
// client; with the limits in memory it is a client of its own, from
// limiter.redis.
func (a *app) openDuplicateStore(cfg *config.Config) (idempotency.Store, error) {
	opts := idempotency.OptionsFrom(cfg.Idempotency)
	opts.Now = a.d.now
	opts.ReplicaAcks = cfg.IdempotencyReplicaAcks()
	var s idempotency.Store
	if duplicatesInRedis(cfg) {
		a.idem = a.limits.Client
		if a.idem == nil {
			password, _ := a.d.getenv(cfg.Limiter.Redis.PasswordEnv)
			var err error
			if a.idem, err = limiter.NewRedisClient(cfg.Limiter.Redis, password); err != nil {
				return nil, err
			}
			a.idemOwn = true
		}
		s = idempotency.NewRedis(a.idem, opts)
	} else {
		s = idempotency.NewMemory(opts)
	}
	m, err := metrics.NewDuplicateStore(a.d.reg)
	if err != nil {
		return nil, err
	}
	return observedStore{s: s, m: m, now: a.d.now}, nil
}

// duplicatesInRedis reports whether duplicate protection runs and keeps
// its claims in Redis.
func duplicatesInRedis(cfg *config.Config) bool {
	return cfg.ProtectsDuplicates() && cfg.IdempotencyBackend() == config.BackendRedis
}

// observedStore is a duplicate-protection store whose every call is timed
// and, when the store failed, counted, by operation.
type observedStore struct {
	s   idempotency.Store
	m   *metrics.DuplicateStore
	now func() time.Time
}

// observe records one call that started at start.
func (o observedStore) observe(op metrics.DuplicateStoreOp, start time.Time, err error) {
	if !storeFailed(err) {
		err = nil
	}
	o.m.Observe(op, o.now().Sub(start), err)
}

// storeFailed reports whether err is a failure of the store, as opposed
// to one of its answers (the claim is no longer held; the store or the
// account is full, counted in exgate_idempotency_total).
func storeFailed(err error) bool {
	return err != nil && !errors.Is(err, idempotency.ErrClaimLost) && !errors.Is(err, idempotency.ErrNotClaimed) &&
		!errors.Is(err, idempotency.ErrFull) && !errors.Is(err, idempotency.ErrAccountFull)
}

func (o observedStore) Claim(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	start := o.now()
	c, err := o.s.Claim(ctx, key, fp)
	o.observe(metrics.DuplicateClaim, start, err)
	return c, err
}

func (o observedStore) Complete(ctx context.Context, c idempotency.Claim, rec idempotency.Record) error {
	start := o.now()
	err := o.s.Complete(ctx, c, rec)
	o.observe(metrics.DuplicateComplete, start, err)
	return err
}

func (o observedStore) Release(ctx context.Context, c idempotency.Claim) error {
	start := o.now()
	err := o.s.Release(ctx, c)
	o.observe(metrics.DuplicateRelease, start, err)
	return err
}

func (o observedStore) MarkUnknown(ctx context.Context, c idempotency.Claim) error {
	start := o.now()
	err := o.s.MarkUnknown(ctx, c)
	o.observe(metrics.DuplicateMarkUnknown, start, err)
	return err
}
