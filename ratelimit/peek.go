package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Inspector is a Store whose state for one key can be read and cleared
// outside a decision. Memory, Redis and DenyCache implement it.
type Inspector interface {
	// Peek reports what a request of cost 1 for key under limit would be
	// answered now, without recording anything: Allowed and Remaining
	// (how many would pass right now, this one included), RetryAfter
	// (the wait until one passes, 0 when one would) and ResetAfter (the
	// wait until the key is back to a full burst).
	Peek(ctx context.Context, key string, limit Limit) (Result, error)
	// Forget clears key's state under limit, as if it were never used.
	Forget(ctx context.Context, key string, limit Limit) error
}

// peek is gcra's read-only twin: what a request of cost 1 would find at
// now for a key whose stored TAT is tat. It agrees with gcra: after an
// allowed request with Remaining r, peek reports r; after a denied one,
// the same RetryAfter.
func peek(now, tat int64, l Limit) Result {
	if !l.valid(1) {
		return never()
	}
	e := l.emission()
	burstOffset := mulSat(e, l.Burst)
	if tat < now {
		tat = now
	}
	r := Result{ResetAfter: time.Duration(tat - now)}
	diff := now - (tat - burstOffset)
	if r.Remaining = diff / e; r.Remaining > 0 {
		r.Allowed = true
		return r
	}
	r.Remaining = 0
	r.RetryAfter = time.Duration(tat + e - burstOffset - now)
	return r
}

// Peek implements Inspector. It never returns an error.
func (m *Memory) Peek(_ context.Context, key string, l Limit) (Result, error) {
	return m.PeekLocal(key, l), nil
}

// PeekLocal is Peek without a context.
func (m *Memory) PeekLocal(key string, l Limit) Result {
	h := maphash.String(m.seed, key)
	s := &m.shards[h&(memShards-1)]
	now := m.now().UnixNano()
	s.mu.Lock()
	tat := s.tats[h]
	s.mu.Unlock()
	return peek(now, tat, l)
}

// Forget implements Inspector. It never returns an error.
func (m *Memory) Forget(_ context.Context, key string, _ Limit) error {
	h := maphash.String(m.seed, key)
	s := &m.shards[h&(memShards-1)]
	s.mu.Lock()
	delete(s.tats, h)
	s.mu.Unlock()
	return nil
}

// redisEpoch is where the decision script counts time from: the TAT it
// stores is decimal seconds since then, on Redis's clock (part of the
// stored layout, as keyPrefix is).
const redisEpoch = 1483228800

// peekScript reads a key's TAT and Redis's clock in one atomic step; it
// writes nothing.
var peekScript = redis.NewScript(`
local t = redis.call("TIME")
return {t[1], t[2], redis.call("GET", KEYS[1])}
`)

// Peek implements Inspector: it reads the TAT the decision script keeps
// under keyPrefix+key, with Redis's clock, and computes the answer here.
// It bypasses the batch queue: an operator's read must not wait behind,
// or slow, traffic.
func (r *Redis) Peek(ctx context.Context, key string, l Limit) (Result, error) {
	if !l.valid(1) {
		return never(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(r.timeout, time.Second))
	defer cancel()
	v, err := peekScript.Run(ctx, r.client, []string{keyPrefix + key}).Slice()
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: redis peek: %w", err)
	}
	if len(v) < 2 {
		return Result{}, fmt.Errorf("ratelimit: redis peek: unexpected answer %v", v)
	}
	sec, _ := v[0].(int64)
	usec, _ := v[1].(int64)
	if s, ok := v[0].(string); ok {
		sec, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := v[1].(string); ok {
		usec, _ = strconv.ParseInt(s, 10, 64)
	}
	now := (sec-redisEpoch)*int64(time.Second) + usec*int64(time.Microsecond)
	tat := now // a missing key is a full bucket
	if len(v) > 2 {
		if s, ok := v[2].(string); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return Result{}, fmt.Errorf("ratelimit: redis peek: TAT %q: %w", s, err)
			}
			tat = int64(f * float64(time.Second))
		}
	}
	return peek(now, tat, l), nil
}

// Forget implements Inspector: it deletes the key's TAT.
func (r *Redis) Forget(ctx context.Context, key string, _ Limit) error {
	ctx, cancel := context.WithTimeout(ctx, max(r.timeout, time.Second))
	defer cancel()
	if err := r.client.Del(ctx, keyPrefix+key).Err(); err != nil {
		return fmt.Errorf("ratelimit: redis forget: %w", err)
	}
	return nil
}

// Peek implements Inspector: the store's answer (the cache holds only
// denials it was given, so the store is the truth).
func (d *DenyCache) Peek(ctx context.Context, key string, l Limit) (Result, error) {
	in, ok := d.next.(Inspector)
	if !ok {
		return Result{}, fmt.Errorf("ratelimit: %T cannot be inspected", d.next)
	}
	return in.Peek(ctx, key, l)
}

// Forget implements Inspector: it drops the cached denial of key under l
// and clears the key in the store.
func (d *DenyCache) Forget(ctx context.Context, key string, l Limit) error {
	d.entries.Remove(limitHash(maphash.String(d.seed, key), l))
	in, ok := d.next.(Inspector)
	if !ok {
		return fmt.Errorf("ratelimit: %T cannot be inspected", d.next)
	}
	return in.Forget(ctx, key, l)
}
