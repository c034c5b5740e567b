package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store in Redis, shared by every exgate replica. Each key is
// one hash changed only by Lua scripts that touch that key alone, so
// claims are atomic and the store works on standalone Redis, Sentinel and
// Cluster. The hash holds the state (p in flight, d done, u unknown), the
// fingerprint, the holder's token, the in-flight deadline and, when done,
// the response. Redis expires the key after the retention window.
//
// In-flight deadlines are stamped with the replica's clock (Options.Now);
// clock skew between replicas only shifts when a stuck claim turns
// Unknown, never frees it.
type Redis struct {
	c      redis.Scripter
	o      Options
	claim  *redis.Script
	finish *redis.Script
}

// NewRedis returns a Store on client c (a *redis.Client, *redis.ClusterClient
// or any redis.UniversalClient). Build the client with
// ContextTimeoutEnabled so that the per-call deadline also bounds socket
// reads and writes.
func NewRedis(c redis.Scripter, o Options) *Redis {
	return &Redis{c: c, o: o.withDefaults(), claim: redis.NewScript(claimScript), finish: redis.NewScript(finishScript)}
}

const (
	claimScript = `
local k = KEYS[1]
local cur = redis.call('HMGET', k, 'st', 'fp', 'dl')
if not cur[1] then
  redis.call('HSET', k, 'st', 'p', 'fp', ARGV[1], 'id', ARGV[2], 'dl', ARGV[4])
  redis.call('PEXPIRE', k, ARGV[5])
  return {'claimed'}
end
if cur[2] ~= ARGV[1] then return {'conflict'} end
if cur[1] == 'd' then
  local r = redis.call('HMGET', k, 'status', 'ct', 'body')
  return {'replay', r[1], r[2], r[3]}
end
if cur[1] == 'p' then
  if tonumber(ARGV[3]) < tonumber(cur[3]) then return {'in_progress'} end
  redis.call('HSET', k, 'st', 'u')
end
return {'unknown'}
`
	// finishScript moves a claim held by ARGV[1] (in flight, or turned
	// unknown by its deadline) to its final state: ARGV[2] is "d"
	// (complete, with status, content type and body), "u" (unknown) or
	// "free" (release).
	finishScript = `
local k = KEYS[1]
local cur = redis.call('HMGET', k, 'st', 'id')
if cur[2] ~= ARGV[1] or (cur[1] ~= 'p' and cur[1] ~= 'u') then return 0 end
if ARGV[2] == 'free' then
  redis.call('DEL', k)
  return 1
end
if ARGV[2] == 'd' then
  redis.call('HSET', k, 'st', 'd', 'status', ARGV[4], 'ct', ARGV[5], 'body', ARGV[6])
else
  redis.call('HSET', k, 'st', 'u')
end
redis.call('HDEL', k, 'dl')
redis.call('PEXPIRE', k, ARGV[3])
return 1
`
)

// newID returns a random holder token.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ms writes d in whole milliseconds, at least 1.
func ms(d time.Duration) string {
	return strconv.FormatInt(max(1, d.Milliseconds()), 10)
}

// Claim implements Store.
func (s *Redis) Claim(ctx context.Context, key string, fp Fingerprint) (Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	c := Claim{Key: key, Fingerprint: fp}
	id := newID()
	now := s.o.Now()
	res, err := s.claim.Run(ctx, s.c, []string{s.o.KeyPrefix + key},
		hex.EncodeToString(fp[:]), id,
		strconv.FormatInt(now.UnixMilli(), 10),
		strconv.FormatInt(now.Add(s.o.InFlightTimeout).UnixMilli(), 10),
		ms(s.o.Retention)).Slice()
	if err != nil {
		return Claim{}, fmt.Errorf("idempotency: redis claim: %w", err)
	}
	if len(res) == 0 {
		return Claim{}, fmt.Errorf("idempotency: redis claim: empty reply")
	}
	switch res[0] {
	case "claimed":
		c.Outcome, c.id = Claimed, id
	case "conflict":
		c.Outcome = Conflict
	case "in_progress":
		c.Outcome = InProgress
	case "unknown":
		c.Outcome = Unknown
	case "replay":
		rec, err := replayRecord(res)
		if err != nil {
			return Claim{}, err
		}
		c.Outcome, c.Record = Replay, rec
	default:
		return Claim{}, fmt.Errorf("idempotency: redis claim: unexpected reply %v", res[0])
	}
	return c, nil
}

// replayRecord reads {'replay', status, ct, body}.
func replayRecord(res []any) (*Record, error) {
	if len(res) != 4 {
		return nil, fmt.Errorf("idempotency: redis claim: malformed replay of %d items", len(res))
	}
	st, _ := res[1].(string)
	status, err := strconv.Atoi(st)
	if err != nil || status < 100 || status > 999 {
		return nil, fmt.Errorf("idempotency: redis claim: malformed stored status %q", st)
	}
	ct, _ := res[2].(string)
	body, _ := res[3].(string)
	return &Record{Status: status, ContentType: ct, Body: []byte(body)}, nil
}

// end runs the finish script.
func (s *Redis) end(ctx context.Context, c Claim, state string, rec Record) error {
	if c.Outcome != Claimed || c.id == "" {
		return ErrNotClaimed
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	n, err := s.finish.Run(ctx, s.c, []string{s.o.KeyPrefix + c.Key},
		c.id, state, ms(s.o.Retention), strconv.Itoa(rec.Status), rec.ContentType, rec.Body).Int()
	if err != nil {
		return fmt.Errorf("idempotency: redis %s: %w", state, err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	return nil
}

// Complete implements Store.
func (s *Redis) Complete(ctx context.Context, c Claim, rec Record) error {
	if len(rec.Body) > s.o.MaxResponseBytes {
		return s.end(ctx, c, "u", Record{})
	}
	return s.end(ctx, c, "d", rec)
}

// Release implements Store.
func (s *Redis) Release(ctx context.Context, c Claim) error {
	return s.end(ctx, c, "free", Record{})
}

// MarkUnknown implements Store.
func (s *Redis) MarkUnknown(ctx context.Context, c Claim) error {
	return s.end(ctx, c, "u", Record{})
}
