package ratelimit

import (
	"context"
	"errors"
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
// A key holds its TAT as float seconds since redisEpoch (keyPrefix), with
// an expiry at the instant the key is back to a full burst.
//
// ARGV: the number of requests, then for each request its cost (negated
// for a refund: give back the cost in every check), number of checks,
// guard key index (0 for none) and number of claim keys (0 for none);
// for a guard its member, max and window in milliseconds; then for each
// check its key index, emission interval in seconds (0: a limit the
// request can never pass), burst, and flags (1 shadow, plus 2 × the
// branch: 0 always, 1 if admitted, 2 if refused, plus 8 for an
// allowance); then for a claim its key indexes, its number of arguments
// and the arguments. Key indexes point into KEYS.
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
// 2 refused, 3 never passes) and, unless 0, the remaining count in
// millionths (rounded to the nearest), and in microseconds (rounded up)
// the retry delay and the time until the key is back to a full burst;
// then with a claim the length of the claim's reply (0: not run) and the
// reply, or {'error', message} for a claim that failed.
const decideSrc = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local tats, charge, answer, dirty, changed, nd = {}, {}, {}, {}, {}, 0
local function set(k, tat)
  tats[k] = tat
  if not dirty[k] then
    dirty[k] = true
    nd = nd + 1
    changed[nd] = k
  end
end
local out, n, a = {}, 0, 2
for _ = 1, tonumber(ARGV[1]) do
  local cost, nchecks, guard, nclaim = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  local head, branch = n + 1, 1
  out[head] = cost > 0 and 1 or 0
  n = head
  if guard > 0 then
    local key, member = KEYS[guard], ARGV[a]
    if redis.call("SISMEMBER", key, member) == 0 then
      local size = redis.call("SCARD", key)
      if size < tonumber(ARGV[a + 1]) then
        redis.call("SADD", key, member)
        if size == 0 then
          redis.call("PEXPIRE", key, ARGV[a + 2])
        end
      else
        branch = 2
      end
    end
    out[n + 1], out[n + 2] = branch, redis.call("PTTL", key)
    n = n + 2
    a = a + 3
  end
  local nc, na = 0, 0
  for _ = 1, nchecks do
    local k, e, burst, flags = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    a = a + 4
    local when, allowance = math.floor(flags / 2) % 4, flags >= 8
    local tat = tats[k]
    if tat == nil then
      tat = tonumber(redis.call("GET", KEYS[k])) or 0
      tats[k] = tat
    end
    if cost < 0 then
      if allowance and e > 0 then
        set(k, math.max(tat, now) - cost * e)
      elseif tat > now and not allowance then
        set(k, tat + cost * e)
      end
      out[n + 1] = 0
      n = n + 1
    elseif when ~= 0 and when ~= branch then
      out[n + 1] = 0
      n = n + 1
    elseif e <= 0 then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 3, 0, 0, 0
      n = n + 4
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
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, 0, math.ceil(-diff * 1000000), math.ceil((tat - now) * 1000000)
        if flags % 2 == 0 then
          out[head] = 0
        end
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, math.floor(diff / e * 1000000 + 0.5), 0, math.ceil((new_tat - now) * 1000000)
        if allowance then
          answer[na + 1], answer[na + 2] = k, new_tat
          na = na + 2
        else
          charge[nc + 1], charge[nc + 2] = k, new_tat
          nc = nc + 2
        end
      end
      n = n + 4
    end
  end
  local pass, answered = out[head] == 1, false
  if nclaim > 0 then
    local ck, ca = {}, {}
    for i = 1, nclaim do
      ck[i] = KEYS[tonumber(ARGV[a])]
      a = a + 1
    end
    local na = tonumber(ARGV[a])
    for i = 1, na do
      ca[i] = ARGV[a + i]
    end
    a = a + na + 1
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
    for i = 1, nc, 2 do
      set(charge[i], charge[i + 1])
    end
  elseif answered then
    for i = 1, na, 2 do
      set(answer[i], answer[i + 1])
    end
  end
end
for i = 1, nd do
  local k = changed[i]
  local left = tats[k] - now
  if left > 0 then
    -- At least a second: an interval below the TAT's float precision
    -- leaves it at now.
    redis.call("SET", KEYS[k], tats[k], "EX", math.max(math.ceil(left), 1))
  else
    redis.call("DEL", KEYS[k])
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
const flagAllowance = 8

// Request modes of decideSrc.
const (
	modeDecide = 1
	modeRefund = 2
)

// runBuilder assembles one run of decideSrc: its keys (each once) and
// arguments. It is reused between runs.
type runBuilder struct {
	d      *decision
	keys   []any
	index  map[string]int // key → its 1-based index in keys
	args   []any
	n      int              // requests
	limits map[Limit][2]any // a limit's emission interval and burst as arguments, boxed once
}

// maxLimitArgs bounds runBuilder.limits: limits come from configuration,
// a few per route and tier.
const maxLimitArgs = 1024

// limitArgs returns l's emission interval in seconds and burst, as
// arguments of decideSrc.
func (b *runBuilder) limitArgs(l Limit) [2]any {
	if la, ok := b.limits[l]; ok {
		return la
	}
	if b.limits == nil || len(b.limits) >= maxLimitArgs {
		b.limits = make(map[Limit][2]any)
	}
	la := [2]any{l.Period.Seconds() / float64(l.Rate), l.Burst}
	b.limits[l] = la
	return la
}

func (b *runBuilder) reset() {
	b.keys, b.args, b.n = b.keys[:0], b.args[:0], 0
	if b.index == nil {
		b.index = make(map[string]int)
	}
	clear(b.index)
}

// key returns the index in KEYS of the Redis key full, adding it.
func (b *runBuilder) key(full string) int {
	if i, ok := b.index[full]; ok {
		return i
	}
	b.keys = append(b.keys, full)
	b.index[full] = len(b.keys)
	return len(b.keys)
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
		g = b.key(q.Guard.Key) // a set of the caller's naming, not a TAT: no keyPrefix
	}
	cost := q.cost()
	if mode == modeRefund {
		cost = -cost
	}
	nclaim := 0
	if claim {
		nclaim = len(q.Claim.Keys)
	}
	b.args = append(b.args, cost, n, g, nclaim)
	if g > 0 {
		b.args = append(b.args, q.Guard.Member, q.Guard.Max, q.Guard.Window.Milliseconds())
	}
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		c := &q.Checks[i]
		flags := 2 * int(c.Branch)
		if known {
			flags = 2 * int(Always)
		}
		if c.Shadow {
			flags++
		}
		if c.Allowance {
			flags += flagAllowance
		}
		b.args = append(b.args, b.key(keyPrefix+c.Key))
		if c.Limit.valid(q.cost()) {
			la := b.limitArgs(c.Limit)
			b.args = append(b.args, la[0], la[1], flags)
		} else {
			b.args = append(b.args, 0, 0, flags) // an emission interval of 0: never passes
		}
	}
	if claim {
		for _, k := range q.Claim.Keys {
			b.args = append(b.args, b.key(k)) // the claim's own names: no keyPrefix
		}
		b.args = append(b.args, len(q.Claim.Args))
		b.args = append(b.args, q.Claim.Args...)
	}
	return n
}

// cmd returns the run as one command: EVALSHA, or EVAL when eval is set
// (after NOSCRIPT).
func (b *runBuilder) cmd(ctx context.Context, eval bool) *redis.Cmd {
	args := make([]any, 0, 3+len(b.keys)+1+len(b.args))
	if eval {
		args = append(args, "eval", b.d.src)
	} else {
		args = append(args, "evalsha", b.d.script.Hash())
	}
	args = append(args, len(b.keys))
	args = append(args, b.keys...)
	args = append(args, b.n)
	args = append(args, b.args...)
	cmd := redis.NewCmd(ctx, args...)
	if len(b.keys) > 0 {
		cmd.SetFirstKeyPos(3) // routes the run to its slot's node in a Cluster
	}
	return cmd
}

// Fields of decideSrc's reply.
const (
	replyGuard = 2 // a guard's answer and TTL
	replyCheck = 4 // a check's that applied
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
	if r.pos < len(r.v) && r.v[r.pos] == 0 {
		r.pos++
		return CheckResult{}, nil
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
			ResetAfter: time.Duration(c[3]) * time.Microsecond,
		}}, nil
	case 2:
		return CheckResult{Applied: true, Result: Result{
			RetryAfter: time.Duration(c[2]) * time.Microsecond,
			ResetAfter: time.Duration(c[3]) * time.Microsecond,
		}}, nil
	default:
		return CheckResult{Applied: true, Result: never()}, nil
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
