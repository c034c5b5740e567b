package overload

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Controller. Zero fields take the defaults noted.
type Options struct {
	// Min is the floor of the adaptive limit and the limit while the
	// minimum round-trip time is measured. Default 4.
	Min int
	// Max is the ceiling of the adaptive limit. Default 1000.
	Max int
	// Initial is the limit before the first adjustment. Default 100,
	// within Min and Max.
	Initial int
	// Fixed, when positive, is the limit, and nothing adapts.
	Fixed int
	// Tolerance is how much slower than its unloaded latency the backend
	// may answer before the limit shrinks, as a factor. Default 1.25.
	Tolerance float64
	// Slack is the least the backend may be slower by: a backend that
	// answers in microseconds jitters by more than any factor of that.
	// Default 10ms.
	Slack time.Duration
	// Window is how often the limit is adjusted (a window closes at its
	// first sample at least Window after it opened, with at least
	// MinSamples samples). Default 100ms.
	Window time.Duration
	// MinSamples is the fewest samples a window needs. Default 10.
	MinSamples int
	// ProbeInterval is how often the minimum round-trip time is measured
	// again at half the limit, so that it follows a backend whose
	// unloaded latency changed. Default 30s.
	ProbeInterval time.Duration
	// MaxWait is, by class, the longest a request waits for a slot before
	// it is shed; 0 sheds it at once when the backend is full.
	MaxWait [NumClasses]time.Duration
	// Conns, when positive, is the most requests the backend instance
	// can be sent at once: its connections, when each carries one
	// request (upstream.max_conns_per_host over HTTP/1.1). The limit is
	// kept within it, the cancels' headroom included (connLimit): a slot
	// past the connections would wait for one in the connection pool's
	// queue, first come first served, where a cancel's headroom gives it
	// nothing.
	Conns int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnRoom, when set, is called after Release, outside the lock, when
	// the slots its grant left free have room for a cancel: a cancel
	// waiting at another instance of the same service may take it
	// (Elsewhere). It is called on most releases and must be cheap.
	OnRoom func()
}

func (o *Options) normalise() {
	if o.Min <= 0 {
		o.Min = 4
	}
	if o.Max <= 0 {
		o.Max = 1000
	}
	if o.Max < o.Min {
		o.Max = o.Min
	}
	if o.Initial <= 0 {
		o.Initial = 100
	}
	o.Initial = min(max(o.Initial, o.Min), o.Max)
	if o.Conns > 0 {
		c := connLimit(o.Conns)
		o.Max = min(o.Max, c)
		o.Min = min(o.Min, o.Max)
		o.Initial = min(o.Initial, o.Max)
		o.Fixed = min(o.Fixed, c)
	}
	if o.Tolerance < 1 {
		o.Tolerance = 1.25
	}
	if o.Slack <= 0 {
		o.Slack = 10 * time.Millisecond
	}
	if o.Window <= 0 {
		o.Window = 100 * time.Millisecond
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 10
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Controller is an adaptive concurrency limit with prioritised waiting. Its
// methods are safe for concurrent use. Acquire and Release take one short
// critical section each and do not allocate once waiters are pooled.
type Controller struct {
	now func() time.Time

	mu       sync.Mutex
	o        Options
	limit    int
	headroom int // the slots over the limit only cancels take
	inflight int
	waiting  int

	// The per-client shares (clients.go): the clients that hold slots
	// or wait, and the last to hold none (idle, kept for its next
	// request), each class's round robin of clients with waiters, the
	// zero Client's state, and spare states for reuse.
	clients map[Client]*client
	// out is set while the controller's backend instance is out of the
	// rotation (Evict, until Readmit): a request that would wait for one
	// of its slots is not queued, and is sent elsewhere by its caller.
	out   bool
	idle  *client
	turns [NumClasses]turns
	anon  client
	spare []*client

	// The controller's window: samples since it opened.
	winStart time.Time
	winSum   time.Duration
	winN     int
	winPeak  int // the most requests in flight during the window
	// started is whether the last window grew the limit by slow start or
	// ended a probe: the next window's samples are mostly of requests
	// sent under the old limit, so it may not grow it.
	started bool

	minRTT    time.Duration // 0 until measured
	probing   bool          // the limit is held at Min to measure minRTT
	probeFrom int           // the limit to return to after the probe
	probeSkip int           // samples of requests sent before the probe began
	nextProbe time.Time

	// shedP is, by class, the probability (of shedScale) with which Admit
	// sheds a request while the backend is full: raised when a request
	// of the class waited in vain, lowered when one got a slot; the
	// cancels' back to 0 when a cancel takes one at once while no cancel
	// waits (servedAtOnce).
	shedP [NumClasses]atomic.Uint32

	// Read without the lock by exporters and Admit.
	limitNow    atomic.Int64
	headroomNow atomic.Int64
	inflightNow atomic.Int64
	waitingNow  atomic.Int64
	minRTTNow   atomic.Int64

	pool sync.Pool // *waiter
}

// New returns a Controller with the options o.
func New(o Options) *Controller {
	l := &Controller{clients: make(map[Client]*client), spare: make([]*client, 0, 256)}
	l.pool.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &waiter{ready: make(chan struct{}, 1), timer: t}
	}
	l.Configure(o)
	return l
}

// Configure replaces the options. The limit is kept within the new floor
// and ceiling (or set to a new fixed limit); waiters keep the wait they
// started with. A limit that leaves room for a cancel once its waiters
// are served calls OnRoom, as Release does: a cancel waiting at another
// instance may take it.
func (l *Controller) Configure(o Options) {
	o.normalise()
	l.mu.Lock()
	first := l.now == nil
	l.o = o
	l.now = o.Now
	switch {
	case o.Fixed > 0:
		l.limit, l.probing = o.Fixed, false
	case first || l.limit == 0:
		// The unloaded latency is learnt from the windows (their lowest
		// average) until the first probe.
		l.limit = o.Initial
		l.winStart = l.now()
		l.nextProbe = l.winStart.Add(o.ProbeInterval)
	default:
		l.limit = min(max(l.limit, o.Min), o.Max)
		if l.probing {
			l.limit = o.Min
		}
	}
	l.publish()
	onRoom := l.granted()
	l.mu.Unlock()
	if onRoom != nil && !first {
		onRoom()
	}
}

// Limit returns the current limit.
func (l *Controller) Limit() int { return int(l.limitNow.Load()) }

// InFlight returns how many slots are taken.
func (l *Controller) InFlight() int { return int(l.inflightNow.Load()) }

// Waiting returns how many requests wait for a slot.
func (l *Controller) Waiting() int { return int(l.waitingNow.Load()) }

// Clients returns how many clients hold slots or wait for one. It takes
// the lock: it is for exporters, not for a request's path.
func (l *Controller) Clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.clients)
	if l.idle != nil {
		n--
	}
	return n
}

// MinRTT returns the backend's measured unloaded round-trip time, 0 before
// the first measurement.
func (l *Controller) MinRTT() time.Duration { return time.Duration(l.minRTTNow.Load()) }

// Acquire takes a slot for a request of class c of client who, waiting at
// most the class's wait (and never past ctx). A cancel may take a slot
// over the limit, within the cancels' headroom. A client takes a slot
// only within its share (Client); past it, it waits like a request that
// finds the backend full. It returns whether a slot was taken and how
// long the request waited. A taken slot must be given back with Release.
func (l *Controller) Acquire(ctx context.Context, c Class, who Client) (bool, time.Duration) {
	ok, _, waited := l.AcquireOr(ctx, c, who, nil)
	return ok, waited
}

// Elsewhere is where a request waiting for a slot of a Controller may
// take one instead: another instance of the same service, whose
// Controllers call its OnRoom.
type Elsewhere interface {
	// Watch returns a channel closed when a slot may have been freed
	// elsewhere (the next OnRoom after Watch).
	Watch() <-chan struct{}
	// Take takes a slot elsewhere if one is free to the request now,
	// reporting whether it did.
	Take() bool
}

// AcquireOr is Acquire for a request that may take a slot elsewhere,
// away (nil: Acquire), while it waits: at the start of its wait and
// each time away's Watch channel closes it tries away.Take, staying in
// the queue meanwhile, and the first slot it gets, here or elsewhere,
// ends its wait. moved reports that the slot is away's (none is held
// here; if one was granted here meanwhile, it is given back at once).
// It sheds nothing that it moved.
func (l *Controller) AcquireOr(ctx context.Context, c Class, who Client, away Elsewhere) (ok, moved bool, waited time.Duration) {
	if c >= NumClasses {
		c = NumClasses - 1
	}
	l.mu.Lock()
	cl := l.clientOf(who)
	if l.may(cl, c) {
		l.hold(cl, c)
		l.servedAtOnce(c)
		l.mu.Unlock()
		return true, false, 0
	}
	if l.out { // its caller picks another instance: not shed
		l.forget(cl)
		l.mu.Unlock()
		return false, false, 0
	}
	wait := l.o.MaxWait[c]
	if wait <= 0 || ctx.Err() != nil {
		if wait <= 0 {
			l.shed(c)
		}
		l.forget(cl)
		l.mu.Unlock()
		return false, false, 0
	}
	w := l.pool.Get().(*waiter)
	w.class, w.granted, w.evicted = c, false, false
	start := l.now()
	l.enqueue(cl, w, c)
	l.mu.Unlock()

	moved = l.wait(ctx, w, wait, away)
	waited = l.now().Sub(start)

	l.mu.Lock()
	ok, evicted := w.granted, w.evicted
	var onRoom func()
	switch {
	case ok && moved: // granted here while it took a slot elsewhere: this one goes back
		l.unhold(cl, c)
		l.forget(cl)
		onRoom = l.granted()
	case ok:
		l.served(c)
	case evicted: // out of its queue already, and not shed: sent elsewhere
		l.forget(cl)
	default:
		l.dequeue(cl, w, c)
		if ctx.Err() == nil && !moved {
			l.shed(c)
		}
		l.forget(cl)
	}
	l.mu.Unlock()
	if onRoom != nil {
		onRoom()
	}
	if ok || evicted {
		select { // the grant's or the eviction's signal, if the wait left it
		case <-w.ready:
		default:
		}
	}
	l.pool.Put(w)
	return ok || moved, moved, waited
}

// wait waits for w, queued, to be granted or evicted, for at most wait
// and never past ctx, taking a slot elsewhere (away) if it can first;
// it reports whether it took one there.
func (l *Controller) wait(ctx context.Context, w *waiter, wait time.Duration, away Elsewhere) bool {
	var room <-chan struct{} // nil, never ready, without away
	if away != nil {
		// Watched before it tries: a slot freed after the try closes it.
		if room = away.Watch(); away.Take() {
			return true
		}
	}
	w.timer.Reset(wait)
	defer w.timer.Stop()
	for {
		select {
		case <-w.ready:
			return false
		case <-w.timer.C:
			return false
		case <-ctx.Done():
			return false
		case <-room:
			if room = away.Watch(); away.Take() {
				return true
			}
		}
	}
}

// TryAcquire is Acquire without the wait: it takes a slot for a request
// of class c of client who when one is free to it now, and reports
// whether it did, shedding nothing and queuing nothing (its caller may
// send the request to another instance, or wait with Acquire); it takes
// none while the controller's instance is out of the rotation (Evict). A
// taken slot must be given back with Release.
func (l *Controller) TryAcquire(c Class, who Client) bool {
	if c >= NumClasses {
		c = NumClasses - 1
	}
	l.mu.Lock()
	cl := l.clientOf(who)
	ok := !l.out && l.may(cl, c)
	if ok {
		l.hold(cl, c)
		l.servedAtOnce(c)
	} else {
		l.forget(cl)
	}
	l.mu.Unlock()
	return ok
}

// Room reports whether a request of class c of client who would take a
// slot at once (Acquire's first check), taking none: false while the
// limit has no room for the class or the client holds its share, and
// while the controller's instance is out of the rotation (Evict).
func (l *Controller) Room(c Class, who Client) bool {
	if c >= NumClasses {
		c = NumClasses - 1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.out && l.room(c, who)
}

// room is Room's check, whatever the rotation; l.mu is held.
func (l *Controller) room(c Class, who Client) bool {
	cl := &l.anon
	if who != 0 {
		var none client // a client that holds nothing and waits for nothing
		if cl = l.clients[who]; cl == nil {
			none.key = who
			cl = &none
		}
	}
	return l.may(cl, c)
}

// Evict ends the wait of every request waiting for a slot: each one's
// Acquire returns false at once, as if its wait had ended, without
// raising its class's shed probability; and until Readmit, an Acquire
// that finds no free slot returns false at once, queuing nothing. It is
// for a backend instance that left the rotation (ejected, failing its
// health checks, gone from DNS): the requests queued at it, or picked for
// it just before it left, are better sent to another, and its slots
// still held are given back as their requests end. It returns how many
// waits it ended.
func (l *Controller) Evict() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = true
	n := 0
	for k := range l.turns {
		c := Class(k)
		for cl := l.turns[c].head; cl != nil; cl = l.turns[c].head {
			for w := cl.queues[c].head; w != nil; w = cl.queues[c].head {
				l.dequeue(cl, w, c) // the client leaves the round robin with its last waiter
				w.evicted = true
				w.ready <- struct{}{}
				n++
			}
		}
	}
	return n
}

// Readmit ends what Evict began, for an instance back in the rotation:
// requests may wait for its slots again.
func (l *Controller) Readmit() {
	l.mu.Lock()
	l.out = false
	l.mu.Unlock()
}

// shedScale is the fixed-point scale of the shed probabilities.
const shedScale = 1 << 16

// Admit reports whether a request of class c of client who should go on
// to its checks and Acquire: false sheds it at once, before it is charged
// anything. While the backend has room it is always true; while it is
// full, a class whose requests have lately waited in vain is shed with a
// probability that rises with each such request and falls with each that
// got a slot, so that what reaches the queue is about what the queue
// serves — but never a request of a client that holds no slot and waits
// for none (it is within any share, and the queue serves it in its
// turn; for a cancel, no cancel's: busy), nor one that would take a slot at once (Room: a cancel with the
// cancels' headroom free while reads wait for the limit, a client within
// its share while others wait past theirs). It takes the lock only to
// spare such a request, and does not allocate.
func (l *Controller) Admit(c Class, who Client) bool {
	if c >= NumClasses {
		c = NumClasses - 1
	}
	lim := l.limitNow.Load()
	if c == Cancel {
		lim += l.headroomNow.Load()
	}
	if l.inflightNow.Load() < lim && l.waitingNow.Load() == 0 {
		return true
	}
	p := l.shedP[c].Load()
	if p == 0 || rand.Uint32N(shedScale) >= p {
		return true
	}
	l.mu.Lock()
	spare := (who != 0 && !l.busy(who, c)) || l.room(c, who)
	l.mu.Unlock()
	return spare
}

// shed raises class c's shed probability: a request of it waited in vain;
// l.mu is held.
func (l *Controller) shed(c Class) {
	p := l.shedP[c].Load()
	l.shedP[c].Store(p + (shedScale-p)/8)
}

// served lowers class c's shed probability: a request of it got a slot;
// l.mu is held.
func (l *Controller) served(c Class) {
	if p := l.shedP[c].Load(); p != 0 {
		l.shedP[c].Store(p - p/512 - 1)
	}
}

// servedAtOnce is served for a request of class c that took a slot
// without waiting. A cancel that does while no cancel waits ends the
// cancels' shedding: their probability goes back to 0. Cancels are shed
// only when the backend can take none, and their queue is empty with a
// slot free: lowered by 1/512 a cancel served, the probability a burst
// of cancels waiting in vain raised took 1729 cancels served after one
// such wait and 2564 after eight to come back to 0, and meanwhile,
// whenever the backend was full again for a moment, a cancel of a
// client holding a slot was shed on arrival where it would have waited
// a moment for one. The other classes keep the slow decay: a class that
// waits not at all (max_wait 0) is served at once whenever it is
// served, and its probability would never hold. l.mu is held.
func (l *Controller) servedAtOnce(c Class) {
	if c == Cancel && l.turns[Cancel].head == nil {
		if l.shedP[Cancel].Load() != 0 {
			l.shedP[Cancel].Store(0)
		}
		return
	}
	l.served(c)
}

// take counts a slot as taken; l.mu is held.
func (l *Controller) take() {
	l.inflight++
	l.winPeak = max(l.winPeak, l.inflight)
	l.inflightNow.Store(int64(l.inflight))
}

// Release gives back a slot client who took with Acquire for a request of
// class c. rtt is the
// backend's time, from the request's last body byte to its response head
// (never the client's upload), and done the time it ended, on the clock
// of Options.Now (the caller has read it already; reading it again here
// would be most of Release's cost); sample says whether rtt measures the
// backend (false for a request that never reached it, or whose client
// went away; done is then unused).
func (l *Controller) Release(who Client, c Class, done time.Time, rtt time.Duration, sample bool) {
	l.mu.Lock()
	cl := l.clientOf(who)
	l.unhold(cl, c)
	l.forget(cl)
	if sample {
		l.observe(done, rtt)
	}
	onRoom := l.granted()
	l.mu.Unlock()
	if onRoom != nil {
		onRoom()
	}
}

// granted hands a freed slot to the waiters (grant) and returns
// Options.OnRoom when a slot for a cancel is still free after it, for
// its caller to call once it has let go of the lock, else nil; l.mu is
// held.
func (l *Controller) granted() func() {
	l.grant()
	l.inflightNow.Store(int64(l.inflight))
	if l.inflight < l.limitFor(Cancel) {
		return l.o.OnRoom
	}
	return nil
}

// unhold gives back a slot client cl held for a request of class c; l.mu
// is held.
func (l *Controller) unhold(cl *client, c Class) {
	l.inflight--
	cl.held--
	if c == Cancel {
		cl.cancels--
	}
}

// observe adds one round trip, ended at now, to the window and closes the
// window when it is due; l.mu is held.
func (l *Controller) observe(now time.Time, rtt time.Duration) {
	if l.o.Fixed > 0 {
		return
	}
	if l.probing && l.probeSkip > 0 {
		l.probeSkip-- // sent before the probe, at the old limit
		return
	}
	l.winSum += rtt
	l.winN++
	if l.winN < l.o.MinSamples {
		return
	}
	if now.Sub(l.winStart) < l.o.Window {
		return
	}
	avg := l.winSum / time.Duration(l.winN)
	peak := l.winPeak
	// A window that took twice its length to gather its samples saw
	// traffic of under about five times MinSamples a second: all but
	// idle.
	idle := now.Sub(l.winStart) >= 2*l.o.Window
	l.winStart, l.winSum, l.winN, l.winPeak = now, 0, 0, l.inflight
	if avg <= 0 {
		avg = 1
	}
	if l.probing {
		l.minRTT = avg
		l.minRTTNow.Store(int64(avg))
		l.probing = false
		l.limit = l.probeFrom
		// The next window's samples are mostly of requests sent at the
		// probe's half limit, which queue nothing: they must not read as
		// room to grow (slow start would add half the limit at once).
		l.started = true
		l.nextProbe = now.Add(l.o.ProbeInterval)
		l.publish()
		return
	}
	if l.minRTT == 0 || avg < l.minRTT {
		l.minRTT = avg
		l.minRTTNow.Store(int64(avg))
	}
	target := max(l.o.Tolerance*float64(l.minRTT), float64(l.minRTT+l.o.Slack))
	gradient := min(max(target/float64(avg), 0.5), 1)
	// Grow by √limit only while the backend shows no queue beyond the
	// tolerance, shrink by the gradient otherwise: a headroom added on
	// every window would hold √limit requests queued in the backend for
	// good, which for a backend of a few workers is most of its capacity.
	next := float64(l.limit) * gradient
	started := l.started
	l.started = false
	switch {
	case gradient < 1:
	case started:
		next = float64(l.limit) // the window saw little of the last step
	case float64(avg) <= float64(l.minRTT)+(target-float64(l.minRTT))/2:
		// The backend shows less than half the queue it may have: far
		// from its knee, the limit grows by half (slow start), so that a
		// surge meeting a limit that came down in a quiet spell finds
		// the backend's capacity within a second or so.
		next += max(math.Sqrt(float64(l.limit)), float64(l.limit)/2)
		l.started = true
	default:
		next += math.Sqrt(float64(l.limit))
	}
	next = l.used(next, peak, idle)
	if next < float64(l.limit) {
		// Down by a fifth of the step per window (Gradient2's smoothing):
		// one slow window (a pause, a slow query) costs at most a tenth
		// of the limit; a backend that stays slow brings it down within
		// seconds.
		next = float64(l.limit) - (float64(l.limit)-next)*0.2
	}
	l.limit = min(max(int(next), l.o.Min), l.o.Max)
	if !now.Before(l.nextProbe) {
		l.startProbe(now, peak)
	}
	l.publish()
}

// used bounds the next limit by what the closed window used of the
// limit: peak, its most in flight; idle, whether it was all but idle.
// l.mu is held.
func (l *Controller) used(next float64, peak int, idle bool) float64 {
	switch {
	case idle && 3*peak < l.limit:
		// All but idle: the limit comes down towards three times what
		// the window used. A surge
		// after a quiet spell then meets a limit near what the backend
		// was last seen to carry, not the initial guess or one learnt
		// long ago, which would let the whole surge in at once before
		// the first window could close; slow start finds the capacity
		// again within a second. Busier traffic keeps its limit: the
		// requests of a fast backend hold their slots for microseconds,
		// and a burst of them, all in flight at once when the machine
		// stalls, would otherwise meet a limit sized to that.
		return min(next, float64(3*peak))
	case 2*peak < l.limit:
		// Not using half of it: no reason to grow, and none to shrink.
		// The window's latency came with a concurrency the limit did not
		// hold back, so a lower limit would not have lowered it. Shrunk
		// at every slow window, the limit of light traffic on a busy
		// machine would come down a step at each of the machine's
		// stalls and never grow back, until a stall's burst met it and
		// was queued and shed at a backend far from full.
		return float64(l.limit)
	}
	return next
}

// startProbe holds the limit at half its value (not below Min) until one
// window of samples from requests sent under it has measured the round
// trip with the backend's queue drained. Half, not the floor: a healthy
// backend carrying more than Min requests would otherwise see requests
// shed at every probe, as Envoy's minRTT windows do; under overload the
// limit sits near the backend's knee, and half of it is below the knee.
// When the last window (its most in flight: peak) used half the limit or
// less, the limit stays: the traffic queues nothing at exgate's doing,
// and halving would only shed a burst the limit left room for. l.mu is
// held.
func (l *Controller) startProbe(now time.Time, peak int) {
	l.probing = true
	l.probeFrom = max(l.limit, l.o.Min)
	l.probeSkip = l.inflight
	if 2*peak > l.limit {
		l.limit = max(l.limit/2, l.o.Min)
	}
	l.winStart, l.winSum, l.winN, l.winPeak = now, 0, 0, l.inflight
}

// cancelHeadroom is the divisor of the limit that gives the cancels'
// headroom: cancels may go over the limit by an eighth of it (at least
// one slot). Under a surge cancels can be half of what the backend
// serves, and without a headroom nearly every one waits for the next
// freed slot: in the fault suite's overload test 763-767 of 800 cancels
// waited (p50 about 7 ms, up to 50 ms), with an eighth 182-364 did. A
// quarter made that 72-246 but let the backend hold up to 17 requests at
// once, over 2× its 8 workers; an eighth kept its peak at 15, as without.
const cancelHeadroom = 8

// publish sets the cancels' headroom from the limit and copies both for
// exporters and Admit; l.mu is held.
func (l *Controller) publish() {
	l.headroom = (l.limit + cancelHeadroom - 1) / cancelHeadroom
	l.limitNow.Store(int64(l.limit))
	l.headroomNow.Store(int64(l.headroom))
}

// connLimit returns the largest limit whose slots and cancels' headroom
// together fit in conns connections, at least 1 (with one connection a
// cancel's headroom has none of its own).
func connLimit(conns int) int {
	l := conns
	for l > 1 && l+(l+cancelHeadroom-1)/cancelHeadroom > conns {
		l--
	}
	return max(l, 1)
}

// limitFor returns the limit a request of class c sees: the limit and
// the headroom for a cancel, the limit for the others; l.mu is held.
func (l *Controller) limitFor(c Class) int {
	if c == Cancel {
		return l.limit + l.headroom
	}
	return l.limit
}

// waiter is one request waiting for a slot, pooled with its timer.
type waiter struct {
	prev, next *waiter
	class      Class
	granted    bool
	evicted    bool // Evict took it out of its queue
	ready      chan struct{}
	timer      *time.Timer
}

// waitQueue is a FIFO of waiters, a doubly linked list.
type waitQueue struct{ head, tail *waiter }

func (q *waitQueue) push(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waitQueue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}
