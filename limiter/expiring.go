package limiter

import (
	"sync"
	"time"
)

// expiring is a bounded, sharded map from 64-bit hashes to values that
// expire. When a shard is full it first drops expired entries (at most
// once a second) and otherwise evicts, of a sample, the entry that
// expires soonest. It backs the deny cache and the token-spray cache.
type expiring[V any] struct {
	perMax int
	shards [memShards]expShard[V]
}

type expShard[V any] struct {
	mu      sync.Mutex
	m       map[uint64]expEntry[V]
	sweepAt int64
	_       [40]byte // keep shards on separate cache lines
}

type expEntry[V any] struct {
	until int64 // unix ns
	v     V
}

func newExpiring[V any](maxKeys int) *expiring[V] {
	if maxKeys < memShards {
		maxKeys = memShards
	}
	e := &expiring[V]{perMax: maxKeys / memShards}
	for i := range e.shards {
		e.shards[i].m = make(map[uint64]expEntry[V])
	}
	return e
}

// get returns the value of h and until when it holds, if it has not
// expired at now.
func (e *expiring[V]) get(h uint64, now int64) (v V, until int64, ok bool) {
	s := &e.shards[h&(memShards-1)]
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

// put stores v for h until the given time.
func (e *expiring[V]) put(h uint64, v V, until, now int64) {
	s := &e.shards[h&(memShards-1)]
	s.mu.Lock()
	if _, exists := s.m[h]; !exists && len(s.m) >= e.perMax {
		s.evict(now)
	}
	s.m[h] = expEntry[V]{until: until, v: v}
	s.mu.Unlock()
}

// len returns the number of entries, expired ones included.
func (e *expiring[V]) len() int {
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// evict, called with the shard locked and full, makes room for one entry.
func (s *expShard[V]) evict(now int64) {
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

// remove drops the entry of h.
func (e *expiring[V]) remove(h uint64) {
	s := &e.shards[h&(memShards-1)]
	s.mu.Lock()
	delete(s.m, h)
	s.mu.Unlock()
}
