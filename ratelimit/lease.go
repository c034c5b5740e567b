package ratelimit

import (
	"sync"
	"time"
)

// Leases for hot keys. When concurrent single-limit requests for one key
// meet in a round trip and Redis reported plenty of room on the key last
// time, the round trip's script run also asks for a few requests more
// than they need (one request of that cost, after theirs), and this replica hands them out to the key's next
// requests without asking Redis. The requests are counted in Redis when
// they are taken, so leases can never let more through than the limit;
// tokens not used within leaseTTL are dropped, which can only refuse a
// client a little early. Leases are taken only while the key is far from
// its limit (Redis reported at least leaseMargin times the lease
// remaining) and are at most 1% of the burst, so near a limit every
// decision is Redis's own and exact (a burst under 200 never gets a
// lease).
//
// A lease is renewed ahead of need: the request that takes it below a
// quarter of a lease (leaseLowWater) starts one renewal round trip that
// no caller waits for (Redis.renew), so that a key served from leases at
// a steady rate does not send one of its requests, and every request
// arriving meanwhile, to wait for Redis each time a lease runs out. A key
// has at most one renewal in flight and none while it is near its limit.
// A round trip's group takes a lease only when the key's lease is empty
// (or expired), renewal in flight or not: requests leased and not yet
// handed out, with those a renewal is asking for, stay within two leases,
// and a renewal that comes back late (a starved process, a slow Redis)
// does not send every request meanwhile to Redis one by one.
const (
	leaseTTL      = time.Second
	leaseMax      = 256 // requests
	leaseMargin   = 10
	leaseMaxKeys  = 10000
	leaseFraction = 100 // a lease is at most burst / leaseFraction
	leaseLowWater = 4   // a lease is renewed below size / leaseLowWater tokens
)

// leaseKey identifies a key under one limit.
type leaseKey struct {
	key   string
	limit Limit
}

// lease is one hot key's local state.
type lease struct {
	mu        sync.Mutex
	tokens    int64 // requests taken from Redis and not yet handed out
	until     int64 // unix ns; tokens are dropped after it
	remaining int64 // what Redis reported remaining when the tokens were taken
	resetAt   int64 // unix ns when the key would be back to a full burst, as of then
	known     int64 // the remaining Redis last reported for this key
	renewing  bool  // a renewal round trip is in flight (Redis.renew)
}

// leases are the hot keys' states. It stays small: only keys whose
// requests met in a round trip get an entry, and at leaseMaxKeys the
// map is cleared of entries with nothing to hand out.
type leases struct {
	mu sync.RWMutex
	m  map[leaseKey]*lease
}

func newLeases() *leases { return &leases{m: make(map[leaseKey]*lease)} }

// take hands out one leased request for k, if there is one. When that
// leaves the lease below its low-water mark, the key is far from its
// limit and no renewal is in flight, it also returns the lease, marked
// renewing, and the size of the renewal to ask for: the caller starts the
// renewal (Redis.renew), or calls renewed if it cannot.
func (ls *leases) take(k leaseKey, now int64) (res Result, ok bool, renew *lease, size int64) {
	ls.mu.RLock()
	l := ls.m[k]
	ls.mu.RUnlock()
	if l == nil {
		return Result{}, false, nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tokens <= 0 || now >= l.until {
		return Result{}, false, nil, 0
	}
	l.tokens--
	res = Result{Allowed: true, Remaining: l.remaining + l.tokens, ResetAfter: time.Duration(max(l.resetAt-now, 0))}
	want := leaseSize(k.limit.Burst)
	if l.renewing || l.tokens >= want/leaseLowWater || l.known < leaseMargin*want {
		return res, true, nil, 0
	}
	l.renewing = true
	return res, true, l, want
}

// leaseSize is how many requests a lease of a key with this burst holds.
func leaseSize(burst int64) int64 { return min(burst/leaseFraction, leaseMax) }

// recent reports whether k was given a lease within leaseTTL before its
// last lease expired: a hot key whose lease ran out, which a single call
// may renew. Such a call would otherwise go to Redis alone, and so would
// every call after it until two happen to share a round trip: a key
// served from leases at a steady rate too low for its calls to meet
// would cost a round trip per request again as soon as each lease ran
// out. It creates no state.
func (ls *leases) recent(k leaseKey, now int64) bool {
	ls.mu.RLock()
	l := ls.m[k]
	ls.mu.RUnlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until > 0 && now < l.until+int64(leaseTTL)
}

// get returns k's state, creating it.
func (ls *leases) get(k leaseKey) *lease {
	ls.mu.RLock()
	l := ls.m[k]
	ls.mu.RUnlock()
	if l != nil {
		return l
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l = ls.m[k]; l != nil {
		return l
	}
	if len(ls.m) >= leaseMaxKeys {
		for key, old := range ls.m {
			old.mu.Lock()
			idle := old.tokens == 0 && !old.renewing
			old.mu.Unlock()
			if idle {
				delete(ls.m, key)
			}
		}
		if len(ls.m) >= leaseMaxKeys {
			return &lease{} // full of live leases: this key gets none
		}
	}
	l = &lease{}
	ls.m[k] = l
	return l
}

// extra returns how many requests beyond a group's to ask Redis for,
// to lease: none unless the key is known to be far from its limit and has
// no lease running. A renewal in flight does not stop it: the lease is
// empty, so the two together hold at most two leases.
func (l *lease) extra(burst int64, now int64) int64 {
	want := leaseSize(burst)
	l.mu.Lock()
	defer l.mu.Unlock()
	if want < 2 || l.known < leaseMargin*want || (l.tokens > 0 && now < l.until) {
		return 0
	}
	return want
}

// renewed ends l's renewal: granted requests (0 when Redis refused it or
// failed) were taken, and Redis reported remaining (ok false: no answer).
func (l *lease) renewed(granted, remaining int64, reset time.Duration, ok bool, now int64) {
	if ok {
		l.settle(granted, remaining, reset, now)
	}
	l.mu.Lock()
	l.renewing = false
	l.mu.Unlock()
}

// settle records a round trip's answer for the key: Redis's remaining
// after it, and the requests granted beyond the group's own, to hand out.
func (l *lease) settle(granted, remaining int64, reset time.Duration, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known = remaining
	if granted > 0 {
		if now >= l.until {
			l.tokens = 0 // expired: dropped
		}
		// Two round trips in flight may both lease: add, never overwrite.
		l.tokens += granted
		l.until = now + int64(leaseTTL)
		l.remaining, l.resetAt = remaining, now+int64(reset)
	}
}
