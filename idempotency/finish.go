package idempotency

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/clusterslot"
)

// Finishing claims in shared round trips. Every claimed order ends with a
// finish (Complete, Release or MarkUnknown) once its backend has
// answered, and its answer waits for that finish. The finishes of
// concurrent orders share round trips, as the limits' decisions do: a
// finish that finds fewer than finishInFlight round trips of finishes
// under way is sent at once, alone, as a run of the finish script; any
// other is queued, and as soon as a round trip in flight ends, the first
// finish queued sends the queue (up to finishMaxBatch finishes) in one
// round trip. Under load a round trip carries many finishes; an order
// alone waits for none.
//
// The finishes a round trip carries go as one script run
// (finishAllScript), one in each hash slot of a Cluster (an account's
// keys share a hash tag, so its finishes share a slot), so Redis pays a
// script run's own cost once a round trip, not once an order.
//
// Nothing of what a run guarantees changes: each caller still waits for
// its own run's reply, so an order's answer is written only once its
// response is recorded, before any replay can read it; a run that fails,
// or is not sent because its deadline passed in the queue, reports its
// error and leaves the claim in flight, which retries see as InProgress
// and then Unknown, never as free. Each finish of a script run is the one
// finish function (finishFunc) with its own keys and arguments, its
// arguments checked before it writes, its failure its own (the others'
// writes stand, as two runs' would).

// finishInFlight is how many round trips of finish runs a store has under
// way at once: one, as the limits' (ratelimit.RedisOptions.MaxInFlight),
// so that the runs that come while it is under way share the next;
// finishMaxBatch bounds the runs one round trip carries.
const (
	finishInFlight = 1
	finishMaxBatch = 64
)

// finishAllScript runs the finishes of a round trip in one script run:
// for each, ARGV holds how many keys it has, then its seven arguments
// (finishScript's), and KEYS its keys, in the same order. It answers one
// reply a finish: finish's, or an error of that finish alone. A batch
// whose layout does not add up is refused whole before anything is
// written.
const finishAllScript = finishFunc + `
local bad = redis.error_reply('idempotency: malformed finish batch')
if #ARGV % 8 ~= 0 then return bad end
local k = 0
for i = 1, #ARGV, 8 do
  local nk = tonumber(ARGV[i])
  if not nk or nk < 3 or nk % 1 ~= 0 then return bad end
  k = k + nk
end
if k ~= #KEYS then return bad end
local out = {}
k = 0
for i = 1, #ARGV, 8 do
  local nk, st = tonumber(ARGV[i]), ARGV[i + 2]
  if (st ~= 'd' and st ~= 'u' and st ~= 'free') or not tonumber(ARGV[i + 3]) or not tonumber(ARGV[i + 5])
      or not tonumber(ARGV[i + 6]) or not tonumber(ARGV[i + 7]) then
    out[#out + 1] = redis.error_reply('idempotency: malformed finish')
  else
    local ok, r = pcall(finish, {unpack(KEYS, k + 1, k + nk)}, {unpack(ARGV, i + 1, i + 7)})
    if ok then
      out[#out + 1] = r
    else
      out[#out + 1] = redis.error_reply(type(r) == 'table' and r.err or tostring(r))
    end
  end
  k = k + nk
end
return out
`

// finishLane queues the finish runs waiting for a round trip.
type finishLane struct {
	mu      sync.Mutex
	sending int           // round trips under way (or about to be)
	queue   []*finishCall // runs waiting for the next
}

// finishCall is one finish, its arguments and its reply, pooled: go-redis
// writes each *string or *int64 argument as the value it points at, where
// each value boxed in an interface took an allocation.
type finishCall struct {
	ctx                context.Context // the caller's: not sent once it has ended
	deadline           time.Time       // the caller's, or Options.Timeout from the call
	keys               []string
	id, state          string
	rec                recordArg
	slot, charge, grow int64
	argv               [7]any

	n    int64
	err  error
	lead bool          // woken to send the queue, not answered
	done chan struct{} // answered (or woken to lead); buffered
	// batch is the runs this call sends when it leads, reused.
	batch []*finishCall
}

var finishCalls = sync.Pool{New: func() any { return &finishCall{done: make(chan struct{}, 1)} }}

// release returns f to its pool, keeping its buffer of a usual response.
func (f *finishCall) release() {
	f.ctx, f.keys, f.id, f.err, f.argv = nil, nil, "", nil, [7]any{}
	if cap(f.rec.b) > 4<<10 {
		f.rec.b = nil
	}
	finishCalls.Put(f)
}

// recordArg is the finish script's response argument (ARGV[4]), encoded
// into a buffer its pooled call keeps, which go-redis writes through
// MarshalBinary: one allocation less per response recorded than a string.
type recordArg struct{ b []byte }

// MarshalBinary returns the encoded response.
func (a *recordArg) MarshalBinary() ([]byte, error) { return a.b, nil }

// runFinish runs the finish script for c, in a round trip shared with the
// runs of other orders when the client pipelines (any go-redis client
// does), and returns its reply.
func (s *Redis) runFinish(c *finishCall) (int64, error) {
	p, ok := s.c.(pipeliner)
	if !ok {
		ctx, cancel := context.WithDeadline(c.ctx, c.deadline)
		defer cancel()
		s.finishRuns.Add(1)
		return s.finish.Run(ctx, s.c, c.keys, c.argv[:]...).Int64()
	}
	l := &s.finishes
	l.mu.Lock()
	if l.sending < finishInFlight {
		l.sending++
		l.mu.Unlock()
		s.sendFinishes(p, c)
	} else {
		l.queue = append(l.queue, c)
		l.mu.Unlock()
		<-c.done
		if c.lead {
			c.lead = false
			s.sendFinishes(p, c)
		}
	}
	return c.n, c.err
}

// sendFinishes sends first's batch in one round trip (first alone when it
// was sent as it came, else the runs queued with it), then hands the runs
// queued meanwhile on to the first of them, which sends them, or gives up
// its place in flight. The caller holds one of the places in flight: the
// queue holds runs only while every place is taken.
func (s *Redis) sendFinishes(p pipeliner, first *finishCall) {
	batch := first.batch
	if len(batch) == 0 {
		batch = append(batch, first)
	}
	s.finishTrip(p, batch)

	l := &s.finishes
	l.mu.Lock()
	if len(l.queue) > 0 {
		next := l.queue[0]
		n := min(len(l.queue), finishMaxBatch)
		next.batch = append(next.batch[:0], l.queue[:n]...)
		rest := copy(l.queue, l.queue[n:])
		clear(l.queue[rest:])
		l.queue = l.queue[:rest]
		next.lead = true
		next.done <- struct{}{}
	} else {
		l.sending--
	}
	l.mu.Unlock()
	for _, c := range batch[1:] {
		c.done <- struct{}{}
	}
	clear(batch)
	first.batch = batch[:0]
}

// finishTrip sends the runs of batch whose caller's context is still
// live in one round trip, ended by the earliest of their deadlines (one
// context for them all), and sets each run's reply. A run whose context
// ended, or whose deadline passed, while it was queued is not sent.
func (s *Redis) finishTrip(p pipeliner, batch []*finishCall) {
	now := time.Now()
	var deadline time.Time
	live := 0
	for _, c := range batch {
		c.err = c.ctx.Err()
		if c.err == nil && !c.deadline.After(now) {
			c.err = context.DeadlineExceeded
		}
		if c.err != nil {
			continue
		}
		live++
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	if live == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if live == 1 { // alone: no pipeline to build
		for _, c := range batch {
			if c.err == nil {
				s.finishRuns.Add(1)
				c.n, c.err = s.finish.Run(ctx, s.c, c.keys, c.argv[:]...).Int64()
			}
		}
		return
	}
	groups := s.finishGroups(batch)
	s.finishRuns.Add(uint64(len(groups)))
	pl := p.Pipeline()
	for _, g := range groups {
		g.cmd = g.send(ctx, pl, s, (*redis.Script).EvalSha)
	}
	_, _ = pl.Exec(ctx)
	again := false
	for _, g := range groups {
		again = again || isNoScript(g.cmd.Err())
	}
	if again { // Redis lost its scripts (a restart, a failover): send the script itself
		pl = p.Pipeline()
		for _, g := range groups {
			if isNoScript(g.cmd.Err()) {
				g.cmd = g.send(ctx, pl, s, (*redis.Script).Eval)
			}
		}
		_, _ = pl.Exec(ctx)
	}
	for _, g := range groups {
		g.answer()
	}
}

// finishGroup is the runs of a round trip that go in one script run:
// every live run of the trip outside a Cluster, those of one hash slot in
// a Cluster.
type finishGroup struct {
	slot uint16 // the hash slot of the runs' keys (Cluster)
	runs []*finishCall
	cmd  *redis.Cmd
}

// finishGroups returns batch's live runs by script run.
func (s *Redis) finishGroups(batch []*finishCall) []*finishGroup {
	var groups []*finishGroup
	for _, c := range batch {
		if c.err != nil {
			continue
		}
		var slot uint16
		if s.cluster {
			slot = clusterslot.Of(c.keys[0]) // an account's keys share a hash tag
		}
		i := slices.IndexFunc(groups, func(g *finishGroup) bool { return g.slot == slot })
		if i < 0 {
			groups, i = append(groups, &finishGroup{slot: slot}), len(groups)
		}
		groups[i].runs = append(groups[i].runs, c)
	}
	return groups
}

// send queues g's script run on pl through run (EvalSha, or Eval): the
// finish script of its one run, else finishAllScript of them all.
func (g *finishGroup) send(ctx context.Context, pl redis.Pipeliner, s *Redis,
	run func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd) *redis.Cmd {
	if len(g.runs) == 1 {
		c := g.runs[0]
		return run(s.finish, ctx, pl, c.keys, c.argv[:]...)
	}
	var keys []string
	args := make([]any, 0, 8*len(g.runs))
	for _, c := range g.runs {
		keys = append(keys, c.keys...)
		args = append(append(args, len(c.keys)), c.argv[:]...)
	}
	return run(s.finishAll, ctx, pl, keys, args...)
}

// answer sets each run's reply from g's script run.
func (g *finishGroup) answer() {
	if len(g.runs) == 1 {
		g.runs[0].n, g.runs[0].err = g.cmd.Int64()
		return
	}
	replies, err := g.cmd.Slice()
	if err == nil && len(replies) != len(g.runs) {
		err = fmt.Errorf("idempotency: %d replies to %d finishes", len(replies), len(g.runs))
	}
	for i, c := range g.runs {
		if err != nil {
			c.err = err
			continue
		}
		c.n, c.err = finishReply(replies[i])
	}
}

// finishReply reads one finish's reply in finishAllScript's answer.
func finishReply(r any) (int64, error) {
	switch v := r.(type) {
	case int64:
		return v, nil
	case error:
		return 0, v
	}
	return 0, fmt.Errorf("idempotency: finish reply %T", r)
}

// isNoScript reports a run Redis did not know the script of. (go-redis's
// HasErrorPrefix allocates, even for no error.)
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
