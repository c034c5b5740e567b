package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
)

// openIdempotencyStore returns duplicate protection's store, timed and
// counted by observedStore: in Redis (idempotencyInRedis), shared by every
// replica, or in this process. With the limits in Redis it is their
// client, and an order's claim rides in the round trip that decides its
// limits (observedJoiner, claimFunc); with the limits in
// memory it is a client of its own, from limiter.redis.
func (a *app) openIdempotencyStore(cfg *config.Config) (idempotency.Store, error) {
	opts := idempotency.OptionsFrom(cfg.Idempotency)
	opts.Now = a.d.now
	opts.ReplicaAcks = cfg.IdempotencyReplicaAcks()
	opts.MaxPerAccount, opts.MaxBytesPerAccount = cfg.IdempotencyShare()
	m, err := metrics.NewDuplicateStore(a.d.reg)
	if err != nil {
		return nil, err
	}
	opts.Report = reportWork(a.log, m)
	var s idempotency.Store
	if idempotencyInRedis(cfg) {
		a.idem = a.limits.Client
		if a.idem == nil {
			password, _ := a.d.getenv(cfg.Limiter.Redis.PasswordEnv)
			var err error
			if a.idem, err = limiter.NewRedisClient(cfg.Limiter.Redis, password); err != nil {
				return nil, err
			}
			a.idemOwn = true
		}
		a.idemStore = idempotency.NewRedis(a.idem, opts)
		s = a.idemStore
	} else {
		s = idempotency.NewMemory(opts)
	}
	if r, ok := s.(metrics.ScriptRunSource); ok {
		m.SetScriptRuns(r)
	}
	a.dup = newIdempotencyHealth(cfg, s.(healthChecker), m, a.log)
	o := observedStore{s: s, m: m, now: a.d.now}
	if j, ok := s.(idempotency.Joiner); ok && joinsLimits(cfg, a.idem, a.idemOwn) {
		return observedJoiner{observedStore: o, j: j}, nil
	}
	return o, nil
}

// reportWork returns the report of what the Redis store does in the
// background (idempotency.Options.Report): each work counted by how it
// ended (exgate_idempotency_store_background_total), and one that leaves
// a claim held — a free or a retried settlement that failed, a
// settlement not retried — logged with its request's id (never the
// account, nor the identifier): its order's retries get 409
// request_in_progress, then outcome_unknown.
func reportWork(log *zap.Logger, m *metrics.IdempotencyStore) func(idempotency.Background) {
	return func(b idempotency.Background) {
		w := metrics.IdempotencyWorkRelease
		switch b.Work {
		case idempotency.WorkFree:
			w = metrics.IdempotencyWorkFree
		case idempotency.WorkComplete:
			w = metrics.IdempotencyWorkComplete
		}
		switch {
		case b.Err == nil:
			m.Work(w, metrics.IdempotencyWorkDone, nil)
			return
		case errors.Is(b.Err, idempotency.ErrClaimLost):
			m.Work(w, metrics.IdempotencyWorkNotHeld, nil)
			return
		case errors.Is(b.Err, idempotency.ErrRetryBudget):
			m.Work(w, metrics.IdempotencyWorkOverBudget, nil)
		default:
			m.Work(w, metrics.IdempotencyWorkFailed, b.Err)
		}
		log.Warn("duplicate protection: work in the background failed; the order's claim stays held, its retries get 409 until it expires",
			zap.String("request_id", b.RequestID), zap.Stringer("work", b.Work), zap.Error(b.Err))
	}
}

// claimFunc is the claim the Redis limiter runs with an order's limits:
// duplicate protection's, when it keeps its claims in Redis (it then
// shares the limiter's client), else none.
func claimFunc(cfg *config.Config) string {
	if idempotencyInRedis(cfg) && cfg.LimiterStore() == config.StoreRedis {
		return idempotency.ClaimFunc
	}
	return ""
}

// joinsLimits reports whether duplicate protection's claims ride in the
// limiter's round trips: they share client c, a standalone, Sentinel or
// Cluster client. In a Cluster an order's claim runs on the master of
// its account's slot, in the same round trip as its limits on theirs
// (ratelimit's claim.go).
func joinsLimits(cfg *config.Config, c redis.UniversalClient, own bool) bool {
	return claimFunc(cfg) != "" && c != nil && !own
}

// idempotencyInRedis reports whether duplicate protection runs and keeps
// its claims in Redis.
func idempotencyInRedis(cfg *config.Config) bool {
	return cfg.IdempotencyRuns() && cfg.IdempotencyStore() == config.StoreRedis
}

// observedStore is a duplicate-protection store whose every call is timed
// and, when the store failed, counted, by operation.
type observedStore struct {
	s   idempotency.Store
	m   *metrics.IdempotencyStore
	now func() time.Time
}

// observe records one call that started at start.
func (o observedStore) observe(op metrics.IdempotencyStoreOp, start time.Time, err error) {
	if !storeFailed(err) {
		err = nil
	}
	o.m.Observe(op, o.now().Sub(start), err)
}

// storeFailed reports whether err is a failure of the store, as opposed
// to one of its answers (the claim is no longer held; the memory store or
// the account is full, counted in exgate_idempotency_total). Redis
// refusing a write at its maxmemory is a failure of Redis, counted with
// kind "full".
func storeFailed(err error) bool {
	if metrics.IsOutOfMemory(err) {
		return true
	}
	return err != nil && !errors.Is(err, idempotency.ErrClaimLost) && !errors.Is(err, idempotency.ErrNotClaimed) &&
		!errors.Is(err, idempotency.ErrFull) && !errors.Is(err, idempotency.ErrAccountFull)
}

func (o observedStore) Claim(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	start := o.now()
	c, err := o.s.Claim(ctx, key, fp)
	o.observe(metrics.IdempotencyOpClaim, start, err)
	return c, err
}

func (o observedStore) ClaimAll(ctx context.Context, account, client string, ids []string, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	start := o.now()
	c, err := o.s.ClaimAll(ctx, account, client, ids, fp)
	o.observe(metrics.IdempotencyOpClaim, start, err)
	return c, err
}

func (o observedStore) Complete(ctx context.Context, c idempotency.Claim, rec idempotency.Record) error {
	start := o.now()
	err := o.s.Complete(ctx, c, rec)
	o.observe(metrics.IdempotencyOpComplete, start, err)
	return err
}

func (o observedStore) Release(ctx context.Context, c idempotency.Claim) error {
	start := o.now()
	err := o.s.Release(ctx, c)
	o.observe(metrics.IdempotencyOpRelease, start, err)
	return err
}

// observedJoiner is an observedStore whose claims can ride in the
// limiter's round trips; a joined claim is timed from when it was
// prepared, just before its round trip.
type observedJoiner struct {
	observedStore
	j idempotency.Joiner
}

func (o observedJoiner) Prepare(p *idempotency.Prepared, account, client string, ids []string, fp idempotency.Fingerprint) {
	o.j.Prepare(p, account, client, ids, fp)
}

func (o observedJoiner) Settle(ctx context.Context, p *idempotency.Prepared, jr ratelimit.ClaimReply) (idempotency.Claim, error) {
	c, err := o.j.Settle(ctx, p, jr)
	o.observe(metrics.IdempotencyOpClaim, p.At, err)
	return c, err
}

// Abandon frees a claim that ran for an order that was not let through;
// it is counted as a release.
func (o observedJoiner) Abandon(ctx context.Context, p *idempotency.Prepared, jr ratelimit.ClaimReply) error {
	start := o.now()
	err := o.j.Abandon(ctx, p, jr)
	o.observe(metrics.IdempotencyOpRelease, start, err)
	return err
}

// observedJoiner must stay a Joiner: the proxy finds out by a type
// assertion, and a missing method would silently make claims their own
// round trip again.
var _ idempotency.Joiner = observedJoiner{}

func (o observedStore) MarkUnknown(ctx context.Context, c idempotency.Claim) error {
	start := o.now()
	err := o.s.MarkUnknown(ctx, c)
	o.observe(metrics.IdempotencyOpMarkUnknown, start, err)
	return err
}
