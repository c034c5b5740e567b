package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/share"
)

// Redis is a Store in Redis, shared by every exgate replica. Each
// identifier is one string key changed only by Lua scripts, so claims
// are atomic; in a Cluster a claim's keys and its share counter carry
// its account's hash tag (keys), so every script touches one hash slot,
// and the store works on standalone Redis, Sentinel and Cluster. Redis
// expires a key after the retention window.
//
// The value is as small as the protocol allows (docs/validation.md
// measures it): a state byte (p in flight, u unknown, d done), the first
// 16 bytes of the body's SHA-256, then for p and u the holder's 8-byte
// token (and for p the in-flight deadline in Unix milliseconds), for d
// the response: three status digits, the Content-Type, a newline and the
// body. A bulk's other identifiers hold only m and the fingerprint: the
// state and the response are its first identifier's (ClaimAll).
//
// A client's share (an account's, or an address's for its opaque
// tokens: keys) is counted in one small hash per client whose
// fields are time slots (a 24th of the retention): n<slot> holds how many
// identifiers were claimed in the slot and b<slot> the bytes they were
// charged (RedisBytes); a slot is dropped once every claim made in it has
// expired, so the count never undercounts what the account holds.
//
// In-flight deadlines are stamped with the replica's clock (Options.Now);
// clock skew between replicas only shifts when a stuck claim turns
// Unknown, never frees it.
type Redis struct {
	c      redis.Scripter
	o      Options
	claim  *redis.Script
	finish *redis.Script
	// finishAll runs the finishes of a round trip (finish.go); cluster
	// says the client is a Cluster's, whose script runs keep to one slot.
	finishAll *redis.Script
	cluster   bool
	// claimRuns and finishRuns count the script runs sent: claims of the
	// store's own (not riding with the limits) and finish runs
	// (ScriptRuns).
	claimRuns, finishRuns atomic.Uint64
	slotMS                int64 // width of an account-share slot
	// room is the bytes duplicate protection may hold in Redis, outside a
	// Cluster: maxmemory less what Redis holds besides the store's
	// counted claims, and less the margin Health calls full, as the last
	// Health read it (measureRoom); 0 when unknown (no maxmemory, INFO
	// not allowed, a Cluster), when a share is its static bound alone.
	room atomic.Int64
	// finishes queues the finish runs of concurrent orders for a shared
	// round trip (finish.go).
	finishes finishLane
	// background counts what the store does in the background
	// (background.go): the frees of lost claims (freeLost) and the
	// settlements retried (settleLater); backgroundMu keeps work from
	// being counted while Wait waits (a WaitGroup's Add concurrent with
	// its Wait is a misuse that panics). quit, closed by Wait, cuts the
	// retries' waits short; settling holds the bytes the retried
	// settlements hold, each client's share (settleRetryBytes).
	background   sync.WaitGroup
	backgroundMu sync.RWMutex
	quit         chan struct{}
	quitOnce     sync.Once
	settling     *share.Pool

	// The scripts' arguments that are the same in every call, encoded
	// once: the retention, the share counter's lifetime and a fence's
	// (free) in milliseconds, the account's share.
	retentionArg, counterTTLArg, fenceTTLArg, maxPerAccountArg, maxBytesArg any
}

// NewRedis returns a Store on client c (a *redis.Client, *redis.ClusterClient
// or any redis.UniversalClient). Build the client with
// ContextTimeoutEnabled so that the per-call deadline also bounds socket
// reads and writes. Redis must not evict keys (maxmemory-policy
// noeviction): an evicted claim is a forgotten identifier.
func NewRedis(c redis.Scripter, o Options) *Redis {
	o = o.withDefaults()
	slotMS := max(1, (o.Retention / 24).Milliseconds())
	_, cluster := c.(*redis.ClusterClient)
	return &Redis{c: c, o: o, claim: redis.NewScript(claimScript), finish: redis.NewScript(finishScript),
		finishAll: redis.NewScript(finishAllScript), cluster: cluster, quit: make(chan struct{}),
		settling:     share.NewPool(settleRetryBytes),
		slotMS:       slotMS,
		retentionArg: ms(o.Retention), fenceTTLArg: ms(o.InFlightTimeout), counterTTLArg: ms(o.Retention + o.InFlightTimeout + time.Duration(slotMS)*time.Millisecond),
		maxPerAccountArg: o.MaxPerAccount, maxBytesArg: o.MaxBytesPerAccount}
}

// ScriptRuns returns how many script runs the store has sent: claims of
// its own, not riding in the limits' round trip, and finish runs, each
// carrying the finishes of one round trip (one per hash slot in a
// Cluster). A run sent again with its script after NOSCRIPT counts once.
func (s *Redis) ScriptRuns() (claims, finishes uint64) {
	return s.claimRuns.Load(), s.finishRuns.Load()
}

// within returns ctx bounded by Options.Timeout: ctx itself when its own
// deadline comes no later (the gateway gives each call one), else a
// context of its own, to be cancelled.
func (s *Redis) within(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.o.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.o.Timeout)
}

// ClaimFunc is the Lua source of the claim, as a function claim(KEYS,
// ARGV) that returns the claim's reply (or redis.error_reply): KEYS are
// the first identifier's key, its client's share counter, the store's
// counter (outside a Cluster; in one the client's counter again) and the
// keys of the request's other identifiers (Redis.keys), ARGV the
// arguments Redis.prepare encodes. The store's own claim script calls it, and so
// does the rate limiter's decision script when an order's claim rides in
// its round trip (joined.go): one claim, one source. A reply that takes
// the identifiers is {'claimed'} (ratelimit.ClaimTaken).
//
// A held first identifier answers for the request: another request's
// (another body's, or another bulk's other identifier) is a conflict,
// the same body's says where that request is. A held other identifier is
// a conflict, unless it is a mark of this very request (the same
// fingerprint) whose first identifier has just expired.
//
// A new claim is charged to its client's share: refused ('account_full')
// past the static share (ARGV[8] identifiers, ARGV[9] bytes) or, outside
// a Cluster and when the store knows its room (ARGV[12] bytes: Redis.room),
// when the client holds some bytes and no fewer than the room leaves free
// (the dynamic threshold of docs/pools.md, as the memory store's take),
// and 'full' when the claim does not fit in what is left free.
const ClaimFunc = `
local function claimHeld(key, oldest)
  local slots = redis.call('HGETALL', key)
  local n, b = 0, 0
  for i = 1, #slots, 2 do
    if tonumber(string.sub(slots[i], 2)) < oldest then
      redis.call('HDEL', key, slots[i])
    elseif string.sub(slots[i], 1, 1) == 'n' then
      n = n + tonumber(slots[i + 1])
    else
      b = b + tonumber(slots[i + 1])
    end
  end
  return n, b
end
local function claim(KEYS, ARGV)
  local fp = ARGV[1]
  local v = redis.call('GET', KEYS[1])
  local fence = ''
  if v and string.sub(v, 1, 1) == 'f' then
    for i = 2, #v - 7, 8 do
      if string.sub(v, i, i + 7) == ARGV[2] then return {'fenced', 0} end
    end
    fence, v = v, false
  end
  if v then
    local st = string.sub(v, 1, 1)
    if #v < 17 or not (st == 'p' or st == 'u' or st == 'd' or st == 'm') then
      return redis.error_reply('idempotency: malformed entry')
    end
    if st == 'm' or string.sub(v, 2, 17) ~= fp then return {'conflict', 0} end
    if st == 'd' then return {'replay', string.sub(v, 18)} end
    if st == 'u' then return {'unknown', 0} end
    local deadline = tonumber(string.match(v, '^%d+', 26))
    if not deadline then return redis.error_reply('idempotency: malformed entry') end
    if tonumber(ARGV[3]) < deadline then return {'in_progress', 0} end
    redis.call('SET', KEYS[1], 'u' .. string.sub(v, 2, 25), 'KEEPTTL')
    return {'unknown', 0}
  end
  for i = 4, #KEYS do
    local m = redis.call('GET', KEYS[i])
    if m and m ~= 'm' .. fp then return {'conflict', i - 3} end
  end
  local oldest = tonumber(ARGV[7])
  local n, b = claimHeld(KEYS[2], oldest)
  local k, charge = #KEYS - 2, tonumber(ARGV[11])
  if n + k > tonumber(ARGV[8]) or b + charge > tonumber(ARGV[9]) then return {'account_full'} end
  local store, room = KEYS[3] ~= KEYS[2], tonumber(ARGV[12])
  if store and room > 0 then
    local _, used = claimHeld(KEYS[3], oldest)
    local free = room - used
    if b > 0 and b >= free then return {'account_full'} end
    if charge > free then return {'full'} end
  end
  redis.call('SET', KEYS[1], 'p' .. fp .. ARGV[2] .. ARGV[4] .. fence, 'PX', ARGV[5])
  for i = 4, #KEYS do
    redis.call('SET', KEYS[i], 'm' .. fp, 'PX', ARGV[5])
  end
  for i = 2, store and 3 or 2 do
    redis.call('HINCRBY', KEYS[i], 'n' .. ARGV[6], k)
    redis.call('HINCRBY', KEYS[i], 'b' .. ARGV[6], charge)
    redis.call('PEXPIRE', KEYS[i], ARGV[10])
  end
  return {'claimed'}
end
`

// Entry layout: byte 1 the state, bytes 2–17 the fingerprint, 18–25 the
// holder's token, 26– the in-flight deadline (p) or, from byte 18, the
// response (d). A mark (m) is byte 1 and the fingerprint. A fence (f) is
// byte 1 and the tokens of up to 8 holders, 8 bytes each, whose lost
// claims were freed before they reached Redis (Redis.free): a claim by one
// of them takes nothing ('fenced'), any other claim sees the identifier
// free, and carries the fence after its deadline (p), so that a release
// of it (free) leaves the fence again: the late claim, landing after the
// retry's claim was released, still takes nothing.
const (
	fpLen = 16
	idLen = 8

	// claimScript is the store's own claim: ClaimFunc, called.
	claimScript = ClaimFunc + "return claim(KEYS, ARGV)\n"
	// finishScript moves a claim held by ARGV[1] (in flight, or turned
	// unknown by its deadline) to its final state: ARGV[2] is "d"
	// (complete, with the encoded response in ARGV[4], charged to the
	// account's share in slot ARGV[5]), "u" (unknown) or "free"
	// (release, which deletes the request's marks too and gives back to
	// slot ARGV[5] the identifiers and the ARGV[6] bytes the claim
	// charged, and leaves the fence the claim carried, if any, for ARGV[3]
	// milliseconds; the response is charged ARGV[7] bytes). "lost" frees as
	// "free" does a claim whose reply was lost, and when the first
	// identifier holds no claim (or a fence) it fences ARGV[1] instead,
	// for ARGV[3] milliseconds: the claim has yet to reach Redis, or never
	// will, and once there it takes nothing. KEYS are the
	// claim's: its first identifier's key, the share counter, the store's
	// counter (the share counter again in a Cluster), the marks' keys;
	// the marks live as long as the first, and both counters are charged
	// and given back alike.
	finishScript = finishFunc + "return finish(KEYS, ARGV)\n"
	// finishFunc is the Lua source of one finish, as a function
	// finish(KEYS, ARGV) returning 1, or 0 when the claim is not held by
	// ARGV[1] (any more): finishScript calls it once, finishAllScript
	// (finish.go) once for each run of a round trip. One finish, one
	// source.
	finishFunc = `
local function finish(KEYS, ARGV)
  local v = redis.call('GET', KEYS[1])
  if ARGV[2] == 'lost' and (not v or string.sub(v, 1, 1) == 'f') then
    local held = v and string.sub(string.sub(v, 2), -56) or ''
    redis.call('SET', KEYS[1], 'f' .. held .. ARGV[1], 'PX', ARGV[3])
    return 0
  end
  if not v then return 0 end
  local st = string.sub(v, 1, 1)
  if (st ~= 'p' and st ~= 'u') or string.sub(v, 18, 25) ~= ARGV[1] then return 0 end
  local mark = 'm' .. string.sub(v, 2, 17)
  local last = KEYS[3] ~= KEYS[2] and 3 or 2
  if ARGV[2] == 'free' or ARGV[2] == 'lost' then
    local fence = st == 'p' and string.match(v, '^%d+(f.*)', 26)
    if fence and #fence > 1 then
      redis.call('SET', KEYS[1], fence, 'PX', ARGV[3])
    else
      redis.call('DEL', KEYS[1])
    end
    for i = 4, #KEYS do
      if redis.call('GET', KEYS[i]) == mark then redis.call('DEL', KEYS[i]) end
    end
    for c = 2, last do
      for _, f in ipairs({{'n' .. ARGV[5], #KEYS - 2}, {'b' .. ARGV[5], tonumber(ARGV[6])}}) do
        local n = tonumber(redis.call('HGET', KEYS[c], f[1]))
        if n and n > f[2] then
          redis.call('HINCRBY', KEYS[c], f[1], -f[2])
        elseif n then
          redis.call('HDEL', KEYS[c], f[1])
        end
      end
    end
    return 1
  end
  if ARGV[2] == 'd' then
    redis.call('SET', KEYS[1], 'd' .. string.sub(v, 2, 17) .. ARGV[4], 'PX', ARGV[3])
    for c = 2, last do
      if redis.call('EXISTS', KEYS[c]) == 1 then
        redis.call('HINCRBY', KEYS[c], 'b' .. ARGV[5], ARGV[7])
      end
    end
  else
    redis.call('SET', KEYS[1], 'u' .. string.sub(v, 2, 25), 'PX', ARGV[3])
  end
  for i = 4, #KEYS do
    if redis.call('GET', KEYS[i]) == mark then redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
  end
  return 1
end
`
)

// newID returns a random holder token.
func newID() string {
	var b [idLen]byte
	_, _ = rand.Read(b[:])
	return string(b[:])
}

// ms writes d in whole milliseconds, at least 1.
func ms(d time.Duration) string {
	return strconv.FormatInt(max(1, d.Milliseconds()), 10)
}

// accountTag returns the hash tag of an account's keys: 16 characters of
// base64url SHA-256 (96 bits), so that any account name makes a short key
// without braces, and an account's keys share one Cluster slot. It also
// shortens long identifiers.
func accountTag(s string) string {
	var tag [tagLen]byte
	return string(appendTag(tag[:0], s))
}

// tagLen is the length of accountTag's tags.
const tagLen = 16

// appendTag appends accountTag(s) to dst.
func appendTag(dst []byte, s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.AppendEncode(dst, sum[:12])
}

// shortIdentifier is the longest identifier a key holds as it is; a
// longer one is replaced by its hash, 16 characters, so that keys stay
// short (a UUID identifier would take 36).
const shortIdentifier = 15

// redisKeyBytes is what one identifier's key costs Redis beyond its
// name and value: the key's object and dict entry, its expiry; the value
// is charged at its allocation's size (allocated). TestRedisFootprint
// measures that the bytes charged (RedisBytes) cover what a claim really
// takes.
const redisKeyBytes = 144

// RedisBytes is what the Redis store charges an account's share for one
// identifier whose key is keyLen bytes long holding a value of valueLen
// bytes.
func RedisBytes(keyLen, valueLen int) int64 {
	return int64(redisKeyBytes + keyLen + allocated(valueLen+8)) // + the string's header
}

// allocated returns the size of the allocation that holds n bytes, as
// jemalloc (Redis's) and Go's allocator size them: 16-byte steps up to
// 128, then four sizes to each doubling; Go's are finer, never larger.
func allocated(n int) int {
	if n <= 128 {
		return (n + 15) &^ 15
	}
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return (n + step - 1) &^ (step - 1)
}

// Lengths of the values the claim writes: an in-flight first identifier
// (p, fingerprint, holder, a 13-digit deadline) and a mark (m,
// fingerprint).
const (
	inFlightLen = 1 + fpLen + idLen + 13
	markLen     = 1 + fpLen
)

// keys returns the Redis keys of a claim of account's identifiers ids,
// charged to client's share: the first identifier's, the share counter,
// the store's counter (storeCounter; in a Cluster the share counter
// again), the other identifiers'. An identifier's key carries its account's hash
// tag, wherever the claim comes from: an identifier is its account's, and
// a retry from another client address (IPv6 then IPv4, a NAT's pool, a
// new network) meets the order it repeats. The share counter carries the
// tag of whose share the claim is charged to: the account's, or outside a
// Cluster its client's (Key). In a Cluster a claim's keys must share one
// slot, and an address's counter is in another slot than its tokens'
// identifiers, so there a claim is charged to its account's share
// (docs/limits.md, "Upgrading"). Short identifiers are kept as they are
// and long ones hashed, so the two never meet (their lengths differ). The
// keys are written in one string, of which each is a part.
func (s *Redis) keys(account, client string, ids []string) []string {
	var tagBuf, counterBuf [tagLen]byte
	tag := appendTag(tagBuf[:0], account)
	counter := tag
	if client != "" && client != account && !s.cluster {
		counter = appendTag(counterBuf[:0], client)
	}
	prefix := s.o.KeyPrefix
	n := len(prefix) + 2 + tagLen + 1 // the share counter's: prefix%{tag}
	if !s.cluster {
		n += len(prefix) + len(storeCounter)
	}
	for _, id := range ids {
		n += len(prefix) + 1 + tagLen + 1 + min(len(id), tagLen)
	}
	var b strings.Builder
	b.Grow(n)
	ends := make([]int, 0, 8)
	for i, id := range ids {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.Write(tag)
		b.WriteByte('}')
		if len(id) > shortIdentifier {
			var idTag [tagLen]byte
			b.Write(appendTag(idTag[:0], id))
		} else {
			b.WriteString(id)
		}
		ends = append(ends, b.Len())
		if i == 0 {
			b.WriteString(prefix)
			b.WriteString("%{")
			b.Write(counter)
			b.WriteByte('}')
			ends = append(ends, b.Len())
			if !s.cluster {
				b.WriteString(prefix)
				b.WriteString(storeCounter)
			}
			ends = append(ends, b.Len()) // in a Cluster, empty: the share counter again
		}
	}
	all := b.String()
	keys := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		keys[i], start = all[start:end], end
	}
	if s.cluster {
		keys[2] = keys[1]
	}
	return keys
}

// storeCounter names, after the key prefix, the store's counter outside a
// Cluster: the identifiers and bytes every client's claims hold, counted
// as a share counter counts them, that a claim compares with the room
// (Redis.room).
const storeCounter = "%store"

// keyOf returns the keys of a claim of one identifier (Redis.keys).
func (s *Redis) keyOf(k Key) []string { return s.keys(k.Account, "", []string{k.Identifier}) }

// charge returns what a claim on keys charges its account's share.
func charge(keys []string) int64 {
	n := RedisBytes(len(keys[0]), inFlightLen)
	for _, k := range keys[3:] {
		n += RedisBytes(len(k), markLen)
	}
	return n
}

// storeError wraps a Redis failure; Redis refusing writes at maxmemory is
// ErrFull.
func storeError(op string, err error) error {
	if strings.Contains(err.Error(), "OOM ") {
		return fmt.Errorf("idempotency: redis %s: %w (%v)", op, ErrFull, err)
	}
	return fmt.Errorf("idempotency: redis %s: %w", op, err)
}

// Claim implements Store.
func (s *Redis) Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error) {
	return s.ClaimAll(ctx, key.Account, "", []string{key.Identifier}, fp)
}

// ClaimAll implements Store.
func (s *Redis) ClaimAll(ctx context.Context, account, client string, ids []string, fp Fingerprint) (Claim, error) {
	ctx, cancel := s.within(ctx)
	defer cancel()
	var p Prepared
	s.prepare(&p, account, client, ids, fp)
	var res []any
	var err error
	s.claimRuns.Add(1)
	if s.o.ReplicaAcks > 0 {
		res, err = s.runAcked(ctx, &p)
	} else {
		res, err = s.claim.Run(ctx, s.c, p.Keys, p.Args...).Slice()
	}
	if err != nil {
		s.failed(ctx, err)
		s.freeLost(ctx, &p, err, false)
		return Claim{}, storeError("claim", err)
	}
	return p.outcome(res)
}

// prepare fills p with the keys and arguments of a claim of account's
// identifiers ids, charged to client's share, with fingerprint fp
// (ClaimFunc's KEYS and ARGV), made now by a new holder.
func (s *Redis) prepare(p *Prepared, account, client string, ids []string, fp Fingerprint) {
	// The fingerprint's argument and a new holder's token, in one string.
	var b [fpLen + idLen]byte
	copy(b[:], fp[:fpLen])
	_, _ = rand.Read(b[fpLen:])
	fpAndID := string(b[:])
	fpArg, id := fpAndID[:fpLen], fpAndID[fpLen:]
	at := s.o.Now()
	now := at.UnixMilli()
	slot := now / s.slotMS
	oldest := (now - (s.o.Retention + s.o.InFlightTimeout).Milliseconds()) / s.slotMS
	keys := s.keys(account, client, ids)
	cost := charge(keys)
	a := &claimArgs{fp: fpArg, id: id, now: now, deadline: now + s.o.InFlightTimeout.Milliseconds(),
		slot: slot, oldest: oldest, cost: cost, room: s.room.Load()}
	a.argv = [...]any{&a.fp, &a.id, &a.now, &a.deadline,
		s.retentionArg, &a.slot, &a.oldest, s.maxPerAccountArg, s.maxBytesArg, s.counterTTLArg, &a.cost, &a.room}
	*p = Prepared{
		ClaimPart: ratelimit.ClaimPart{
			Keys:        keys,
			Args:        a.argv[:],
			Timeout:     s.o.Timeout,
			ReplicaAcks: s.o.ReplicaAcks,
			WaitTimeout: s.waitTimeout(),
		},
		At:     at,
		key:    Key{Account: account, Identifier: ids[0]},
		client: client,
		more:   ids[1:],
		fp:     fp,
		id:     id,
		slot:   slot,
		charge: cost,
	}
}

// claimArgs holds a claim's arguments (ClaimFunc's ARGV) in one
// allocation: argv points at the values of the claim's own (go-redis
// writes a *string or *int64 as the value it points at), where each value
// boxed in an interface took one. They never change once prepared: the
// rate limiter may write them after their request has gone (a round trip
// its client left).
type claimArgs struct {
	fp, id                                  string
	now, deadline, slot, oldest, cost, room int64
	argv                                    [12]any
}

// outcome reads ClaimFunc's reply res to the claim p prepared.
func (p *Prepared) outcome(res []any) (Claim, error) {
	c := Claim{Key: p.key, Fingerprint: p.fp}
	if len(res) == 0 {
		return Claim{}, errors.New("idempotency: redis claim: empty reply")
	}
	switch res[0] {
	case "claimed":
		c.Outcome, c.more, c.keys, c.id, c.slot, c.charge = Claimed, p.more, p.Keys, p.id, p.slot, p.charge
		c.client = p.client
		return c, nil
	case "account_full":
		return Claim{}, ErrAccountFull
	case "full":
		return Claim{}, ErrFull
	case "replay":
		rec, err := replayRecord(res)
		if err != nil {
			return Claim{}, err
		}
		c.Outcome, c.Record = Replay, rec
		return c, nil
	case "conflict":
		c.Outcome = Conflict
	case "in_progress":
		c.Outcome = InProgress
	case "unknown":
		c.Outcome = Unknown
	default:
		return Claim{}, fmt.Errorf("idempotency: redis claim: unexpected reply %v", res[0])
	}
	at, ok := res[len(res)-1].(int64)
	if len(res) != 2 || !ok || at < 0 || int(at) > len(p.more) {
		return Claim{}, fmt.Errorf("idempotency: redis claim: malformed reply %v", res)
	}
	c.At = int(at)
	return c, nil
}

// failed reacts to a failed call: in a Cluster, a call that did not get
// a reply from Redis (a master lost, a connection refused) reloads the
// slot map in the background, so that calls reach the promoted replica as
// soon as the Cluster has one rather than at go-redis's periodic reload.
func (s *Redis) failed(ctx context.Context, err error) {
	var reply redis.Error
	if c, ok := s.c.(*redis.ClusterClient); ok && !errors.As(err, &reply) {
		c.ReloadState(ctx)
	}
}

// appendRecord appends a response as a done entry keeps it after its
// fingerprint: three status digits, the Content-Type, a newline, the
// body. A response with headers or an Accept to keep is written in the
// form of headers, after an h: the status digits, the Content-Type and a
// newline, the Accept and a newline, a line "name:value" for each header
// kept, an empty line, the body. Records without either keep the first
// form, which exgate before headers were kept reads too.
func appendRecord(dst []byte, rec *Record) []byte {
	ct := rec.ContentType
	if strings.ContainsAny(ct, "\r\n") { // not a header value; never sent by net/http
		ct = ""
	}
	if len(rec.Header) == 0 && rec.Accept == "" {
		dst = strconv.AppendInt(dst, int64(rec.Status), 10)
		dst = append(dst, ct...)
		dst = append(dst, '\n')
		return append(dst, rec.Body...)
	}
	dst = append(dst, 'h')
	dst = strconv.AppendInt(dst, int64(rec.Status), 10)
	dst = append(dst, ct...)
	dst = append(dst, '\n')
	dst = append(dst, keptValue(rec.Accept)...)
	dst = append(dst, '\n')
	for i := 0; i+1 < len(rec.Header); i += 2 {
		name, value := rec.Header[i], rec.Header[i+1]
		if !keptPair(name, value) {
			continue
		}
		dst = append(dst, name...)
		dst = append(dst, ':')
		dst = append(dst, value...)
		dst = append(dst, '\n')
	}
	dst = append(dst, '\n')
	return append(dst, rec.Body...)
}

// replayRecord reads {'replay', encoded response}, in either of
// appendRecord's forms.
func replayRecord(res []any) (*Record, error) {
	v, _ := res[len(res)-1].(string)
	if len(res) != 2 {
		return nil, errors.New("idempotency: redis claim: malformed replay")
	}
	headed := strings.HasPrefix(v, "h")
	if headed {
		v = v[1:]
	}
	if len(v) < 4 {
		return nil, errors.New("idempotency: redis claim: malformed replay")
	}
	status, err := strconv.Atoi(v[:3])
	if err != nil || status < 100 {
		return nil, fmt.Errorf("idempotency: redis claim: malformed stored status %q", v[:3])
	}
	ct, rest, ok := strings.Cut(v[3:], "\n")
	if !ok {
		return nil, errors.New("idempotency: redis claim: malformed stored response")
	}
	rec := &Record{Status: status, ContentType: ct}
	if headed {
		if rec.Accept, rest, ok = strings.Cut(rest, "\n"); !ok {
			return nil, errors.New("idempotency: redis claim: malformed stored response")
		}
		for {
			var line string
			if line, rest, ok = strings.Cut(rest, "\n"); !ok {
				return nil, errors.New("idempotency: redis claim: malformed stored headers")
			}
			if line == "" {
				break
			}
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				return nil, errors.New("idempotency: redis claim: malformed stored header")
			}
			rec.Header = append(rec.Header, name, value)
		}
	}
	rec.Body = []byte(rest)
	return rec, nil
}

// end runs the finish script: to state "d" with the response rec, or
// "u" or "free" (rec nil).
func (s *Redis) end(ctx context.Context, c Claim, state string, rec *Record) error {
	if c.Outcome != Claimed || c.id == "" || len(c.keys) == 0 {
		return ErrNotClaimed
	}
	f := finishCalls.Get().(*finishCall)
	f.rec.b = f.rec.b[:0]
	grow := 0
	if rec != nil {
		f.rec.b = appendRecord(f.rec.b, rec)
		// The first identifier's value grows from in flight to done.
		grow = allocated(1+fpLen+len(f.rec.b)+8) - allocated(inFlightLen+8)
	}
	// The call's deadline, without a context of its own: its round trip
	// makes one, for all the runs it carries (finishTrip).
	f.ctx, f.deadline, f.keys = ctx, time.Now().Add(s.o.Timeout), c.keys
	if d, ok := ctx.Deadline(); ok && d.Before(f.deadline) {
		f.deadline = d
	}
	f.id, f.state, f.slot, f.charge, f.grow = c.id, state, c.slot, c.charge, int64(grow)
	ttl := s.retentionArg // of the answer kept, or of the unknown outcome
	if state == "free" {
		ttl = s.fenceTTLArg // of a fence the claim carried (finishScript)
	}
	f.argv = [...]any{&f.id, &f.state, ttl, &f.rec, &f.slot, &f.charge, &f.grow}
	n, err := s.runFinish(f)
	f.release()
	if err != nil {
		s.failed(ctx, err)
		return storeError(state, err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	return nil
}

// Complete implements Store. A completion whose run failed is retried in
// the background (settleLater).
func (s *Redis) Complete(ctx context.Context, c Claim, rec Record) error {
	if !s.o.keepable(&rec) {
		return s.end(ctx, c, "u", nil)
	}
	err := s.end(ctx, c, "d", &rec)
	s.settleLater(ctx, c, "d", &rec, err)
	return err
}

// Release implements Store. A release whose run failed is retried in the
// background (settleLater).
func (s *Redis) Release(ctx context.Context, c Claim) error {
	err := s.end(ctx, c, "free", nil)
	s.settleLater(ctx, c, "free", nil, err)
	return err
}

// MarkUnknown implements Store.
func (s *Redis) MarkUnknown(ctx context.Context, c Claim) error {
	return s.end(ctx, c, "u", nil)
}
