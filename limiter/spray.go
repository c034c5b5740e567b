package limiter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sprayStore counts the distinct tokens each client address presents, so
// that inventing tokens cannot multiply an address's allowance.
type sprayStore interface {
	// admit reports whether tokenID may count as its own token for addr:
	// it is already one of addr's tokens in the current window, or addr
	// has presented fewer than max tokens in it. ttl is how long the
	// answer holds (until the window ends).
	admit(ctx context.Context, addr, tokenID string, max int, window time.Duration) (ok bool, ttl time.Duration, err error)
}

// sprayScript keeps, per address, the set of its token ids for one
// window, opened by the first token and closed window later.
var sprayScript = redis.NewScript(`
local key, member, max, window = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3]
if redis.call("SISMEMBER", key, member) == 1 then
  return {1, redis.call("PTTL", key)}
end
local n = redis.call("SCARD", key)
if n >= max then
  return {0, redis.call("PTTL", key)}
end
redis.call("SADD", key, member)
if n == 0 then
  redis.call("PEXPIRE", key, window)
end
return {1, redis.call("PTTL", key)}
`)

// redisSpray is the sprayStore shared by replicas through Redis.
type redisSpray struct {
	client  redis.Scripter
	timeout time.Duration
}

func (s *redisSpray) admit(ctx context.Context, addr, tokenID string, max int, window time.Duration) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := sprayScript.Run(ctx, s.client, []string{KeyPrefix + "spray:" + addr}, tokenID, max, window.Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, errors.New("limiter: unexpected spray script reply")
	}
	ttl := time.Duration(v[1]) * time.Millisecond
	if ttl <= 0 || ttl > window {
		ttl = window
	}
	return v[0] == 1, ttl, nil
}

// memorySpray is the in-process sprayStore: the memory backend's, and the
// Redis backend's fallback when Redis fails.
type memorySpray struct {
	now     func() time.Time
	maxKeys int
	mu      sync.Mutex
	addrs   map[string]*sprayWindow
	sweepAt int64
}

type sprayWindow struct {
	end    int64 // unix ns
	tokens []string
}

func newMemorySpray(now func() time.Time, maxKeys int) *memorySpray {
	return &memorySpray{now: now, maxKeys: maxKeys, addrs: map[string]*sprayWindow{}}
}

func (s *memorySpray) admit(_ context.Context, addr, tokenID string, max int, window time.Duration) (bool, time.Duration, error) {
	now := s.now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.addrs[addr]
	if w == nil || w.end <= now {
		if w == nil {
			s.makeRoom(now)
		}
		w = &sprayWindow{end: now + int64(window)}
		s.addrs[addr] = w
	}
	ttl := time.Duration(w.end - now)
	for _, t := range w.tokens {
		if t == tokenID {
			return true, ttl, nil
		}
	}
	if len(w.tokens) >= max {
		return false, ttl, nil
	}
	w.tokens = append(w.tokens, tokenID)
	return true, ttl, nil
}

// sampleSize is how many windows an eviction looks at to pick a victim.
const sampleSize = 8

// makeRoom is called with s locked before an address is added: it drops
// closed windows at most once a second, and at the bound evicts the
// window that ends soonest of a sample.
func (s *memorySpray) makeRoom(now int64) {
	if now >= s.sweepAt {
		s.sweepAt = now + int64(time.Second)
		for a, w := range s.addrs {
			if w.end <= now {
				delete(s.addrs, a)
			}
		}
	}
	if len(s.addrs) < s.maxKeys {
		return
	}
	victim, soonest, i := "", int64(1<<63-1), 0
	for a, w := range s.addrs {
		if w.end < soonest {
			victim, soonest = a, w.end
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(s.addrs, victim)
}
