package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/clusterslot"
)

// trip is one round trip being planned and answered: its script runs
// (one outside a Cluster; in a Cluster one per hash slot, since the keys
// of one run must share a slot) and which call each request of a run
// answers. It is reused between round trips.
type trip struct {
	d       *decision
	cluster bool
	runs    []*run // runs[:used] are this round trip's
	used    int
	bySlot  map[uint16]*run
	groups  map[leaseKey]*leaseGroup
	pool    []*leaseGroup
	cmds    []redis.Cmder
	refunds []*call
	batch   []*call // the calls being sent (Redis.send)
	carry   []*call // the calls to send again

	// In a Cluster: what each master is sent (sendByNode), and the
	// batches free for the next round trip.
	nodes map[*redis.Client]*nodeBatch
	spare []*nodeBatch
}

// run is one script run.
type run struct {
	b       runBuilder
	entries []entry
	cmd     redis.Cmder // a *redis.Cmd with claims, else a *redis.IntSliceCmd (runBuilder.cmd)
	claims  bool        // an entry carries a claim: the reply holds strings

	// With claims that ask replicas to acknowledge them: the most
	// replicas asked for, how long WAIT blocks, and the WAIT sent after
	// the run on its connection, whose answer is the run's claims'.
	acks int
	wait time.Duration
	ack  *redis.IntCmd
}

// entry is one request of a run: a call's, or a lease's.
type entry struct {
	c     *call
	idx   []int // the checks sent; nil: all of the call's
	guard bool  // the call's guard was sent
	known bool  // the guard was answered before: idx lists the checks that apply
	claim bool  // the call's claim was sent
	lease *leaseGroup
}

// leaseGroup is the single-limit calls of a round trip on one key under
// one limit.
type leaseGroup struct {
	key   leaseKey
	n     int
	last  *call
	run   *run
	lease *lease
	extra int64
	req   Request
	check [1]Check
}

func newTrip(d *decision, cluster bool) *trip {
	return &trip{d: d, cluster: cluster, bySlot: map[uint16]*run{}, groups: map[leaseKey]*leaseGroup{}}
}

func (t *trip) reset() {
	for _, r := range t.runs[:t.used] {
		r.b.reset()
		clear(r.entries)
		r.entries = r.entries[:0]
		r.cmd, r.claims = nil, false
		r.acks, r.wait, r.ack = 0, 0, nil
	}
	t.used = 0
	clear(t.bySlot)
	for _, g := range t.groups {
		*g = leaseGroup{}
		t.pool = append(t.pool, g)
	}
	clear(t.groups)
}

// runFor returns the run of a slot (outside a Cluster: the one run).
func (t *trip) runFor(s uint16) *run {
	if r := t.bySlot[s]; r != nil {
		return r
	}
	if t.used == len(t.runs) {
		t.runs = append(t.runs, &run{})
	}
	r := t.runs[t.used]
	t.used++
	r.b.reset()
	r.b.d = t.d
	t.bySlot[s] = r
	return r
}

// plan puts c's request into the runs. In a Cluster a request whose keys
// span slots is split, one part per slot, each all or nothing on its own
// (answer joins them, and a request refused by one part gives back what
// the others charged); a guard whose answer decides checks in other
// slots is sent first, alone, and the checks in the next round trip.
//
// A request's claim goes into the run of its keys' slot (they share a
// hash tag): right after the request's part in that slot, run only when
// that part passes, as outside a Cluster; or, with no part there, as a
// part of its own that runs whatever the other parts decide. Either way
// it is in the same round trip as the request's checks (never with a
// guard sent alone), and a claim that ran for a request another part
// refused is the caller's to free (claim.go).
func (t *trip) plan(c *call) {
	c.parts, c.failed, c.charged, c.phase, c.untaken, c.answered = 0, false, 0, false, false, 0
	q := c.q
	if !t.cluster {
		t.add(t.runFor(0), entry{c: c, guard: q.Guard.Key != "", claim: c.claim})
		return
	}
	var cs uint16 // the claim's slot
	if c.claim {
		cs = clusterslot.Of(q.Claim.Keys[0])
	}
	if q.Guard.Key != "" && !c.guarded {
		gs := clusterslot.Of(q.Guard.Key)
		together := true
		for i := range q.Checks {
			if clusterslot.Of(keyPrefix+q.Checks[i].Key) != gs {
				together = false
				break
			}
		}
		if !together {
			c.phase = true
			t.add(t.runFor(gs), entry{c: c, idx: []int{}, guard: true})
			return
		}
		t.add(t.runFor(gs), entry{c: c, guard: true, claim: c.claim && cs == gs})
		if c.claim && cs != gs {
			t.add(t.runFor(cs), entry{c: c, idx: []int{}, claim: true})
		}
		return
	}
	// Every check that applies, by slot, in the order of the checks.
	var slots []uint16
	var parts [][]int
	for i := range q.Checks {
		if c.guarded && !Applies(q.Checks[i].Branch, c.ans.Admitted) {
			continue
		}
		s := clusterslot.Of(keyPrefix + q.Checks[i].Key)
		j := 0
		for j < len(slots) && slots[j] != s {
			j++
		}
		if j == len(slots) {
			slots = append(slots, s)
			parts = append(parts, nil)
		}
		parts[j] = append(parts[j], i)
	}
	claimed := false // the claim rides with a part
	for j, s := range slots {
		with := c.claim && s == cs
		claimed = claimed || with
		t.add(t.runFor(s), entry{c: c, idx: parts[j], known: c.guarded, claim: with})
	}
	if c.claim && !claimed {
		// No check in the claim's slot (or none applies: the request
		// passes): the claim is a part of its own.
		t.add(t.runFor(cs), entry{c: c, idx: []int{}, claim: true})
	}
}

func (t *trip) add(r *run, e entry) {
	if c := e.c; c != nil {
		c.parts++
		if c.refund {
			r.b.add(c.q, modeRefund, e.idx, false, e.known, false)
		} else {
			r.b.add(c.q, modeDecide, e.idx, e.guard, e.known, e.claim)
			if lk, ok := leasable(c.q); ok && !c.claim {
				t.group(lk, c, r)
			}
		}
		if e.claim {
			c.ans.Claim.Sent = true // planned into a round trip being sent
			r.claims = true
			if n := c.q.Claim.ReplicaAcks; n > 0 {
				r.acks = max(r.acks, n)
				r.wait = max(r.wait, c.q.Claim.WaitTimeout, time.Millisecond)
			}
		}
	}
	r.entries = append(r.entries, e)
}

// group counts a single-limit call of key k towards its lease group.
func (t *trip) group(k leaseKey, c *call, r *run) {
	g := t.groups[k]
	if g == nil {
		if n := len(t.pool); n > 0 {
			g, t.pool = t.pool[n-1], t.pool[:n-1]
		} else {
			g = &leaseGroup{}
		}
		g.key, g.run = k, r
		t.groups[k] = g
	}
	g.n++
	g.last = c
}

// lease asks, after every group of several calls on a hot key, for a
// lease of that key's requests to hand out in process (lease.go); and
// after a single call on a key leased recently, whose lease ran out.
func (t *trip) lease(ls *leases, now int64) {
	for _, g := range t.groups {
		if g.n < 2 && !ls.recent(g.key, now) {
			continue
		}
		g.lease = ls.get(g.key)
		if g.extra = g.lease.extra(g.key.limit.Burst, now); g.extra == 0 {
			continue
		}
		g.check[0] = Check{Key: g.key.key, Limit: g.key.limit}
		g.req = Request{Checks: g.check[:], Cost: g.extra}
		g.run.b.add(&g.req, modeDecide, nil, false, false, false)
		g.run.entries = append(g.run.entries, entry{lease: g})
	}
}

// send sends the runs, as one pipeline when there are several, and sends
// the script itself for a run Redis did not know it for (NOSCRIPT, after
// a restart; in a Cluster, to the run's master directly, as sendByNode
// sent the run). A run whose claims ask replicas to acknowledge them goes as
// EVAL (after NOSCRIPT a second run would wait for the replicas a second
// time), followed by WAIT on its connection. It returns the first error.
func (t *trip) send(ctx context.Context, client Client) error {
	acked := false
	for _, r := range t.runs[:t.used] {
		acked = acked || r.acks > 0
	}
	if acked && !t.cluster {
		return t.sendAcked(ctx, client)
	}
	t.cmds = t.cmds[:0]
	for _, r := range t.runs[:t.used] {
		r.cmd = r.b.cmd(ctx, r.acks > 0, r.claims)
		t.cmds = append(t.cmds, r.cmd)
	}
	cc, cluster := client.(*redis.ClusterClient)
	switch {
	case len(t.cmds) == 0:
		return nil
	case cluster:
		t.sendByNode(ctx, cc)
	case len(t.cmds) == 1:
		_ = client.Process(ctx, t.cmds[0])
	default:
		p := client.Pipeline()
		for _, c := range t.cmds {
			_ = p.Process(ctx, c)
		}
		_, _ = p.Exec(ctx)
	}
	var err error
	for _, r := range t.runs[:t.used] {
		if isNoScript(r.cmd.Err()) {
			r.cmd = r.b.cmd(ctx, true, r.claims)
			if cluster {
				// To the master directly, as the run went (sendByNode).
				if node, err := r.master(ctx, cc); err != nil {
					r.cmd.SetErr(err)
				} else {
					_ = node.Process(ctx, r.cmd)
				}
			} else {
				_ = client.Process(ctx, r.cmd)
			}
		}
		if e := r.cmd.Err(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// sendAcked sends the runs of a round trip whose claims ask replicas to
// acknowledge them, followed by WAIT, as one pipeline on one connection:
// WAIT counts the replicas that hold every write of that connection so
// far, the claims included. The runs go as EVAL: after NOSCRIPT a second
// run would wait for the replicas a second time.
func (t *trip) sendAcked(ctx context.Context, client Client) error {
	p := client.Pipeline()
	for _, r := range t.runs[:t.used] {
		r.cmd = r.b.cmd(ctx, true, r.claims)
		_ = p.Process(ctx, r.cmd)
	}
	_ = p.Process(ctx, waitFor(ctx, t.runs[:t.used]))
	_, _ = p.Exec(ctx)
	for _, r := range t.runs[:t.used] {
		if err := r.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// master returns the client of the Cluster master holding r's slot (its
// keys share one), by the Cluster client's slot map.
func (r *run) master(ctx context.Context, cc *redis.ClusterClient) (*redis.Client, error) {
	return cc.MasterForKey(ctx, r.b.firstKey())
}

// waitFor returns the WAIT that answers the replica acks of runs' claims
// (the most replicas any asks for, blocking the longest any allows), to
// send after them on their connection, and makes it each run's ack.
func waitFor(ctx context.Context, runs []*run) *redis.IntCmd {
	acks, wait := 0, time.Duration(0)
	for _, r := range runs {
		acks, wait = max(acks, r.acks), max(wait, r.wait)
	}
	ack := redis.NewIntCmd(ctx, "wait", acks, wait.Milliseconds())
	for _, r := range runs {
		r.ack = ack
	}
	return ack
}

// nodeBatch is what one master of a Cluster is sent in a round trip: the
// runs in its slots, and those of them whose claims ask replicas to
// acknowledge them, answered by one WAIT after them.
type nodeBatch struct {
	cmds []redis.Cmder
	runs []*run // the runs carrying such claims
}

// sendByNode sends the runs of a Cluster round trip as one pipeline per
// master, all at once, a single run included. go-redis's own Cluster
// pipeline would do the same, but when one node fails and the deadline
// passes during its retries it marks every command of the pipeline
// failed, answered or not: a run that was decided (and charged) would
// look failed and could not be given back. And a Cluster client built
// with go-redis's routing policies (its default) fetches COMMAND from
// random nodes on its first command under a 5s deadline of its own,
// whatever the round trip's: a node stopped then would hold a round trip
// (every one, while the fetch fails) far past its deadline. A
// run sent by a stale slot map is answered MOVED or ASK: a store
// failure, after which the slot map is reloaded. A node's pipeline is one connection (the node's own
// client's): runs whose claims ask replicas to acknowledge them are
// followed there by WAIT, which counts the replicas holding every write
// of that connection so far, the claims included.
func (t *trip) sendByNode(ctx context.Context, cc *redis.ClusterClient) {
	if t.nodes == nil {
		t.nodes = map[*redis.Client]*nodeBatch{}
	}
	nodes := t.nodes
	for _, r := range t.runs[:t.used] {
		node, err := r.master(ctx, cc)
		if err != nil {
			r.cmd.SetErr(err)
			continue
		}
		nb := nodes[node]
		if nb == nil {
			if n := len(t.spare); n > 0 {
				nb, t.spare = t.spare[n-1], t.spare[:n-1]
			} else {
				nb = &nodeBatch{}
			}
			nodes[node] = nb
		}
		nb.cmds = append(nb.cmds, r.cmd)
		if r.acks > 0 {
			nb.runs = append(nb.runs, r)
		}
	}
	for _, nb := range nodes {
		if len(nb.runs) > 0 {
			nb.cmds = append(nb.cmds, waitFor(ctx, nb.runs))
		}
	}
	var wg sync.WaitGroup
	for node, nb := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if len(nb.cmds) == 1 {
				_ = node.Process(ctx, nb.cmds[0])
				return
			}
			p := node.Pipeline()
			for _, c := range nb.cmds {
				_ = p.Process(ctx, c)
			}
			_, _ = p.Exec(ctx)
		}()
	}
	wg.Wait()
	for node, nb := range nodes {
		clear(nb.cmds)
		clear(nb.runs)
		*nb = nodeBatch{cmds: nb.cmds[:0], runs: nb.runs[:0]}
		t.spare = append(t.spare, nb)
		delete(nodes, node)
	}
}

// answer reads every run's reply into its calls' answers and settles the
// leases.
func (t *trip) answer(ls *leases, now int64) {
	for _, r := range t.runs[:t.used] {
		var rd replyReader
		var err error
		switch cmd := r.cmd.(type) {
		case *redis.Cmd:
			var raw []any
			raw, err = cmd.Slice()
			rd = readerOf(raw)
		case *redis.IntSliceCmd:
			rd.v, err = cmd.Result()
		}
		for _, e := range r.entries {
			if err == nil {
				err = t.read(&rd, r, e, now)
				if err == nil {
					continue
				}
			}
			if e.c != nil {
				e.c.failed = true
				if e.c.err == nil {
					e.c.err = err
				}
			}
		}
	}
	for _, g := range t.groups {
		// A group that asked for no lease still tells the lease what
		// Redis has left: the next round trip may ask.
		if g.lease != nil && g.extra == 0 && g.last.err == nil {
			if last := g.last.ans.Results[0]; last.Applied {
				g.lease.settle(0, last.Result.Remaining, last.Result.ResetAfter, now)
			}
		}
	}
}

// read reads e's part of run r's reply.
func (t *trip) read(rd *replyReader, r *run, e entry, now int64) error {
	allowed, branch, ttl, err := rd.head(e.guard)
	if err != nil {
		return err
	}
	if g := e.lease; g != nil {
		res, err := rd.check()
		if err != nil {
			return err
		}
		var granted int64
		if allowed {
			granted = g.extra
		} else if last := g.last.ans.Results[0]; last.Result.Allowed {
			res = last
		}
		g.lease.settle(granted, res.Result.Remaining, res.Result.ResetAfter, now)
		return nil
	}
	c := e.c
	if e.guard {
		c.ans.Admitted, c.ans.GuardTTL, c.guarded = branch != 2, ttl, true
	}
	n := len(e.idx)
	if e.idx == nil {
		n = len(c.q.Checks)
	}
	var charged, allowances uint64
	for j := 0; j < n; j++ {
		i := j
		if e.idx != nil {
			i = e.idx[j]
		}
		res, err := rd.check()
		if err != nil {
			return err
		}
		c.ans.Results[i] = res
		if allowed && res.Applied && res.Result.Allowed && i < 64 {
			if c.q.Checks[i].Allowance {
				allowances |= 1 << i
			} else {
				charged |= 1 << i
			}
		}
	}
	if e.claim {
		run, reply, err := rd.claim()
		if err != nil {
			return err
		}
		cl := &c.ans.Claim
		cl.Run = run
		if run && len(reply) == 2 && reply[0] == "error" {
			msg, _ := reply[1].(string)
			cl.Err = ClaimError(msg)
		} else {
			cl.Reply = reply
		}
		if r.ack != nil {
			cl.Acked, cl.AckErr = r.ack.Result()
		}
		if run && (len(reply) == 0 || reply[0] != ClaimTaken) {
			// The run charged nothing but the allowance checks it carried.
			c.untaken, charged = true, 0
			c.answered |= allowances
		}
	}
	if !c.phase {
		if allowed {
			c.charged |= charged
		} else {
			c.failed = true
		}
	}
	return nil
}

// again reports whether c goes into the next round trip: its guard was
// answered alone.
func (c *call) again() bool { return c.phase && c.err == nil }

// settle sets c's answer once its round trip is over, and returns the
// request that settles, in one more round trip, what the parts of a
// split request charged: for a request another part refused or failed,
// what the parts that passed charged is given back (an allowance
// charged by its claim's run too); for one whose claim was not taken,
// the parts that passed are given back and its allowance checks in the
// other parts charged. It returns nil when nothing is left to settle.
func (c *call) settle() *call {
	c.ans.Allowed = !c.failed && c.err == nil
	c.ans.Uncharged = c.ans.Allowed && c.untaken
	if (c.ans.Allowed && !c.untaken) || c.refund || c.parts < 2 {
		return nil
	}
	rf := &call{}
	for i := range c.q.Checks {
		if i >= 64 {
			break
		}
		ck := c.q.Checks[i]
		switch bit := uint64(1) << i; {
		case c.charged&bit != 0:
		case !ck.Allowance || !c.ans.Results[i].Applied:
			continue
		case !c.ans.Allowed && c.answered&bit != 0:
			ck.Allowance = false // a plain give-back
		case c.ans.Uncharged && c.answered&bit == 0:
			// Charged by the refund (Check.Allowance).
		default:
			continue
		}
		rf.own.Checks = append(rf.own.Checks, ck)
	}
	if len(rf.own.Checks) == 0 {
		return nil
	}
	rf.own.Cost = c.q.Cost
	rf.q, rf.ans, rf.refund = &rf.own, &rf.ownAns, true
	rf.ans.reset(len(rf.own.Checks))
	return rf
}
