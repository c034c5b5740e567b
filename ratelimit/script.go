package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// decideSrc decides, in one run, a sequence of requests (Request), each
// all or nothing, on one reading of Redis's clock. Requests are decided in
// order, so several requests on one key in a run are decided as they
// would be one after the other; every key is read once and every key
// changed is written once, at the end.
//
// A key holds its TAT as decimal seconds since redisEpoch (keyPrefix),
// rounded up to seven decimals, with an expiry at the instant the key is
// back to a full burst.
//
// KEYS are the keys holding TATs, read at once with MGET (cheaper for
// Redis than a GET each), then the guards' and claims' keys. The run's
// numbers come packed in ARGV[1] (little-endian, read with the struct
// library Redis's Lua has: Lua's tonumber goes through strtod, which cost
// Redis more than the rest of a decision but its key's GET and SET), its
// strings (a guard's member, a claim's arguments) as ARGV[2] on, in the
// order they are used. ARGV[1] holds the number of requests, of limits
// and of TAT keys (int32 each); each limit's emission interval in
// seconds and burst (doubles); then for each request its cost (a double,
// negated for a refund: give back the cost in every check), number of
// checks, guard key index (0 for none) and number of claim keys (0 for
// none) (int32s), and its first check (zeros when it has none: read with
// the request's numbers, in one struct.unpack); for a guard its max and
// window in milliseconds (doubles), its member the next string; then its
// other checks. A check is its TAT key's index and limit index (int32s;
// limit 0: a limit the request can never pass) and flags (a byte: 1
// shadow, plus 2 × the branch: 0 always, 1 if admitted, 2 if refused,
// plus 8 for an allowance). Then for
// a claim its key indexes and its number of arguments (int32s), the
// arguments the next strings. A guard's and a claim's key indexes count
// from the first key after the TAT keys.
//
// A request without a guard is decided as admitted. A request's claim
// (ClaimPart) calls the claim function claim(KEYS, ARGV) the script is
// built with right after the request's checks, and only when the request
// passed; an error it raises is caught and answered as that claim's, so
// the run's other requests are decided all the same. The request is
// charged only when its claim took what it claims (a reply starting
// with ClaimTaken): a claim refused, or failed, charges nothing but the
// request's allowance checks (Check.Allowance), which are decided with
// the others and charged only then. A refund (negative cost) gives back
// every check's cost but an allowance's, which it charges. The reply is a flat
// list: for each request whether it passed (1/0), and with a guard the
// guard's answer (1 admitted, 2 refused) and the guard set's TTL in
// milliseconds; then for each check its state (0 not applied, 1 allowed,
// 2 refused, 3 never passes) and, when 1, the remaining count in
// millionths (rounded to the nearest) or, when 2, the retry delay in
// microseconds (rounded up), then, when 1 or 2, the time until the key is
// back to a full burst in microseconds (rounded up);
// then with a claim the length of the claim's reply (0: not run) and the
// reply, or {'error', message} for a claim that failed.
const decideSrc = `
-- Locals, not globals, for what every decision calls: a global is two
-- table lookups.
local ceil, max, min = math.ceil, math.max, math.min
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local nums, decode = ARGV[1], struct.unpack
local nreq, nlim, nt, p = decode("<i4i4i4", nums)
local le, lb = {}, {}
for i = 1, nlim do
  le[i], lb[i], p = decode("<dd", nums, p)
end
local s = 2
-- Every TAT at once: one MGET costs Redis less than a GET per key. A run
-- of up to 1,000 keys (the usual) reads its reply as it came; a larger
-- one, 1,000 keys at a time, copied into one table.
local stored = {}
if nt <= 1000 then
  if nt > 0 then
    stored = redis.call("MGET", unpack(KEYS, 1, nt))
  end
else
  for i = 1, nt, 1000 do
    local last = min(i + 999, nt)
    local part = redis.call("MGET", unpack(KEYS, i, last))
    for j = i, last do
      stored[j] = part[j - i + 1]
    end
  end
end
local tats, charge, answer, dirty, changed, nd = {}, {}, {}, {}, {}, 0
local function set(k, tat)
  tats[k] = tat
  if not dirty[k] then
    dirty[k] = true
    nd = nd + 1
    changed[nd] = k
  end
end
local out, n = {}, 0
for _ = 1, nreq do
  -- A request's numbers and its first check's, in one unpack.
  local cost, nchecks, guard, nclaim, k1, li1, flags1
  cost, nchecks, guard, nclaim, k1, li1, flags1, p = decode("<di4i4i4i4i4B", nums, p)
  local head, branch = n + 1, 1
  out[head] = cost > 0 and 1 or 0
  n = head
  if guard > 0 then
    local key, member, gmax, window = KEYS[nt + guard], ARGV[s]
    gmax, window, p = decode("<dd", nums, p)
    s = s + 1
    if redis.call("SISMEMBER", key, member) == 0 then
      local size = redis.call("SCARD", key)
      if size < gmax then
        redis.call("SADD", key, member)
        if size == 0 then
          redis.call("PEXPIRE", key, window)
        end
      else
        branch = 2
      end
    end
    out[n + 1], out[n + 2] = branch, redis.call("PTTL", key)
    n = n + 2
  end
  local nc, na = 0, 0
  for ci = 1, nchecks do
    local k, li, flags = k1, li1, flags1
    if ci > 1 then
      k, li, flags, p = decode("<i4i4B", nums, p)
    end
    local e, burst = 0, 0
    if li > 0 then
      e, burst = le[li], lb[li]
    end
    local when, allowance = (flags - flags % 2) / 2 % 4, flags >= 8
    local tat = tats[k]
    if tat == nil then
      -- A key Redis does not hold is false in MGET's reply: no call.
      local v = stored[k]
      tat = v and tonumber(v) or 0
      tats[k] = tat
    end
    if cost < 0 then
      if allowance and e > 0 then
        set(k, max(tat, now) - cost * e)
      elseif tat > now and not allowance then
        set(k, tat + cost * e)
      end
      out[n + 1] = 0
      n = n + 1
    elseif when ~= 0 and when ~= branch then
      out[n + 1] = 0
      n = n + 1
    elseif e <= 0 then
      out[n + 1] = 3
      n = n + 1
      if flags % 2 == 0 then
        out[head] = 0
      end
    else
      if tat < now then
        tat = now
      end
      local new_tat = tat + cost * e
      local diff = now - (new_tat - e * burst)
      if diff < 0 then
        out[n + 1], out[n + 2], out[n + 3] = 2, ceil(-diff * 1000000), ceil((tat - now) * 1000000)
        if flags % 2 == 0 then
          out[head] = 0
        end
      else
        -- The remaining count rounded by Redis, which truncates a
        -- number in the reply (positive here: the floor); the reset
        -- rounded up without a call (x % 1 is x's fraction, exactly).
        local reset = (new_tat - now) * 1000000
        local r = reset % 1
        if r > 0 then
          reset = reset - r + 1
        end
        out[n + 1], out[n + 2], out[n + 3] = 1, diff / e * 1000000 + 0.5, reset
        if allowance then
          answer[na + 1], answer[na + 2] = k, new_tat
          na = na + 2
        else
          charge[nc + 1], charge[nc + 2] = k, new_tat
          nc = nc + 2
        end
      end
      n = n + 3
    end
  end
  local pass, answered = out[head] == 1, false
  if nclaim > 0 then
    local ck, ca = {}, {}
    local ki, na
    for i = 1, nclaim do
      ki, p = decode("<i4", nums, p)
      ck[i] = KEYS[nt + ki]
    end
    na, p = decode("<i4", nums, p)
    for i = 1, na do
      ca[i] = ARGV[s + i - 1]
    end
    s = s + na
    if pass then
      local ok, r = pcall(claim, ck, ca)
      if not ok then
        r = {"error", type(r) == "table" and r.err or tostring(r)}
      elseif r.err then
        r = {"error", r.err}
      end
      out[n + 1] = #r
      for i = 1, #r do
        out[n + 1 + i] = r[i]
      end
      n = n + 1 + #r
      pass = r[1] == "claimed"
      answered = not pass
    else
      out[n + 1] = 0
      n = n + 1
    end
  end
  if pass then
    -- set, inline: the call every decision that passes would make.
    for i = 1, nc, 2 do
      local k = charge[i]
      tats[k] = charge[i + 1]
      if not dirty[k] then
        dirty[k] = true
        nd = nd + 1
        changed[nd] = k
      end
    end
  elseif answered then
    for i = 1, na, 2 do
      set(answer[i], answer[i + 1])
    end
  end
end
-- What SET is given is a string: Redis formats a number argument with
-- snprintf("%.17g"), which cost it more than the GET of a key. A TAT is
-- written in decimal seconds with seven decimals, rounded up (never
-- earlier than the TAT), from two integers, which format cheaply; a
-- replica of an earlier version reads it with tonumber as it reads its
-- own.
local format, call, keys = string.format, redis.call, KEYS
for i = 1, nd do
  local k = changed[i]
  local tat = tats[k]
  local left = tat - now
  if left > 0 then
    -- At least a second: an interval below the TAT's float precision
    -- leaves it at now.
    local ex = "1"
    if left > 1 then
      ex = format("%d", ceil(left))
    end
    -- The floor and ceiling by x % 1, x's fraction (exact): no call.
    local sec = tat - tat % 1
    local frac = (tat - sec) * 10000000
    local r = frac % 1
    if r > 0 then
      frac = frac - r + 1
    end
    if frac >= 10000000 then
      sec, frac = sec + 1, frac - 10000000
    end
    -- SETEX, not SET with EX: one argument fewer to convert and parse.
    call("SETEX", keys[k], ex, format("%d.%07d", sec, frac))
  else
    call("DEL", keys[k])
  end
end
return out
`

// noClaimFunc is the claim function of a store built without one: the
// builder never sends a claim to it.
const noClaimFunc = `
local function claim()
  return redis.error_reply("ratelimit: no claim function")
end
`

// decision is a store's decision script: its claim function, then
// decideSrc.
type decision struct {
	src    string
	script *redis.Script
	claims bool // built with a claim function
}

// newDecision returns the decision script calling claimFunc (Lua source
// defining a function claim(KEYS, ARGV)), or one without claims when
// claimFunc is "".
func newDecision(claimFunc string) *decision {
	d := &decision{claims: claimFunc != ""}
	if !d.claims {
		claimFunc = noClaimFunc
	}
	d.src = claimFunc + decideSrc
	d.script = redis.NewScript(d.src)
	return d
}

// flagAllowance marks an allowance check in decideSrc's flags.
const flagAllowance byte = 8

// Request modes of decideSrc.
const (
	modeDecide = 1
	modeRefund = 2
)

// runBuilder assembles one run of decideSrc: its keys (each once), its
// numbers, packed (decideSrc's ARGV[1]), and its strings. It is reused
// between runs.
type runBuilder struct {
	d      *decision
	tats   keyList // the keys holding TATs (prefix keyPrefix): KEYS[1] to KEYS[#tats]
	others keyList // the guards' and claims' keys, of their callers' naming (no prefix), after them
	keys   []any   // KEYS as sent: tats, then others
	n      int     // requests
	reqs   []byte  // the requests' numbers
	strs   []any   // the strings, after the numbers
	nums   packed  // the numbers sent: the header, the limits, reqs
	lims   []Limit
	limits map[Limit]int // a limit → its 1-based index in lims
}

// packed is decideSrc's ARGV[1], as go-redis writes it
// (encoding.BinaryMarshaler).
type packed []byte

// MarshalBinary returns the bytes.
func (p *packed) MarshalBinary() ([]byte, error) { return *p, nil }

// keyList is a run's keys of one kind, each once, each prefix+key:
// written into one buffer and sent from it, so that a key costs no
// string of its own nor its boxing in KEYS.
type keyList struct {
	prefix string
	buf    []byte
	keys   []keyArg
	index  map[string]int // a key (without prefix) → its 1-based index in keys
}

// keyArg is one key of a keyList, as go-redis writes it
// (encoding.BinaryMarshaler).
type keyArg struct {
	l        *keyList
	from, to int // its bytes in l.buf
}

// MarshalBinary returns the key's bytes.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.l.buf[k.from:k.to], nil }

func (l *keyList) reset() {
	l.buf, l.keys = l.buf[:0], l.keys[:0]
	if l.index == nil {
		l.index = make(map[string]int)
	}
	clear(l.index)
}

// add returns the index of prefix+key in l, adding it.
func (l *keyList) add(key string) int {
	if i, ok := l.index[key]; ok {
		return i
	}
	from := len(l.buf)
	l.buf = append(append(l.buf, l.prefix...), key...)
	l.keys = append(l.keys, keyArg{l: l, from: from, to: len(l.buf)})
	l.index[key] = len(l.keys)
	return len(l.keys)
}

// appendTo appends l's keys to args, each as a pointer into l.keys
// (no allocation).
func (l *keyList) appendTo(args []any) []any {
	for i := range l.keys {
		args = append(args, &l.keys[i])
	}
	return args
}

func (b *runBuilder) reset() {
	b.tats.prefix = keyPrefix
	b.tats.reset()
	b.others.reset()
	b.keys, b.n, b.reqs, b.strs, b.lims = b.keys[:0], 0, b.reqs[:0], b.strs[:0], b.lims[:0]
	if b.limits == nil {
		b.limits = make(map[Limit]int)
	}
	clear(b.limits)
}

// firstKey returns a key of the run: in a Cluster, every key of a run
// is in one slot.
func (b *runBuilder) firstKey() string {
	l := &b.tats
	if len(l.keys) == 0 {
		l = &b.others
	}
	k := l.keys[0]
	return string(l.buf[k.from:k.to])
}

// limit returns the index of l among the run's limits, adding it.
func (b *runBuilder) limit(l Limit) int {
	if i, ok := b.limits[l]; ok {
		return i
	}
	b.lims = append(b.lims, l)
	b.limits[l] = len(b.lims)
	return len(b.lims)
}

// int32s and float64s append decideSrc's numbers to b's requests.
func (b *runBuilder) int32s(v ...int) {
	for _, x := range v {
		b.reqs = binary.LittleEndian.AppendUint32(b.reqs, uint32(int32(x)))
	}
}

func (b *runBuilder) float64s(v ...float64) {
	for _, x := range v {
		b.reqs = binary.LittleEndian.AppendUint64(b.reqs, math.Float64bits(x))
	}
}

// add appends a request of the given mode made of the checks of q listed
// in idx (all of them when idx is nil), with q's guard when guard is set
// and q's claim when claim is set. With known, the guard was answered
// before and idx lists the checks that apply: they are sent as applying
// always. It returns how many checks it sent.
func (b *runBuilder) add(q *Request, mode int, idx []int, guard, known, claim bool) int {
	b.n++
	n := len(idx)
	if idx == nil {
		n = len(q.Checks)
	}
	g := 0
	if guard && q.Guard.Key != "" {
		g = b.others.add(q.Guard.Key) // a set of the caller's naming, not a TAT
	}
	cost := q.cost()
	if mode == modeRefund {
		cost = -cost
	}
	nclaim := 0
	if claim {
		nclaim = len(q.Claim.Keys)
	}
	b.float64s(float64(cost))
	b.int32s(n, g, nclaim)
	at := func(j int) int { // the index in q.Checks of the j-th check sent
		if idx != nil {
			return idx[j]
		}
		return j
	}
	if n == 0 {
		b.int32s(0, 0)
		b.reqs = append(b.reqs, 0)
	} else {
		b.check(q, at(0), known)
	}
	if g > 0 {
		b.float64s(float64(q.Guard.Max), float64(q.Guard.Window.Milliseconds()))
		b.strs = append(b.strs, q.Guard.Member)
	}
	for j := 1; j < n; j++ {
		b.check(q, at(j), known)
	}
	if claim {
		for _, k := range q.Claim.Keys {
			b.int32s(b.others.add(k)) // the claim's own names
		}
		b.int32s(len(q.Claim.Args))
		b.strs = append(b.strs, q.Claim.Args...)
	}
	return n
}

// check appends q's i-th check to b's requests; with known, as applying
// always.
func (b *runBuilder) check(q *Request, i int, known bool) {
	c := &q.Checks[i]
	flags := 2 * byte(c.Branch)
	if known {
		flags = 2 * byte(Always)
	}
	if c.Shadow {
		flags++
	}
	if c.Allowance {
		flags += flagAllowance
	}
	li := 0 // a limit the request can never pass
	if c.Limit.valid(q.cost()) {
		li = b.limit(c.Limit)
	}
	b.int32s(b.tats.add(c.Key), li)
	b.reqs = append(b.reqs, flags)
}

// cmd returns the run as one command: EVALSHA, or EVAL when eval is set
// (after NOSCRIPT). A run carrying claims, whose reply holds strings, is
// read as a *redis.Cmd; any other, all integers, as a
// *redis.IntSliceCmd, which reads them without boxing each.
func (b *runBuilder) cmd(ctx context.Context, eval, claims bool) redis.Cmder {
	b.nums = binary.LittleEndian.AppendUint32(b.nums[:0], uint32(b.n))
	b.nums = binary.LittleEndian.AppendUint32(b.nums, uint32(len(b.lims)))
	b.nums = binary.LittleEndian.AppendUint32(b.nums, uint32(len(b.tats.keys)))
	for _, l := range b.lims {
		b.nums = binary.LittleEndian.AppendUint64(b.nums, math.Float64bits(l.Period.Seconds()/float64(l.Rate)))
		b.nums = binary.LittleEndian.AppendUint64(b.nums, math.Float64bits(float64(l.Burst)))
	}
	b.nums = append(b.nums, b.reqs...)
	b.keys = b.others.appendTo(b.tats.appendTo(b.keys[:0]))
	args := make([]any, 0, 3+len(b.keys)+1+len(b.strs))
	if eval {
		args = append(args, "eval", b.d.src)
	} else {
		args = append(args, "evalsha", b.d.script.Hash())
	}
	args = append(args, len(b.keys))
	args = append(args, b.keys...)
	args = append(args, &b.nums) // a pointer: boxed without allocating
	args = append(args, b.strs...)
	var cmd interface {
		redis.Cmder
		SetFirstKeyPos(int8)
	}
	if claims {
		cmd = redis.NewCmd(ctx, args...)
	} else {
		cmd = redis.NewIntSliceCmd(ctx, args...)
	}
	if len(b.keys) > 0 {
		cmd.SetFirstKeyPos(3) // routes the run to its slot's node in a Cluster
	}
	return cmd
}

// Fields of decideSrc's reply.
const (
	replyGuard = 2 // a guard's answer and TTL
	replyCheck = 3 // a check's that was allowed or refused
)

// replyReader walks a decideSrc reply.
type replyReader struct {
	v   []int64
	raw []any // the reply as it came, for a run carrying claims (whose replies hold strings); nil otherwise
	pos int
}

// readerOf returns the reader of a reply read whole (cmd.Slice), whose
// integers it copies into v.
func readerOf(raw []any) replyReader {
	v := make([]int64, len(raw))
	for i, x := range raw {
		if n, ok := x.(int64); ok {
			v[i] = n
		}
	}
	return replyReader{v: v, raw: raw}
}

var errReply = errors.New("ratelimit: unexpected reply from the decision script")

// head reads a request's head: whether it passed and, when its guard was
// sent, the guard's answer and TTL.
func (r *replyReader) head(guard bool) (allowed bool, branch int64, ttl time.Duration, err error) {
	n := 1
	if guard {
		n += replyGuard
	}
	if r.pos+n > len(r.v) {
		return false, 0, 0, errReply
	}
	h := r.v[r.pos : r.pos+n]
	r.pos += n
	if guard {
		branch, ttl = h[1], time.Duration(max(h[2], 0))*time.Millisecond
	}
	return h[0] == 1, branch, ttl, nil
}

// check reads one check's result.
func (r *replyReader) check() (CheckResult, error) {
	if r.pos < len(r.v) {
		switch r.v[r.pos] {
		case 0: // not applied
			r.pos++
			return CheckResult{}, nil
		case 3: // never passes
			r.pos++
			return CheckResult{Applied: true, Result: never()}, nil
		}
	}
	if r.pos+replyCheck > len(r.v) {
		return CheckResult{}, errReply
	}
	c := r.v[r.pos : r.pos+replyCheck]
	r.pos += replyCheck
	switch c[0] {
	case 1:
		// Millionths, rounded by the script: the floor of the whole
		// count, free of the float noise of the division.
		return CheckResult{Applied: true, Result: Result{
			Allowed:    true,
			Remaining:  max(c[1]/1e6, 0),
			ResetAfter: time.Duration(c[2]) * time.Microsecond,
		}}, nil
	case 2:
		return CheckResult{Applied: true, Result: Result{
			RetryAfter: time.Duration(c[1]) * time.Microsecond,
			ResetAfter: time.Duration(c[2]) * time.Microsecond,
		}}, nil
	default:
		return CheckResult{}, errReply
	}
}

// claim reads a claim's reply: run is false when the claim did not run
// (the request was refused).
func (r *replyReader) claim() (run bool, reply []any, err error) {
	if r.pos >= len(r.v) {
		return false, nil, errReply
	}
	k := int(r.v[r.pos])
	if k == 0 {
		r.pos++
		return false, nil, nil
	}
	if r.raw == nil || k < 0 || r.pos+1+k > len(r.v) {
		return false, nil, errReply
	}
	reply = r.raw[r.pos+1 : r.pos+1+k]
	r.pos += 1 + k
	return true, reply, nil
}

// isNoScript reports a NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
