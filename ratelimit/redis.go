package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyPrefix starts every key the Redis store keeps: keyPrefix + the
// caller's key holds that key's TAT, as decimal seconds since redisEpoch
// (go-redis/redis_rate's layout; written with seven decimals, where
// earlier versions wrote 17 significant digits). The layout is part of
// the stored state: replicas of different versions share these keys
// during a rolling upgrade, and each reads the value with Lua's tonumber,
// whatever the decimals; a new prefix, or a value tonumber cannot read,
// would reset every count.
const keyPrefix = "rate:"

// Client is what the Redis store needs of a go-redis client: scripts,
// pipelines and DEL. The standalone, Sentinel and Cluster clients
// (redis.UniversalClient) satisfy it.
type Client interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// RedisOptions configure a Redis store. The zero value is usable.
type RedisOptions struct {
	// Timeout is the deadline of every round trip to Redis. Zero means
	// 25ms.
	Timeout time.Duration
	// Backoff is how long calls fail fast with ErrStoreUnavailable after
	// a round trip failed, before Redis is tried again. Zero means 250ms.
	Backoff time.Duration
	// MaxBatch bounds how many requests share one pipelined round trip.
	// Zero means 256.
	MaxBatch int
	// MaxInFlight is how many round trips may be in flight at once (and
	// as many more for requests carrying a claim). Zero means 1: the
	// requests that arrive while a round trip is in flight share the next
	// one, which under a steady load of new keys halves the round trips,
	// and Redis's work per request, against two in flight.
	MaxInFlight int
	// Observe, when set, is called after every round trip with its
	// duration, the number of requests it carried and its error. A lease
	// renewal, which no caller waits for, is not counted in the number:
	// a round trip that carried only one reports 0.
	Observe func(d time.Duration, n int, err error)
	// Now is the clock used for the backoff. Nil means time.Now.
	Now func() time.Time
	// ClaimFunc, when set, is the Lua source of a function claim(KEYS,
	// ARGV) that requests with a ClaimPart run in their round trip
	// (claim.go): idempotency.ClaimFunc, when duplicate protection
	// shares the store's client. Without it, a ClaimPart is not sent.
	ClaimFunc string
}

// Redis is a Store backed by Redis: GCRA computed by one Lua script
// (decideSrc) on Redis's own clock, so replicas with skewed clocks agree.
// A caller that finds fewer than MaxInFlight round trips in flight sends
// its request itself, with whatever is queued; the callers that arrive
// meanwhile queue, and when the round trip ends the first of them is
// woken to send the queue in the next one. No goroutine of the store's
// own stands between a caller and Redis: an idle store costs a request
// one round trip and no hand-off. Outside a Cluster one script run
// decides every request of a round trip, in order; in a Cluster one run
// per hash slot, pipelined to each node at once. A request is all or
// nothing (Request) and waits for one round trip, with a deadline.
type Redis struct {
	client   Client
	d        *decision
	timeout  time.Duration
	backoff  time.Duration
	max      int
	inFlight int // MaxInFlight
	observe  func(time.Duration, int, error)
	now      func() time.Time

	leases    *leases
	renewals  sync.WaitGroup // lease renewals in flight (renew); Close waits for them
	cluster   bool           // the keys of one script run must share a hash slot
	downUntil atomic.Int64   // unix ns; calls before it fail fast
	calls     sync.Pool

	mu       sync.Mutex
	decide   lane       // requests without a claim, and refunds
	claims   *lane      // requests carrying a claim, in round trips of their own; nil: none are sent
	isClosed bool       // calls fail with errClosed
	renewing int        // lease renewals in flight, at most maxRenewals
	trips    []*trip    // free ones, for the round trips in flight
	idle     *sync.Cond // on mu: signalled when the last round trip ends after Close
}

// lane is a queue of calls and its round trips in flight.
type lane struct {
	queue   []*call // waiting for a round trip
	sending int     // round trips in flight, and callers woken to send one
}

// call is one queued request.
type call struct {
	q        *Request
	ans      *Answer
	err      error
	deadline time.Time     // the caller's: queued at most this long, in all
	done     chan struct{} // nil for a refund, which no one waits for

	refund  bool // gives back what the parts of a split request charged
	claim   bool // carries its request's claim
	lead    bool // woken to send its lane's queue, not answered
	renewal bool // a lease renewal: no caller waits for it (renew)

	// Within a round trip.
	guarded  bool   // the guard's answer is known (ans.Admitted)
	phase    bool   // only the guard was sent: the checks go in the next round trip
	parts    int    // entries the call was split into (Cluster)
	failed   bool   // a part failed or refused: the request did not pass
	charged  uint64 // the checks (by index) that parts which passed charged
	untaken  bool   // the claim ran and did not take what it claims: nothing is charged but the allowance
	answered uint64 // the allowance checks the claim's run charged, for a claim it did not take

	// Storage for Allow and AllowN.
	own       Request
	ownChecks [1]Check
	ownAns    Answer
	ownRes    [1]CheckResult
}

// NewRedis returns a Redis store on client.
func NewRedis(client Client, o RedisOptions) *Redis {
	r := &Redis{
		client:   client,
		d:        newDecision(o.ClaimFunc),
		timeout:  o.Timeout,
		backoff:  o.Backoff,
		max:      o.MaxBatch,
		observe:  o.Observe,
		now:      o.Now,
		inFlight: o.MaxInFlight,
		leases:   newLeases(),
	}
	_, r.cluster = client.(*redis.ClusterClient)
	if r.timeout <= 0 {
		r.timeout = 25 * time.Millisecond
	}
	if r.backoff <= 0 {
		r.backoff = 250 * time.Millisecond
	}
	if r.max <= 0 {
		r.max = 256
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.inFlight <= 0 {
		r.inFlight = 1
	}
	if r.d.claims {
		r.claims = &lane{}
	}
	r.idle = sync.NewCond(&r.mu)
	r.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	return r
}

// Allow implements Store.
func (r *Redis) Allow(ctx context.Context, key string, l Limit) (Result, error) {
	return r.AllowN(ctx, key, l, 1)
}

// AllowN decides a request of cost n; a cost above the burst never
// passes, and Redis is not asked.
func (r *Redis) AllowN(ctx context.Context, key string, l Limit, n int64) (Result, error) {
	if !l.valid(n) {
		return never(), nil
	}
	res, err := r.allowOne(ctx, Check{Key: key, Limit: l}, n, false)
	if err != nil {
		return Result{}, err
	}
	return res.Result, nil
}

// allowOne decides one check of cost n in a pooled call's own storage;
// renewal marks a lease renewal, which no caller waits for (renew).
func (r *Redis) allowOne(ctx context.Context, check Check, n int64, renewal bool) (CheckResult, error) {
	c := r.calls.Get().(*call)
	c.ownChecks[0] = check
	c.own = Request{Checks: c.ownChecks[:], Cost: n}
	c.ownAns.Results = c.ownRes[:0]
	c.renewal = renewal
	err := r.allowAll(ctx, c, &c.own, &c.ownAns)
	res := c.ownAns.Results[0]
	c.own, c.ownChecks[0], c.renewal = Request{}, Check{}, false
	r.calls.Put(c)
	return res, err
}

// AllowAll implements Store: q waits for one round trip, shared with
// the other requests queued meanwhile.
func (r *Redis) AllowAll(ctx context.Context, q *Request, ans *Answer) error {
	if q.CacheOnly {
		return ErrNotCached
	}
	c := r.calls.Get().(*call)
	err := r.allowAll(ctx, c, q, ans)
	r.calls.Put(c)
	return err
}

func (r *Redis) allowAll(ctx context.Context, c *call, q *Request, ans *Answer) error {
	ans.reset(len(q.Checks))
	now := r.now().UnixNano()
	if now < r.downUntil.Load() {
		return ErrStoreUnavailable
	}
	// A request carrying a claim goes to Redis with it, lease or not:
	// one round trip decides both.
	claim := q.Claim != nil && r.claims != nil
	if lk, ok := leasable(q); ok && !claim {
		if res, ok, l, size := r.leases.take(lk, now); ok {
			ans.Results[0] = CheckResult{Applied: true, Result: res}
			if l != nil {
				r.renew(lk, l, size)
			}
			return nil
		}
	}
	c.q, c.ans, c.err, c.claim = q, ans, nil, claim
	c.guarded, c.phase, c.parts, c.failed, c.charged = false, false, 0, false, 0
	if claim {
		r.submit(ctx, c, r.claims, max(r.timeout, q.Claim.Timeout))
	} else {
		r.submit(ctx, c, &r.decide, r.timeout)
	}
	err := c.err
	c.q, c.ans, c.err, c.claim = nil, nil, nil, false
	if err != nil {
		err = fmt.Errorf("ratelimit: redis: %w", err)
		// In a Cluster the claim's run may have been answered while a
		// run on another node failed: it keeps its reply, which the
		// caller needs to go on with the claim or to free it.
		if ans.Claim.Sent && !ans.Claim.Run && ans.Claim.Err == nil {
			ans.Claim.Err = err
		}
		return err
	}
	return nil
}

// maxRenewals bounds the lease renewals in flight at once, over every
// key; a lease that finds them all taken runs out and is renewed as
// before renewals ahead of need, by the round trip of the request that
// finds it empty.
const maxRenewals = 64

// renew asks Redis, in a goroutine no caller waits for, for size more
// requests of k to add to lease l, which take marked renewing. It is the
// same decision as any other, of cost size (all or nothing: counted in
// Redis when granted), in the decide lane: it shares round trips, has
// the store's Timeout as its deadline, and a failed round trip puts
// the store in its backoff like any other, since the requests after it
// would find Redis failed as well. Close waits for it.
func (r *Redis) renew(k leaseKey, l *lease, size int64) {
	r.mu.Lock()
	if r.isClosed || r.renewing >= maxRenewals {
		r.mu.Unlock()
		l.renewed(0, 0, 0, false, 0)
		return
	}
	r.renewing++
	r.renewals.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.renewals.Done()
		res, err := r.allowOne(context.Background(), Check{Key: k.key, Limit: k.limit}, size, true)
		var granted int64
		if err == nil && res.Result.Allowed {
			granted = size
		}
		l.renewed(granted, res.Result.Remaining, res.Result.ResetAfter, err == nil && res.Applied, r.now().UnixNano())
		r.mu.Lock()
		r.renewing--
		r.mu.Unlock()
	}()
}

// Refund implements Store: q's checks go, as a refund (decideSrc's
// mode 2, which moves each key's TAT back by the cost and deletes a key
// back at a full burst), into the next round trip, and Refund waits for
// it so that the caller's next request finds nothing charged. Leased
// requests are given back in Redis too: the lease's tokens were counted
// there when they were taken.
func (r *Redis) Refund(ctx context.Context, q *Request) error {
	if len(q.Checks) == 0 {
		return nil
	}
	if r.now().UnixNano() < r.downUntil.Load() {
		return ErrStoreUnavailable
	}
	c := r.calls.Get().(*call)
	c.own = Request{Checks: q.Checks, Cost: q.Cost} // no guard: nothing to admit
	c.ownAns.Results = c.ownRes[:0]
	c.ownAns.reset(len(q.Checks))
	c.q, c.ans, c.err, c.refund = &c.own, &c.ownAns, nil, true
	c.guarded, c.phase, c.parts, c.failed, c.charged, c.untaken, c.answered = false, false, 0, false, 0, false, 0
	r.submit(ctx, c, &r.decide, r.timeout)
	err := c.err
	c.q, c.ans, c.err, c.refund, c.own = nil, nil, nil, false, Request{}
	r.calls.Put(c)
	if err != nil {
		return fmt.Errorf("ratelimit: redis refund: %w", err)
	}
	return nil
}

// leasable reports whether q may be answered from, or grouped for, a
// hot key's lease: one request of cost 1 on one limit, without a guard.
func leasable(q *Request) (leaseKey, bool) {
	if len(q.Checks) != 1 || q.Guard.Key != "" || q.cost() != 1 || q.Checks[0].Shadow || q.Checks[0].Branch != Always {
		return leaseKey{}, false
	}
	return leaseKey{key: q.Checks[0].Key, limit: q.Checks[0].Limit}, true
}

// Close fails the calls still queued and waits for the round trips in
// flight. Calls after Close fail. It does not close the client.
func (r *Redis) Close() error {
	r.mu.Lock()
	r.isClosed = true
	for _, l := range [2]*lane{&r.decide, r.claims} {
		if l == nil {
			continue
		}
		for _, c := range l.queue {
			c.err = errClosed
			c.finish()
		}
		l.queue = nil
	}
	for r.decide.sending > 0 || (r.claims != nil && r.claims.sending > 0) {
		r.idle.Wait()
	}
	r.mu.Unlock()
	// A renewal started before Close is answered by now (errClosed when
	// it was queued, or its round trip's answer); wait for it to settle.
	r.renewals.Wait()
	return nil
}

// errClosed is returned by calls made after Close.
var errClosed = errors.New("ratelimit: redis limiter closed")

// submit sends c in a round trip of lane l, or queues it for the next
// one, and returns once c is answered; c waits at most timeout in all. A
// queued call waits for the round trip in flight and its own, each ended
// by its calls' deadlines.
func (r *Redis) submit(ctx context.Context, c *call, l *lane, timeout time.Duration) {
	if err := ctx.Err(); err != nil {
		c.err = err
		return
	}
	c.deadline = r.now().Add(timeout)
	r.mu.Lock()
	switch {
	case r.isClosed:
		r.mu.Unlock()
		c.err = errClosed
		return
	case l.sending < r.inFlight:
		l.sending++
		r.mu.Unlock()
		r.send(l, c)
	default:
		l.queue = append(l.queue, c)
		r.mu.Unlock()
		<-c.done
		if c.lead {
			c.lead = false
			r.send(l, c)
		}
	}
}

// finish wakes the caller of c, if any.
func (c *call) finish() {
	if c.done != nil {
		c.done <- struct{}{}
	}
}

// send sends first, with the calls queued on l, in round trips until
// every call it took is answered (a Cluster call whose guard was
// answered alone goes again, with the calls queued by then), and then
// hands l's queue on to the first call in it, or gives up its place in
// flight. The caller holds one of l's places in flight. It does not send
// the calls queued after its last round trip left: its own caller's
// answer would wait for their round trips, and under a steady load for
// as long as the load lasts.
func (r *Redis) send(l *lane, first *call) {
	r.mu.Lock()
	t := r.trip()
	t.batch = r.take(l, append(t.batch[:0], first))
	r.mu.Unlock()
	for {
		t.carry = r.roundTrip(t, t.batch, t.carry[:0])
		r.mu.Lock()
		if len(t.carry) == 0 {
			r.handOn(l, t)
			r.mu.Unlock()
			break
		}
		t.batch = r.take(l, append(t.batch[:0], t.carry...))
		r.mu.Unlock()
	}
	// first was answered by finish, into its own buffered channel.
	<-first.done
}

// take appends to batch the calls queued on l, up to MaxBatch, and
// removes them from the queue. r.mu is held.
func (r *Redis) take(l *lane, batch []*call) []*call {
	n := min(len(l.queue), r.max-len(batch))
	if n <= 0 {
		return batch
	}
	batch = append(batch, l.queue[:n]...)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	return batch
}

// trip returns a free trip for a round trip in flight. r.mu is held.
func (r *Redis) trip() *trip {
	if n := len(r.trips); n > 0 {
		t := r.trips[n-1]
		r.trips = r.trips[:n-1]
		return t
	}
	return newTrip(r.d, r.cluster)
}

// handOn ends a sender's turn on l: t is freed, and the first call queued
// on l, if any, is woken to send the queue in its place; otherwise the
// place in flight is given up. r.mu is held.
func (r *Redis) handOn(l *lane, t *trip) {
	clear(t.batch[:cap(t.batch)])
	clear(t.carry[:cap(t.carry)])
	r.trips = append(r.trips, t)
	if len(l.queue) > 0 {
		next := l.queue[0]
		n := copy(l.queue, l.queue[1:])
		l.queue[n] = nil
		l.queue = l.queue[:n]
		next.lead = true
		next.finish()
		return
	}
	l.sending--
	if l.sending == 0 && r.isClosed {
		r.idle.Broadcast()
	}
}

// roundTrip sends batch as one pipeline of script runs and answers every
// call in it that it finishes; it appends to carry the calls to send
// again. Each call's deadline runs from when it was queued: calls already
// past it fail without being sent, and the round trip ends by the
// earliest deadline of those sent, so that no decision waits more than
// RedisOptions.Timeout in all (a call carrying a claim: its
// ClaimPart.Timeout, when longer; such calls have round trips of their
// own).
func (r *Redis) roundTrip(t *trip, batch []*call, carry []*call) []*call {
	start := r.now()
	var deadline time.Time
	t.reset()
	sent := 0
	for _, c := range batch {
		if c.done != nil && !c.deadline.After(start) {
			c.err = context.DeadlineExceeded
			continue
		}
		if c.done != nil && (deadline.IsZero() || c.deadline.Before(deadline)) {
			deadline = c.deadline
		}
		t.plan(c)
		sent++
	}
	if deadline.IsZero() { // refunds of split requests only
		deadline = start.Add(r.timeout)
	}
	var err error
	if sent > 0 {
		t.lease(r.leases, start.UnixNano())
		// The deadline is on r.now's clock, which need not be the
		// runtime's (a replica's clock is only ever compared with
		// itself): the context gets the time left, not the instant.
		ctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(start))
		err = t.send(ctx, r.client)
		cancel()
		t.answer(r.leases, r.now().UnixNano())
	}
	if !isStoreFailure(err) {
		err = nil
	} else {
		r.downUntil.Store(r.now().Add(r.backoff).UnixNano())
		if c, ok := r.client.(*redis.ClusterClient); ok {
			// A master lost or failed over: go-redis reloads the slot map
			// on MOVED, not on a refused or silent node, and otherwise
			// only every few seconds. Reloading (in the background, at
			// most every 200ms) after each failed round trip sends the
			// next one, after the backoff, to the promoted replica.
			c.ReloadState(context.Background())
		}
	}
	for _, c := range batch {
		if c.again() {
			carry = append(carry, c)
			continue
		}
		if rf := c.settle(); rf != nil {
			t.refunds = append(t.refunds, rf)
		}
	}
	if len(t.refunds) > 0 {
		// Before the callers learn they were refused: their next
		// requests must find nothing charged.
		r.refund(t.refunds)
		clear(t.refunds)
		t.refunds = t.refunds[:0]
	}
	if r.observe != nil {
		n := len(batch)
		for _, c := range batch {
			if c.renewal {
				n--
			}
		}
		r.observe(r.now().Sub(start), n, err)
	}
	for _, c := range batch {
		if !c.again() {
			c.finish()
		}
	}
	return carry
}

// refund gives back, in one more round trip, what the parts of split
// requests charged when another part refused them. A failure leaves the
// charge in place: a refused request then counts, as it would have
// before requests were all or nothing.
func (r *Redis) refund(calls []*call) {
	t := newTrip(r.d, r.cluster)
	for _, c := range calls {
		t.plan(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	_ = t.send(ctx, r.client)
	cancel()
}

// isStoreFailure reports whether err means Redis could not be reached or
// did not answer in time (as opposed to a script error such as NOSCRIPT,
// which the round trip answers by sending the script).
func isStoreFailure(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// A reply from Redis: the store is up, unless the reply says the
		// command was not served. MOVED and ASK (a run sent to a node by
		// a stale slot map) are failures too, so that the slot map is
		// reloaded.
		return Unserved(rerr)
	}
	return true
}

// Unserved reports whether err is a Redis reply saying that a node did
// not serve the command, so that nothing ran: its slot moved (MOVED,
// ASK), the Cluster or the master is down (CLUSTERDOWN, MASTERDOWN), the
// node is loading its data (LOADING) or asks for a retry (TRYAGAIN). It
// is go-redis's reading of the reply (found in err however wrapped),
// shared by the rate-limit store and duplicate protection, whose claims ride in
// its runs.
func Unserved(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	_, moved := redis.IsMovedError(reply)
	_, ask := redis.IsAskError(reply)
	return moved || ask || redis.IsClusterDownError(reply) || redis.IsTryAgainError(reply) ||
		redis.IsLoadingError(reply) || redis.IsMasterDownError(reply)
}
