package ratelimit

import (
	"context"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/exgate/exgate/internal/expiring"
)

// DenyCache is a Store that remembers, in process, the keys its store
// denied and until when: a key known to be over its limit is answered
// from the cache until it would next be allowed, with no store round
// trip, as Envoy's ratelimit local cache does. A denied GCRA request
// changes nothing in the store, so answering it locally gives the same
// decision.
//
// The cache is keyed by key and limit together (a tier or a reload that
// changes a key's limit does not reuse a deny made under another limit)
// and holds at most maxKeys entries, maxKeys/64 in each of 64 shards
// (expiring.Map) that its keys fall in by a seed drawn per cache: a full
// shard evicts, of a sample, the entry that expires soonest, so a cache of
// fewer than 128 keys can evict at its second entry.
type DenyCache struct {
	next    Store
	now     func() time.Time
	seed    maphash.Seed
	entries *expiring.Map[int64] // value: unix ns when the key is back to a full burst
	hits    atomic.Int64
}

// NewDenyCache returns next with a deny cache of at most maxKeys entries
// in front of it. now is the clock; nil means time.Now.
func NewDenyCache(next Store, maxKeys int, now func() time.Time) *DenyCache {
	if now == nil {
		now = time.Now
	}
	return &DenyCache{next: next, now: now, seed: maphash.MakeSeed(), entries: expiring.New[int64](maxKeys)}
}

// Hits returns how many decisions the cache answered without the store.
func (d *DenyCache) Hits() int64 { return d.hits.Load() }

// Allow implements Store.
func (d *DenyCache) Allow(ctx context.Context, key string, l Limit) (Result, error) {
	h := limitHash(maphash.String(d.seed, key), l)
	now := d.now().UnixNano()
	if reset, until, ok := d.entries.Get(h, now); ok {
		d.hits.Add(1)
		return Result{RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(max(reset-now, 0))}, nil
	}
	r, err := d.next.Allow(ctx, key, l)
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter == Never {
		return r, err
	}
	d.entries.Put(h, now+int64(r.ResetAfter), now+int64(r.RetryAfter), now)
	return r, nil
}

// AllowN implements Store. A key the cache knows to be denied for one
// request is denied for n; a store's denial of a cost above one is not
// cached, since a smaller request may still pass. A cost no wait lets
// pass (above the burst) is answered so (Never), as the store would, not
// with the wait of a cached denial.
func (d *DenyCache) AllowN(ctx context.Context, key string, l Limit, n int64) (Result, error) {
	if n == 1 {
		return d.Allow(ctx, key, l)
	}
	if !l.valid(n) {
		return never(), nil
	}
	h := limitHash(maphash.String(d.seed, key), l)
	now := d.now().UnixNano()
	if reset, until, ok := d.entries.Get(h, now); ok {
		d.hits.Add(1)
		return Result{RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(max(reset-now, 0))}, nil
	}
	return d.next.AllowN(ctx, key, l, n)
}

// AllowAll implements Store. A request one of whose non-shadow checks
// the cache knows to be denied is refused from the cache, charging
// nothing, as the store would (all or nothing); the other checks are then
// not decided (not Applied). A request with a guard always goes to the
// store, which must record its member, and so does one that a check can
// never pass (a cost above its burst): the client is told that, not a
// cached denial's wait. Denials the store gives for a request of cost 1
// are cached. A CacheOnly request the cache does not refuse gets
// ErrNotCached; a CacheAsked one goes to the store without a look-up, and
// so does every request while the cache holds no denial that has not run
// out (Map.Live): no key of it is hashed.
func (d *DenyCache) AllowAll(ctx context.Context, q *Request, ans *Answer) error {
	now := d.now().UnixNano()
	if q.Guard.Key == "" && !q.CacheAsked && d.entries.Live(now) && !q.neverPasses() {
		for i := range q.Checks {
			c := &q.Checks[i]
			if c.Shadow || !Applies(c.Branch, true) {
				continue
			}
			if reset, until, ok := d.entries.Get(limitHash(maphash.String(d.seed, c.Key), c.Limit), now); ok {
				d.hits.Add(1)
				ans.reset(len(q.Checks))
				ans.Allowed = false
				ans.Results[i] = CheckResult{Applied: true, Result: Result{
					RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(max(reset-now, 0)),
				}}
				return nil
			}
		}
	}
	if q.CacheOnly {
		return ErrNotCached
	}
	if err := d.next.AllowAll(ctx, q, ans); err != nil {
		return err
	}
	if q.cost() != 1 {
		return nil
	}
	for i, r := range ans.Results {
		if r.Applied && !r.Result.Allowed && r.Result.RetryAfter > 0 && r.Result.RetryAfter != Never {
			h := limitHash(maphash.String(d.seed, q.Checks[i].Key), q.Checks[i].Limit)
			d.entries.Put(h, now+int64(r.Result.ResetAfter), now+int64(r.Result.RetryAfter), now)
		}
	}
	return nil
}

// Refund implements Store: the store gives the charge back, and the
// cache forgets the checks' keys, whose denials a refund may have made
// untrue (a key denied while an earlier request of its client waited to
// be refunded).
func (d *DenyCache) Refund(ctx context.Context, q *Request) error {
	err := d.next.Refund(ctx, q)
	for i := range q.Checks {
		d.entries.Remove(limitHash(maphash.String(d.seed, q.Checks[i].Key), q.Checks[i].Limit))
	}
	return err
}

// neverPasses reports whether a non-shadow check of q that applies
// without a guard can never pass q's cost.
func (q *Request) neverPasses() bool {
	for i := range q.Checks {
		c := &q.Checks[i]
		if !c.Shadow && Applies(c.Branch, true) && !c.Limit.valid(q.cost()) {
			return true
		}
	}
	return false
}

// limitHash mixes a limit into the hash of a key, so that a key under one
// limit and the same key under another are cached apart.
func limitHash(h uint64, l Limit) uint64 {
	for _, v := range [3]uint64{uint64(l.Rate), uint64(l.Period), uint64(l.Burst)} {
		h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	}
	return h
}
