package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// memShards is the number of independently locked shards of a Memory
// store; a power of two.
const memShards = 64

// sampleSize is how many entries an eviction looks at to pick a victim.
const sampleSize = 8

// Memory is a Store that keeps its state in this process, with the same
// GCRA arithmetic as Redis. Each gateway replica counts on its own, so
// with N replicas behind a load balancer a client may get up to N times
// the limit; use Redis to share limits.
//
// Memory stays bounded: a key is dropped once its bucket is full again
// (it then carries no information), and when MaxKeys is reached the keys
// closest to full are evicted first, which can only ever let a client
// through earlier, never deny one wrongly. Keys are kept as 64-bit seeded
// hashes, so a key costs about 20 bytes however long it is.
type Memory struct {
	now    func() time.Time
	seed   maphash.Seed
	perMax int
	guard  *memoryGuard
	shards [memShards]memShard
}

type memShard struct {
	mu        sync.Mutex
	tats      map[uint64]int64 // key hash → TAT (unix ns)
	nextSweep int64
	_         [40]byte // keep shards on separate cache lines
}

// MemoryOptions configure a Memory store. The zero value is usable.
type MemoryOptions struct {
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// MaxKeys bounds the keys kept. Zero means 1,000,000.
	MaxKeys int
}

// NewMemory returns an empty Memory store.
func NewMemory(o MemoryOptions) *Memory {
	m := &Memory{now: o.Now, seed: maphash.MakeSeed(), guard: newMemoryGuard()}
	if m.now == nil {
		m.now = time.Now
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1000000
	}
	m.perMax = max(o.MaxKeys/memShards, 1) // so that the shards together keep at most MaxKeys
	for i := range m.shards {
		m.shards[i].tats = make(map[uint64]int64)
	}
	return m
}

// Allow implements Store. It never returns an error.
func (m *Memory) Allow(_ context.Context, key string, l Limit) (Result, error) {
	return m.AllowLocal(key, l, 1), nil
}

// AllowN implements Store. It never returns an error.
func (m *Memory) AllowN(_ context.Context, key string, l Limit, n int64) (Result, error) {
	return m.AllowLocal(key, l, n), nil
}

// AllowLocal decides a request of cost n: it passes only when n requests
// would, and a cost above the burst never passes.
func (m *Memory) AllowLocal(key string, l Limit, n int64) Result {
	if !l.valid(n) {
		return never()
	}
	return m.AllowHash(maphash.String(m.seed, key), m.now(), l, n)
}

// AllowHash decides, as AllowLocal does, a request of cost n at now for
// the key whose 64-bit hash is h: for a caller that keys its clients by
// a seeded hash of its own (internal/logshare's share.Key), and so
// allocates no string per decision. The hash's low bits choose the
// shard, so it must be seeded, not chosen by clients; a Memory should
// be given hashes only or string keys only, as a caller's hash may
// equal the hash of one of its string keys.
func (m *Memory) AllowHash(h uint64, now time.Time, l Limit, n int64) Result {
	if !l.valid(n) {
		return never()
	}
	s := &m.shards[h&(memShards-1)]
	at := now.UnixNano()
	s.mu.Lock()
	tat, ok := s.tats[h]
	newTat, r := gcra(at, tat, l, n)
	if newTat != 0 {
		if !ok {
			s.makeRoom(at, m.perMax)
		}
		s.tats[h] = newTat
	}
	s.mu.Unlock()
	return r
}

// AllowAll implements Store: the request's guard, then its checks
// under the locks of every shard they touch (taken in shard order), so
// that the request is decided and charged at once. It never returns an
// error.
func (m *Memory) AllowAll(_ context.Context, q *Request, ans *Answer) error {
	if q.CacheOnly {
		return ErrNotCached
	}
	ans.reset(len(q.Checks))
	if q.Guard.Key != "" {
		ans.Admitted, ans.GuardTTL = m.guard.admit(&q.Guard, m.now().UnixNano())
	}
	var hb [maxChecks]uint64
	hs := hb[:0]
	var locked [memShards]bool
	for i := range q.Checks {
		h := maphash.String(m.seed, q.Checks[i].Key)
		hs = append(hs, h)
		if Applies(q.Checks[i].Branch, ans.Admitted) {
			locked[h&(memShards-1)] = true
		}
	}
	for i, l := range locked {
		if l {
			m.shards[i].mu.Lock()
		}
	}
	now := m.now().UnixNano()
	decideAll(now, q, ans,
		func(i int) int64 { return m.shards[hs[i]&(memShards-1)].tats[hs[i]] },
		func(i int, tat int64) {
			s := &m.shards[hs[i]&(memShards-1)]
			if _, ok := s.tats[hs[i]]; !ok {
				s.makeRoom(now, m.perMax)
			}
			s.tats[hs[i]] = tat
		})
	for i, l := range locked {
		if l {
			m.shards[i].mu.Unlock()
		}
	}
	return nil
}

// Refund implements Store: each check's key gives back the cost, and
// an Allowance check's is charged it. It never returns an error.
func (m *Memory) Refund(_ context.Context, q *Request) error {
	cost := q.cost()
	now := m.now().UnixNano()
	for i := range q.Checks {
		c := &q.Checks[i]
		if !c.Limit.valid(cost) {
			continue // it charged nothing, and can take nothing
		}
		h := maphash.String(m.seed, c.Key)
		s := &m.shards[h&(memShards-1)]
		s.mu.Lock()
		tat, ok := s.tats[h]
		switch {
		case c.Allowance:
			if !ok {
				s.makeRoom(now, m.perMax)
			}
			s.tats[h] = max(tat, now) + mulSat(c.Limit.emission(), cost)
		case !ok:
		case tat-mulSat(c.Limit.emission(), cost) > now:
			s.tats[h] = tat - mulSat(c.Limit.emission(), cost)
		default:
			delete(s.tats, h) // back to a full burst
		}
		s.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys kept.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.tats)
		s.mu.Unlock()
	}
	return n
}

// makeRoom is called with the shard locked before a new key is added.
// At most once a second it drops the keys whose bucket is full again;
// when the shard is still at its bound it evicts, of a sample of keys,
// the one closest to full.
func (s *memShard) makeRoom(now int64, max int) {
	if now >= s.nextSweep && len(s.tats) > 0 {
		s.nextSweep = now + int64(time.Second)
		for h, tat := range s.tats {
			if tat <= now {
				delete(s.tats, h)
			}
		}
	}
	if len(s.tats) < max {
		return
	}
	var victim uint64
	least := int64(1<<63 - 1)
	i := 0
	for h, tat := range s.tats { // map iteration starts at a random place
		if tat < least {
			victim, least = h, tat
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(s.tats, victim)
}
