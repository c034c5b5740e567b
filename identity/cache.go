package identity

import (
	"hash/maphash"
	"sync"
	"time"
)

// cacheShards spreads the cache's locks.
const cacheShards = 64

// cache holds verified tokens until they expire, keyed by a 128-bit hash
// of the token under two random seeds (never the token itself), so that
// a token is verified once per process. It is bounded: a full shard first
// drops its expired entries (at most once a second), then any one entry.
type cache struct {
	seeds  [2]maphash.Seed
	shards [cacheShards]cacheShard
	per    int // entries per shard
}

type cacheShard struct {
	mu      sync.RWMutex
	m       map[[2]uint64]cacheEntry
	sweptAt int64    // unix ns of the last sweep of expired entries
	_       [32]byte // keeps shards on separate cache lines
}

type cacheEntry struct {
	id    Identity
	until int64 // unix ns after which the token is no longer valid
}

func newCache(size int) *cache {
	c := &cache{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, per: max(size/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[[2]uint64]cacheEntry)
	}
	return c
}

func (c *cache) key(token string) [2]uint64 {
	return [2]uint64{maphash.String(c.seeds[0], token), maphash.String(c.seeds[1], token)}
}

// get returns the identity cached for token while it is valid at now.
func (c *cache) get(token string, now int64) (Identity, bool) {
	k := c.key(token)
	s := &c.shards[k[0]%cacheShards]
	s.mu.RLock()
	e, ok := s.m[k]
	s.mu.RUnlock()
	if !ok || now >= e.until {
		return Identity{}, false
	}
	return e.id, true
}

// put caches id for token until until (unix ns).
func (c *cache) put(token string, id Identity, until, now int64) {
	k := c.key(token)
	s := &c.shards[k[0]%cacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.per {
		if now-s.sweptAt >= int64(time.Second) {
			s.sweptAt = now
			for ek, e := range s.m {
				if now >= e.until {
					delete(s.m, ek)
				}
			}
		}
		if len(s.m) >= c.per {
			for ek := range s.m {
				delete(s.m, ek)
				break
			}
		}
	}
	s.m[k] = cacheEntry{id: id, until: until}
}

// len returns the number of entries, for tests.
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
