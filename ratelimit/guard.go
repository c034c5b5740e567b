package ratelimit

import (
	"sync"
	"time"
)

// guardMaxSets bounds the sets a memoryGuard keeps.
const guardMaxSets = 100000

// memoryGuard keeps Guard sets in process: the memory store's, and the
// one the token-spray guard falls back to when Redis fails.
type memoryGuard struct {
	mu      sync.Mutex
	sets    map[string]*guardSet
	sweepAt int64
}

type guardSet struct {
	end     int64 // unix ns
	members []string
}

func newMemoryGuard() *memoryGuard { return &memoryGuard{sets: map[string]*guardSet{}} }

// admit applies g at now (unix ns) and returns its answer and how long
// the answer holds.
func (s *memoryGuard) admit(g *Guard, now int64) (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.sets[g.Key]
	if w == nil || w.end <= now {
		if w == nil {
			s.makeRoom(now)
		}
		w = &guardSet{end: now + int64(g.Window)}
		s.sets[g.Key] = w
	}
	ttl := time.Duration(w.end - now)
	for _, m := range w.members {
		if m == g.Member {
			return true, ttl
		}
	}
	if len(w.members) >= g.Max {
		return false, ttl
	}
	w.members = append(w.members, g.Member)
	return true, ttl
}

// makeRoom is called with s locked before a set is added: it drops ended
// windows at most once a second, and at the bound evicts the set that
// ends soonest of a sample.
func (s *memoryGuard) makeRoom(now int64) {
	if now >= s.sweepAt {
		s.sweepAt = now + int64(time.Second)
		for k, w := range s.sets {
			if w.end <= now {
				delete(s.sets, k)
			}
		}
	}
	if len(s.sets) < guardMaxSets {
		return
	}
	victim, soonest, i := "", int64(1<<63-1), 0
	for k, w := range s.sets {
		if w.end < soonest {
			victim, soonest = k, w.end
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(s.sets, victim)
}
