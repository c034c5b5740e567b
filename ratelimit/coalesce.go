package ratelimit

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coalescing: when one round trip would carry several decisions for the
// same key under the same limit (a busy client: many concurrent requests
// with one token, or from one address), the batcher runs them as one
// script that decides them in order and answers each caller as redis_rate
// would have, instead of running redis_rate's script once per request.
// The arithmetic is redis_rate's allowN applied k times at one instant,
// on the same key and value format, so the two scripts share keys freely:
// request j (1-based) passes when now - (TAT + j·T - Burst·T) >= 0, and
// the first k' = min(k, fits) pass. Redis does the work of one decision
// instead of k.

// coalesceSrc decides, for each of its keys in turn, k requests under
// that key's limit (ARGV holds burst, rate, period and k for each key), on
// one reading of Redis's clock. For each key it returns four integers, in
// the order of KEYS: the number allowed, the remaining count after the
// last one allowed in millionths (rounded to the nearest), and in
// microseconds (rounded up) the retry delay of the first one refused and
// the time until the key is back to a full burst — integers rather than
// redis_rate's float strings, so no tostring in the script and no float
// parsing here. One run serves a group of calls for one key (coalescing)
// or, outside a Cluster, every key of a round trip (one script run per
// round trip instead of one per key).
const coalesceSrc = `
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = (i - 1) * 4
  local burst = tonumber(ARGV[a + 1])
  local rate = tonumber(ARGV[a + 2])
  local period = tonumber(ARGV[a + 3])
  local k = tonumber(ARGV[a + 4])
  local e = period / rate
  local burst_offset = e * burst
  local tat = tonumber(redis.call("GET", key)) or now
  if tat < now then
    tat = now
  end
  local fits = math.floor((now - tat + burst_offset) / e)
  local allowed = math.max(math.min(k, fits), 0)
  local new_tat = tat + allowed * e
  if allowed > 0 then
    local reset_after = new_tat - now
    if reset_after > 0 then
      redis.call("SET", key, new_tat, "EX", math.ceil(reset_after))
    end
  end
  local remaining = (now - (new_tat - burst_offset)) / e
  local retry_after = (new_tat + e - burst_offset) - now
  local n = #out
  out[n + 1] = allowed
  out[n + 2] = math.floor(remaining * 1000000 + 0.5)
  out[n + 3] = math.ceil(retry_after * 1000000)
  out[n + 4] = math.ceil((new_tat - now) * 1000000)
end
return out
`

var coalesceScript = redis.NewScript(coalesceSrc)

// rateCall is what a redis_rate allowN call asks: the arguments of its
// EVALSHA ("evalsha", sha, 1, key, burst, rate, period, cost).
type rateCall struct {
	key    string
	burst  int
	rate   int
	period float64
}

// parseRateCall recognises a single-request redis_rate call.
func parseRateCall(cmd *redis.Cmd) (rateCall, bool) {
	a := cmd.Args()
	if len(a) != 8 {
		return rateCall{}, false
	}
	name, _ := a[0].(string)
	nkeys, _ := a[2].(int)
	key, _ := a[3].(string)
	burst, ok1 := a[4].(int)
	rate, ok2 := a[5].(int)
	period, ok3 := a[6].(float64)
	cost, ok4 := a[7].(int)
	if name != "evalsha" || nkeys != 1 || !ok1 || !ok2 || !ok3 || !ok4 || cost != 1 || rate <= 0 {
		return rateCall{}, false
	}
	return rateCall{key: key, burst: burst, rate: rate, period: period}, true
}

// group is the calls of one batch that share a key and a limit.
type group struct {
	rc       rateCall
	calls    []*call
	lease    *lease // the key's lease state, when it may get one
	extra    int    // requests asked for beyond the calls', to lease
	scripted bool   // decided by a coalescing script run, not by redis_rate's own call
}

// groupBatch sorts a batch into groups, keeping each group's calls in
// arrival order. gs and index are reused between batches.
func groupBatch(batch []*call, gs []group, index map[rateCall]int) []group {
	gs = gs[:0]
	clear(index)
	for _, c := range batch {
		rc, ok := parseRateCall(c.cmd)
		if !ok {
			gs = append(gs, group{calls: []*call{c}})
			continue
		}
		if i, seen := index[rc]; seen {
			gs[i].calls = append(gs[i].calls, c)
			continue
		}
		index[rc] = len(gs)
		gs = append(gs, group{rc: rc, calls: []*call{c}})
	}
	return gs
}

// coalescedCmd returns the command deciding the calls of gs at once: one
// script run for all their keys. With eval it sends the script itself
// (after NOSCRIPT).
func coalescedCmd(ctx context.Context, gs []*group, eval bool) *redis.Cmd {
	args := make([]any, 3, 3+5*len(gs)) // a key and four arguments per group
	args[0], args[1], args[2] = "evalsha", coalesceScript.Hash(), len(gs)
	if eval {
		args[0], args[1] = "eval", coalesceSrc
	}
	for _, g := range gs {
		args = append(args, g.rc.key)
	}
	for _, g := range gs {
		args = append(args, g.rc.burst, g.rc.rate, g.rc.period, len(g.calls)+g.extra)
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// answerCoalesced fans the reply of cmd, sent for gs, out to their calls.
func answerCoalesced(cmd *redis.Cmd, gs []*group, now int64) {
	v, err := cmd.Slice()
	if err == nil && len(v) != 4*len(gs) {
		err = errors.New("ratelimit: unexpected coalesced reply")
	}
	for i, g := range gs {
		if err != nil {
			g.answer(nil, err, now)
			continue
		}
		g.answer(v[4*i:4*i+4], nil, now)
	}
}

// answer fans g's part v of a coalesced reply (or its error) out to the
// calls, each in the format redis_rate's allowN returns: {allowed,
// remaining, retry after, reset after}, durations as strings of seconds
// and -1 for "no retry". Requests granted beyond the calls' go to the
// key's lease.
func (g *group) answer(v []any, err error, now int64) {
	if err != nil {
		for _, c := range g.calls {
			c.cmd.SetErr(err)
		}
		return
	}
	millionths := func(x any) float64 {
		n, _ := x.(int64)
		return float64(n) / 1e6
	}
	allowed, _ := v[0].(int64)
	remaining, retry, reset := millionths(v[1]), millionths(v[2]), millionths(v[3])
	e := g.rc.period / float64(g.rc.rate)
	if g.lease != nil {
		granted := allowed - int64(len(g.calls))
		g.lease.settle(max(granted, 0), int64(math.Max(math.Floor(remaining), 0)), time.Duration(reset*float64(time.Second)), now)
		if granted > 0 {
			// The calls' own answers: as if only they had been decided,
			// the leased requests counting as still remaining.
			allowed = int64(len(g.calls))
			remaining += float64(granted)
			reset -= float64(granted) * e
		}
	}
	for j, c := range g.calls {
		if int64(j) < allowed {
			ahead := float64(allowed - 1 - int64(j)) // allowed after this one
			c.cmd.SetVal([]any{int64(1), int64(math.Max(math.Floor(remaining), 0)) + int64(ahead), "-1",
				strconv.FormatFloat(reset-ahead*e, 'f', -1, 64)})
			continue
		}
		c.cmd.SetVal([]any{int64(0), int64(0), strconv.FormatFloat(retry, 'f', -1, 64), strconv.FormatFloat(reset, 'f', -1, 64)})
	}
}

// isNoScript reports a NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
