package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/share"
	"github.com/exgate/exgate/upstream"
)

// The overload step bounds the requests under way at the backend
// (overload.Limiter) and sheds, when the backend is full, the least
// important first. It has two parts:
//
//   - admitEarly, before the rate limits: while the backend is full, a
//     class whose requests have lately waited in vain is shed at once,
//     before anything is charged against the client's limits;
//   - admit, after the limits, validation and duplicate protection, right
//     before the backend: the request takes a slot, waiting at most its
//     class's wait, or is shed. A request refused by an earlier check never
//     takes a slot. A request shed here was charged its limits, and is
//     given the charge back before it is answered (refundLimits): either
//     way a shed request costs its client nothing (docs/operations.md,
//     "Overload"). A request's body has been read whole by then
//     (body.go): a client that trickles its body holds no slot meanwhile,
//     and the backend's time the limit learns from starts when the whole
//     request goes to the backend.
//
// Slots are taken within the client's share (overload.Client, clientOf):
// a client may hold no more of them than are left free, and freed slots
// go round robin to the clients that wait.
//
// Either way the answer is 503 overloaded with Retry-After, and the
// backend never sees the request.

// admissionPlan is the overload part of a plan.
type admissionPlan struct {
	enabled bool
	errShed *apierror.Error
	// shedDelay is how long after it arrived a shed request is answered
	// at the soonest (overload.shed_delay).
	shedDelay time.Duration
}

// routeAdmission is a route's overload state, compiled with the plan.
type routeAdmission struct {
	class    overload.Class
	inflight *share.Pool // the route's own cap (max_in_flight) between clients, or nil
	metrics  [overload.NumClasses]*metrics.OverloadMetrics
}

// newAdmissionPlan configures the overload controller from cfg and returns the plan's
// overload part.
func (g *Gateway) newAdmissionPlan(cfg *config.Config) admissionPlan {
	o := cfg.Overload
	opts := upstream.OverloadOptions(o)
	opts.Now = g.now                // the clock the backend's time is read on
	g.fleet.ConfigureOverload(opts) // each instance its own limit
	g.metrics.SetOverloadSource(fleetOverload{g.fleet})
	secs := int64((o.RetryAfter + time.Second - 1) / time.Second)
	when, n := expected(secs)
	return admissionPlan{
		enabled:   o.Enabled,
		errShed:   apierror.Static(http.StatusServiceUnavailable, "overloaded", "The exchange is busy. "+when, "Retry-After", n),
		shedDelay: o.ShedDelay,
	}
}

// compileAdmission sets a route's class, cap and metric children. A
// route capped in the plan before, prev (nil when none), keeps its pool,
// resized to the new cap: the requests under way under the old plan still
// hold their slots of it, so a reload never lets a route send its cap
// again to the backend.
func (g *Gateway) compileAdmission(r *Route, prev *share.Pool) {
	c, ok := overload.ParseClass(r.Config.Priority)
	if !ok {
		c = overload.MarketData // Validate fills priority in; a Route built by hand may lack it
	}
	a := &routeAdmission{class: c}
	if n := r.Config.MaxInFlight; n > 0 {
		a.inflight = prev
		if prev == nil {
			a.inflight = share.NewPool(int64(n))
		}
		a.inflight.Resize(int64(n))
	}
	a.metrics[c] = g.metrics.Overload(r.Name, c.String())
	if r.Config.Validate == config.ValidateBulk && c != overload.Cancel {
		a.metrics[overload.Cancel] = g.metrics.Overload(r.Name, overload.Cancel.String())
	}
	r.admission = a
}

// requestClass is the class of st's request: its route's, or cancel for a
// bulk cancel (market data for a route without admission).
func requestClass(st *requestState) overload.Class {
	switch {
	case st.bulkCancel:
		return overload.Cancel
	case st.route.admission == nil:
		return overload.MarketData
	}
	return st.route.admission.class
}

// admitEarly sheds a request before its limits are charged when its class
// is being shed anyway. A bulk is not known to be a cancel yet, so it is
// judged as a cancel here: it is never shed early for being a placement.
func (g *Gateway) admitEarly(st *requestState, r *http.Request) *apierror.Error {
	pl := st.plan
	if !pl.admission.enabled || st.route.admission == nil {
		return nil
	}
	c := st.route.admission.class
	if st.route.bulk != nil {
		c = overload.Cancel
	}
	var inst *upstream.Instance // the instance the request would go to now
	if svc := g.serviceOf(st); svc != nil {
		inst = svc.Peek()
	}
	if inst == nil {
		return nil // a service without an instance answers in admit
	}
	if inst.Controller.Admit(c, overload.Client(st.client)) {
		st.peeked = inst // where it goes (pickInstance): the instance that admitted it
		return nil
	}
	if st.rec {
		g.traceAdmission(st, c, "shed_on_arrival", 0)
	}
	st.route.admission.metrics[c].Shed()
	g.holdShed(st, r, pl)
	return pl.admission.errShed
}

// holdShed waits, before a shed request is answered, until
// overload.shed_delay has passed since it arrived, or its client goes: a
// client that sends again as soon as it is answered sends a few requests
// a second on each connection instead of as many as the CPUs can answer.
func (g *Gateway) holdShed(st *requestState, r *http.Request, pl *requestPlan) {
	d := pl.admission.shedDelay - g.now().Sub(st.start)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// admit takes a backend slot for st's request, waiting at most its class's
// wait, or sheds it.
func (g *Gateway) admit(st *requestState, r *http.Request) *apierror.Error {
	pl := st.plan
	a := st.route.admission
	if !pl.admission.enabled || a == nil {
		return nil
	}
	c := requestClass(st)
	if e := g.pickInstance(st, r); e != nil {
		g.settle(st, settleRelease, idempotency.Record{})
		g.refundLimits(st, r, pl)
		return e
	}
	if !a.takeRoute(st.client, c) {
		if st.rec {
			g.traceAdmission(st, c, "shed_route_full", 0)
		}
		return g.shed(st, r, pl, c)
	}
	if a.inflight != nil && c == a.class {
		st.routeSlot = a
	}
	ok, waited, e := g.acquireSlot(st, r, c)
	if waited > 0 {
		a.metrics[c].Queued(waited)
	}
	if e != nil {
		g.releaseRouteSlot(st)
		g.settle(st, settleRelease, idempotency.Record{})
		g.refundLimits(st, r, pl)
		return e
	}
	if st.rec {
		g.traceAdmission(st, c, admissionResult(ok, r), waited)
	}
	if !ok {
		g.releaseRouteSlot(st)
		if r.Context().Err() != nil {
			g.settle(st, settleRelease, idempotency.Record{})
			st.rw.status = StatusClientClosed // nothing to answer: the client is gone
			return answered
		}
		return g.shed(st, r, pl, c)
	}
	st.slot, st.slotCtl = true, st.inst.Controller
	return nil
}

// acquireSlot takes a slot of the limit of st's instance for its request,
// r, of class c, waiting at most the class's wait, and reports whether it
// did and how long it waited. A request its instance has no slot for now
// goes to another instance of the rotation that has one, when there is
// such (roomElsewhere), and waits only when none has. A request whose instance left the rotation
// (ejected, down, gone from DNS) before it got its slot, or while it
// waited for one (overload.Controller.Evict ends that wait), is picked
// again in the same service: nothing of it has left exgate, so an order
// too may go to another instance. It is tried at most maxAttempts instances; when none is left,
// or the last still left the rotation, it is refused as a request of a
// service without an instance (the returned error).
func (g *Gateway) acquireSlot(st *requestState, r *http.Request, c overload.Class) (bool, time.Duration, *apierror.Error) {
	who := overload.Client(st.client)
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		ctl := st.inst.Controller // the instance's own limit
		ok, w := true, time.Duration(0)
		if !ctl.TryAcquire(c, who) {
			g.roomElsewhere(st, r, c, who)
			var away overload.Elsewhere
			if c == overload.Cancel {
				away = &cancelElsewhere{st: st, r: r, who: who}
			}
			ok, _, w = st.inst.Controller.AcquireOr(r.Context(), c, who, away)
			ctl = st.inst.Controller // another's, when the cancel took a slot there
		}
		waited += w
		if st.inst.InRotation() || r.Context().Err() != nil {
			return ok, waited, nil
		}
		if ok {
			ctl.Release(who, c, time.Time{}, 0, false)
		}
		svc := st.inst.Service() // the same service: a split is not drawn again
		st.inst.Unpick()
		st.inst, st.peeked = nil, nil
		if attempt == maxAttempts {
			return false, waited, errUpstreamUnavailable
		}
		inst, err := svc.Pick()
		if err != nil {
			return false, waited, errUpstreamUnavailable
		}
		st.inst = inst
		target(r.URL, inst, st.path)
	}
}

// roomElsewhere moves st's request, r, of class c of client who, whose
// instance has no slot for it now, to another instance of its service's
// rotation that has (upstream.Service.PickOther), if any: the balancer
// compares requests under way, not limits, and an instance whose limit
// shrank (a slow one) may be full with fewer requests under way than a
// peer with room, where a request would wait its class's wait, a cancel
// a second, and be shed, while the peer could serve it at once.
func (g *Gateway) roomElsewhere(st *requestState, r *http.Request, c overload.Class, who overload.Client) {
	inst := st.inst.Service().PickOther(st.inst, func(in *upstream.Instance) bool { return in.Controller.Room(c, who) })
	if inst == nil {
		return
	}
	st.inst, st.peeked = inst, nil
	target(r.URL, inst, st.path)
}

// cancelElsewhere is where a cancel waiting at its instance's limit, st's
// request r of client who, may take a slot instead (overload.Elsewhere):
// another instance of its service's rotation that frees one first (its
// Controller's OnRoom, upstream.Service.Watch), so that a cancel queued
// at its own full instance is not shed while a slot at another stands
// free. It is made only when the instance is full.
type cancelElsewhere struct {
	st  *requestState
	r   *http.Request
	who overload.Client
}

// Watch returns the channel closed when an instance of the service may
// have a slot for a cancel.
func (e *cancelElsewhere) Watch() <-chan struct{} { return e.st.inst.Service().Watch() }

// Take takes a slot for the cancel at another instance of the rotation
// that has one for it now, and moves the request there.
func (e *cancelElsewhere) Take() bool {
	st, who := e.st, e.who
	inst := st.inst.Service().TakeOther(st.inst,
		func(in *upstream.Instance) bool { return in.Controller.Room(overload.Cancel, who) },
		func(in *upstream.Instance) bool { return in.Controller.TryAcquire(overload.Cancel, who) })
	if inst == nil {
		return false
	}
	st.inst, st.peeked = inst, nil
	target(e.r.URL, inst, st.path)
	return true
}

// takeRoute takes one of the route's own slots (max_in_flight) for a
// request of class rc of client c, within its share of them, reporting
// false when it has none; a route without a cap of its own always has
// room. The cap bounds the route's own class: a bulk cancel on a
// placement route (bulk_orders) is a cancel, bounded by the overload
// limit and the cancels' headroom, and takes none of it, so that other
// clients' bulk placements holding the cap never refuse it.
func (a *routeAdmission) takeRoute(c share.Key, rc overload.Class) bool {
	return a.inflight == nil || rc != a.class || a.inflight.Take(c, 1)
}

// releaseRoute gives back a slot takeRoute took for client c.
func (a *routeAdmission) releaseRoute(c share.Key) {
	if a.inflight != nil {
		a.inflight.Give(c, 1)
	}
}

// shed refuses a request the backend has no room for. A claimed order
// identifier is released and the rate limits it was charged are given
// back: the order was never sent, and a shed request costs its client
// nothing.
func (g *Gateway) shed(st *requestState, r *http.Request, pl *requestPlan, c overload.Class) *apierror.Error {
	st.route.admission.metrics[c].Shed()
	g.settle(st, settleRelease, idempotency.Record{})
	g.refundLimits(st, r, pl)
	g.holdShed(st, r, pl)
	return pl.admission.errShed
}

// refundLimits gives back what st's request was charged against its
// limits (for a bulk, its size against the target route's). It runs
// before the answer goes out, so that the client's next request finds
// nothing charged, and the answer's rate-limit fields are written again
// to say so; a store that cannot be reached leaves the charge and the
// fields that tell it (the Enforcer counts and logs that as a store
// failure).
func (g *Gateway) refundLimits(st *requestState, r *http.Request, pl *requestPlan) {
	g.giveBackLimits(st, r, pl, g.limits.Refund)
}

// giveBackLimits gives back st's charge with giveBack: Enforcer.Refund,
// or Enforcer.Uncharge for a request duplicate protection answered.
func (g *Gateway) giveBackLimits(st *requestState, r *http.Request, pl *requestPlan,
	giveBack func(context.Context, *limiter.RouteRules, limiter.Request, *limiter.Decision) error) {
	rt := st.charged
	if rt == nil {
		return
	}
	st.charged = nil
	req := st.limitRequest()
	req.Cost = st.cost
	if giveBack(r.Context(), rt.limits, req, &st.decision) == nil {
		st.setLimitFields(&st.decision, pl.rules.Headers())
		if st.rec {
			st.span.SetAttributes(attrLimitGivenBack.Bool(true))
		}
	}
}

// releaseSlot gives back the slot of st, if it holds one, with the
// backend's round trip as a latency sample when it measures the backend:
// the backend answered, or timed out (a timeout says it is slow), and the
// client did not go away first. A refused connection answers in
// microseconds and would teach the limit a latency the backend never has.
func (g *Gateway) releaseSlot(st *requestState) {
	g.releaseRouteSlot(st)
	sample := st.upDone && st.clientCx.Err() == nil &&
		(st.upStatus != 0 || metrics.IsTimeout(st.upErr))
	if !st.slot {
		return
	}
	st.slot = false
	st.slotCtl.Release(overload.Client(st.client), requestClass(st), st.upEnd, st.upDur, sample && !st.moved)
}

func (g *Gateway) releaseRouteSlot(st *requestState) {
	if st.routeSlot != nil {
		st.routeSlot.releaseRoute(st.client)
		st.routeSlot = nil
	}
}
