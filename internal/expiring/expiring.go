// Package expiring is a bounded, sharded map from 64-bit hashes to values
// that expire. It backs the rate limiter's deny cache, the token-spray
// guard's cache of answers and identity's caches of verified and refused
// tokens: each remembers a decision until an instant and must stay bounded
// whatever clients send.
package expiring

import (
	"sync"
	"sync/atomic"
	"time"
)

// shards is the number of independently locked shards; a power of two.
const shards = 64

// sampleSize is how many entries an eviction looks at to pick a victim.
const sampleSize = 8

// Map holds at most its bound of entries. When a shard is full it first
// drops expired entries (at most once a second) and otherwise evicts, of a
// sample, the entry that expires soonest. It is safe for concurrent use.
type Map[V any] struct {
	perMax int
	last   atomic.Int64 // the latest until of any entry put (unix ns)
	shards [shards]shard[V]
}

type shard[V any] struct {
	mu      sync.Mutex
	m       map[uint64]entry[V]
	sweepAt int64
	_       [40]byte // keep shards on separate cache lines
}

type entry[V any] struct {
	until int64 // unix ns
	v     V
}

// New returns an empty Map of at most maxKeys entries (at least one per
// shard).
func New[V any](maxKeys int) *Map[V] {
	if maxKeys < shards {
		maxKeys = shards
	}
	e := &Map[V]{perMax: maxKeys / shards}
	for i := range e.shards {
		e.shards[i].m = make(map[uint64]entry[V])
	}
	return e
}

// Get returns the value of h and until when it holds, if it has not
// expired at now (unix ns).
func (e *Map[V]) Get(h uint64, now int64) (v V, until int64, ok bool) {
	s := &e.shards[h&(shards-1)]
	s.mu.Lock()
	ent, ok := s.m[h]
	if ok && ent.until <= now {
		delete(s.m, h)
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return v, 0, false
	}
	return ent.v, ent.until, true
}

// Put stores v for h until the given time (unix ns).
func (e *Map[V]) Put(h uint64, v V, until, now int64) {
	for last := e.last.Load(); until > last && !e.last.CompareAndSwap(last, until); last = e.last.Load() {
	}
	s := &e.shards[h&(shards-1)]
	s.mu.Lock()
	if _, exists := s.m[h]; !exists && len(s.m) >= e.perMax {
		s.evict(now)
	}
	s.m[h] = entry[V]{until: until, v: v}
	s.mu.Unlock()
}

// Live reports whether an entry may hold at now (unix ns): false when
// every entry put has expired by then, so that every Get at now misses.
// A caller that finds it false spares the key's hash and the look-up.
func (e *Map[V]) Live(now int64) bool { return now < e.last.Load() }

// Len returns the number of entries, expired ones included.
func (e *Map[V]) Len() int {
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Remove drops the entry of h.
func (e *Map[V]) Remove(h uint64) {
	s := &e.shards[h&(shards-1)]
	s.mu.Lock()
	delete(s.m, h)
	s.mu.Unlock()
}

// evict, called with the shard locked and full, makes room for one entry.
func (s *shard[V]) evict(now int64) {
	if now >= s.sweepAt {
		s.sweepAt = now + int64(time.Second)
		n := len(s.m)
		for h, ent := range s.m {
			if ent.until <= now {
				delete(s.m, h)
			}
		}
		if len(s.m) < n {
			return
		}
	}
	var victim uint64
	soonest := int64(1<<63 - 1)
	i := 0
	for h, ent := range s.m { // map iteration starts at a random place
		if ent.until < soonest {
			victim, soonest = h, ent.until
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(s.m, victim)
}
