package limiter

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// DenyCache is a Limiter that remembers, in process, the keys its store
// denied and until when: a key known to be over its limit is answered
// from the cache until it would next be allowed, with no store round
// trip, as Envoy's ratelimit local cache does. A denied GCRA request
// changes nothing in the store, so answering it locally gives the same
// decision; only the Remaining of later allowed requests is unaffected.
//
// The cache is keyed by key and limit together (a tier or a reload that
// changes a key's limit does not reuse a deny made under another limit)
// and holds at most MaxKeys entries; when full, the entries that expire
// soonest are evicted first.
type DenyCache struct {
	next   Limiter
	now    func() time.Time
	seed   maphash.Seed
	perMax int
	shards [memShards]denyShard
	hits   atomic.Int64
}

// denyEntry says until when (unix ns) a key is denied, and when it would
// be back to a full burst.
type denyEntry struct{ until, reset int64 }

type denyShard struct {
	mu      sync.Mutex
	until   map[uint64]denyEntry // hash of key and limit → entry
	sweepAt int64
	_       [40]byte
}

// NewDenyCache returns next with a deny cache of at most maxKeys entries
// in front of it. now is the clock; nil means time.Now.
func NewDenyCache(next Limiter, maxKeys int, now func() time.Time) *DenyCache {
	if now == nil {
		now = time.Now
	}
	if maxKeys < memShards {
		maxKeys = memShards
	}
	d := &DenyCache{next: next, now: now, seed: maphash.MakeSeed(), perMax: maxKeys / memShards}
	for i := range d.shards {
		d.shards[i].until = make(map[uint64]denyEntry)
	}
	return d
}

// Hits returns how many decisions the cache answered without the store.
func (d *DenyCache) Hits() int64 { return d.hits.Load() }

// denyKey is what a cache entry is keyed by.
type denyKey struct {
	key   string
	limit Limit
}

// hash combines key and limit.
func (d *DenyCache) hash(key string, l Limit) uint64 {
	return maphash.Comparable(d.seed, denyKey{key, l})
}

// Allow implements Limiter.
func (d *DenyCache) Allow(ctx context.Context, key string, l Limit) (Result, error) {
	h := d.hash(key, l)
	s := &d.shards[h&(memShards-1)]
	now := d.now().UnixNano()
	s.mu.Lock()
	e, ok := s.until[h]
	if ok && e.until <= now {
		delete(s.until, h)
		ok = false
	}
	s.mu.Unlock()
	if ok {
		d.hits.Add(1)
		return Result{RetryAfter: time.Duration(e.until - now), ResetAfter: time.Duration(max(e.reset-now, 0))}, nil
	}
	r, err := d.next.Allow(ctx, key, l)
	if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter == Never {
		return r, err
	}
	e = denyEntry{until: now + int64(r.RetryAfter), reset: now + int64(r.ResetAfter)}
	s.mu.Lock()
	if _, exists := s.until[h]; !exists && len(s.until) >= d.perMax {
		s.evict(now)
	}
	s.until[h] = e
	s.mu.Unlock()
	return r, nil
}

// evict, called with the shard locked and full, drops expired entries
// (at most once a second) or else the sampled entry expiring soonest.
func (s *denyShard) evict(now int64) {
	if now >= s.sweepAt {
		s.sweepAt = now + int64(time.Second)
		n := len(s.until)
		for h, e := range s.until {
			if e.until <= now {
				delete(s.until, h)
			}
		}
		if len(s.until) < n {
			return
		}
	}
	var victim uint64
	soonest := int64(1<<63 - 1)
	i := 0
	for h, e := range s.until {
		if e.until < soonest {
			victim, soonest = h, e.until
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(s.until, victim)
}
