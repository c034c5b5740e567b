package ratelimit

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// decideSrc decides, in one run, a sequence of requests (Request), each
// all or nothing, on one reading of Redis's clock. Requests are decided in
// order, so several requests on one key in a run are decided as they
// would be one after the other; every key read is read once and every key
// changed is written once, at the end.
//
// A key holds its TAT as float seconds since redisEpoch (keyPrefix), as
// redis_rate's script keeps it, with an expiry at the instant the key is
// back to a full burst.
//
// ARGV: the number of requests, then for each request its mode (1 decide,
// 2 refund: give back cost in every check), cost, number of checks and
// guard key index (0 for none); for a guard its member, max and window in
// milliseconds; then for each check its key index, burst, rate, period in
// seconds, shadow (0/1) and branch (0 always, 1 if admitted, 2 if
// refused). Key indexes point into KEYS.
//
// A request without a guard is decided as admitted. The reply is a flat
// list of integers: for each request the guard's answer (1 admitted, 2
// refused), the guard set's TTL in
// milliseconds (-1 without a guard), whether the request passed (1/0);
// then for each check applied (1/0), allowed (1/0), the remaining count
// in millionths (rounded to the nearest), and in microseconds (rounded
// up) the retry delay (-1: never) and the time until the key is back to a
// full burst.
const decideSrc = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local tats, dirty = {}, {}
local function tat_of(k)
  local v = tats[k]
  if v == nil then
    v = tonumber(redis.call("GET", KEYS[k])) or 0
    tats[k] = v
  end
  return v
end
local out, a = {}, 2
for _ = 1, tonumber(ARGV[1]) do
  local mode, cost, nchecks, guard = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  local branch, ttl = 1, -1
  if guard > 0 then
    local key, member = KEYS[guard], ARGV[a]
    branch = 1
    if redis.call("SISMEMBER", key, member) == 0 then
      local n = redis.call("SCARD", key)
      if n < tonumber(ARGV[a + 1]) then
        redis.call("SADD", key, member)
        if n == 0 then
          redis.call("PEXPIRE", key, ARGV[a + 2])
        end
      else
        branch = 2
      end
    end
    ttl = redis.call("PTTL", key)
    a = a + 3
  end
  local head = #out
  out[head + 1], out[head + 2], out[head + 3] = branch, ttl, mode == 1 and 1 or 0
  local charge = {}
  for _ = 1, nchecks do
    local k, burst, rate, period = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local shadow, when = ARGV[a + 4] == "1", tonumber(ARGV[a + 5])
    a = a + 6
    local o = #out
    if mode == 2 then
      local tat = tat_of(k)
      if tat > now then
        tats[k] = tat - cost * period / rate
        dirty[k] = true
      end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, 0, 0, 0, 0
    elseif when ~= 0 and when ~= branch then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, 0, 0, 0, 0
    elseif rate <= 0 or period <= 0 or burst <= 0 or cost > burst then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 1, 0, 0, -1, 0
      if not shadow then
        out[head + 3] = 0
      end
    else
      local e = period / rate
      local burst_offset = e * burst
      local tat = math.max(tat_of(k), now)
      local new_tat = tat + cost * e
      local diff = now - (new_tat - burst_offset)
      if diff < 0 then
        out[o + 1], out[o + 2], out[o + 3] = 1, 0, 0
        out[o + 4], out[o + 5] = math.ceil(-diff * 1000000), math.ceil((tat - now) * 1000000)
        if not shadow then
          out[head + 3] = 0
        end
      else
        out[o + 1], out[o + 2], out[o + 3] = 1, 1, math.floor(diff / e * 1000000 + 0.5)
        out[o + 4], out[o + 5] = 0, math.ceil((new_tat - now) * 1000000)
        charge[#charge + 1] = k
        charge[#charge + 1] = new_tat
      end
    end
  end
  if mode == 1 and out[head + 3] == 1 then
    for i = 1, #charge, 2 do
      tats[charge[i]] = charge[i + 1]
      dirty[charge[i]] = true
    end
  end
end
for k in pairs(dirty) do
  local left = tats[k] - now
  if left > 0 then
    redis.call("SET", KEYS[k], tats[k], "EX", math.ceil(left))
  else
    redis.call("DEL", KEYS[k])
  end
end
return out
`

var decideScript = redis.NewScript(decideSrc)

// Request modes of decideSrc.
const (
	modeDecide = 1
	modeRefund = 2
)

// Fields of decideSrc's reply.
const (
	replyHead  = 3 // per request
	replyCheck = 5 // per check
)

// runBuilder assembles one run of decideSrc: its keys (each once) and
// arguments. It is reused between runs.
type runBuilder struct {
	keys  []any
	index map[string]int // key → its 1-based index in keys
	args  []any
	n     int // requests
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
// in idx (all of them when idx is nil), with q's guard when guard is set.
// With known, the guard was answered before and idx lists the checks that
// apply: they are sent as applying always. It returns how many checks it
// sent.
func (b *runBuilder) add(q *Request, mode int, idx []int, guard, known bool) int {
	b.n++
	n := len(idx)
	if idx == nil {
		n = len(q.Checks)
	}
	g := 0
	if guard && q.Guard.Key != "" {
		g = b.key(q.Guard.Key) // a set of the caller's naming, not a TAT: no keyPrefix
	}
	b.args = append(b.args, mode, q.cost(), n, g)
	if g > 0 {
		b.args = append(b.args, q.Guard.Member, q.Guard.Max, q.Guard.Window.Milliseconds())
	}
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		c := &q.Checks[i]
		shadow := 0
		if c.Shadow {
			shadow = 1
		}
		branch := int(c.Branch)
		if known {
			branch = int(Always)
		}
		b.args = append(b.args, b.key(keyPrefix+c.Key), c.Limit.Burst, c.Limit.Rate, c.Limit.Period.Seconds(), shadow, branch)
	}
	return n
}

// cmd returns the run as one command: EVALSHA, or EVAL when eval is set
// (after NOSCRIPT).
func (b *runBuilder) cmd(ctx context.Context, eval bool) *redis.Cmd {
	args := make([]any, 0, 3+len(b.keys)+1+len(b.args))
	if eval {
		args = append(args, "eval", decideSrc)
	} else {
		args = append(args, "evalsha", decideScript.Hash())
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

// replyReader walks a decideSrc reply.
type replyReader struct {
	v   []int64
	pos int
}

var errReply = errors.New("ratelimit: unexpected reply from the decision script")

// head reads a request's head: the guard's answer and TTL, and whether
// it passed.
func (r *replyReader) head() (branch int64, ttl time.Duration, allowed bool, err error) {
	if r.pos+replyHead > len(r.v) {
		return 0, 0, false, errReply
	}
	h := r.v[r.pos : r.pos+replyHead]
	r.pos += replyHead
	return h[0], time.Duration(max(h[1], 0)) * time.Millisecond, h[2] == 1, nil
}

// check reads one check's result.
func (r *replyReader) check() (CheckResult, error) {
	if r.pos+replyCheck > len(r.v) {
		return CheckResult{}, errReply
	}
	c := r.v[r.pos : r.pos+replyCheck]
	r.pos += replyCheck
	if c[0] == 0 {
		return CheckResult{}, nil
	}
	if c[3] < 0 {
		return CheckResult{Applied: true, Result: never()}, nil
	}
	res := Result{Allowed: c[1] == 1, ResetAfter: time.Duration(c[4]) * time.Microsecond}
	if res.Allowed {
		// Millionths, rounded by the script: floor of the whole count,
		// free of the float noise of the division.
		res.Remaining = int64(math.Max(math.Floor(float64(c[2])/1e6), 0))
	} else {
		res.RetryAfter = time.Duration(c[3]) * time.Microsecond
	}
	return CheckResult{Applied: true, Result: res}, nil
}

// isNoScript reports a NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
