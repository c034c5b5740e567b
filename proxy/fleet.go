package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/upstream"
)

// The backend fleet (docs/upstream.md): each route forwards to a service
// of upstream.Fleet, whose Pick chooses the instance in forward, right
// before the request goes. The request counts as under way at that
// instance until it ends (end → instanceDone), when its outcome feeds the
// instance's outlier detection. A request moves to another instance
// (fleetTransport) only when nothing of it reached the first — its
// connect failed — or when it is a GET or HEAD without a body, within
// the service's retry budget: an order, a bulk or a cancel is never sent
// twice.

// errUpstreamUnavailable answers a request whose service has no instance
// to send it to, or none of whose instances accepted a connection.
var errUpstreamUnavailable = apierror.Static(http.StatusServiceUnavailable, "upstream_unavailable",
	"The service behind this endpoint is unavailable. Expected available in 1 second.", "Retry-After", "1")

// maxAttempts bounds the instances one request is tried on.
const maxAttempts = 3

// stateKey is the context key under which a forwarded request's context
// carries its requestState, for fleetTransport.
type stateKey struct{}

// stateContext is the context a request is forwarded with: its own,
// cancelled at the route's deadline (deadlineQueue), carrying its
// requestState for fleetTransport and the order's response record. It is
// not pooled with the state: net/http's Transport may still read a
// context's values after the request ended (a dial it goes on with for
// its pool).
type stateContext struct {
	context.Context // cancelled with the cause context.DeadlineExceeded at deadline
	st              *requestState
	deadline        time.Time
	// traceparent holds the traceparent value sent to the backend
	// (traceheader.Formats.Write). The backend's header shares it, and net/http's
	// HTTP/2 Transport may still write that header after the request has
	// ended (RoundTrip returns on a cancel while the stream waits to write
	// its head): it is here, never pooled, not in the pooled state.
	traceparent [1]string
}

// Value returns the request's state for stateKey.
func (c *stateContext) Value(k any) any {
	if k == (stateKey{}) {
		return c.st
	}
	return c.Context.Value(k)
}

// Deadline returns the route's deadline, or the parent's when earlier.
func (c *stateContext) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Err returns context.DeadlineExceeded once the route's deadline has
// cancelled the call, as a context of context.WithTimeout does: the
// HTTP/2 transport and ReverseProxy report ctx.Err, not its cause.
func (c *stateContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// pickInstance chooses the instance st's request goes to and points r at
// it, or returns the answer when its service has none.
func (g *Gateway) pickInstance(st *requestState, r *http.Request) *apierror.Error {
	if st.inst != nil {
		return nil // chosen when the request took its instance's slot (admit)
	}
	var inst *upstream.Instance
	var err error
	if p := st.peeked; p != nil {
		inst, err = p.Service().PickPeeked(p) // the instance whose limit let it in on arrival (admitEarly)
	} else {
		svc := g.serviceOf(st)
		if svc == nil {
			return errUpstreamUnavailable // a reloaded route naming a service not started (upstream is restart-only)
		}
		inst, err = svc.Pick()
	}
	if err != nil {
		return errUpstreamUnavailable
	}
	st.inst = inst
	target(r.URL, inst, st.path)
	return nil
}

// serviceOf returns the service st's request goes to: its route's, or
// the one its split draws.
func (g *Gateway) serviceOf(st *requestState) *upstream.Service {
	if st.route.split != nil {
		return g.splitService(st)
	}
	return st.route.service
}

// target points u at inst, on path below the instance's base path.
func target(u *url.URL, inst *upstream.Instance, path string) {
	base := inst.URL
	u.Scheme, u.Host = base.Scheme, base.Host
	if p := base.Path; p != "" && p != "/" {
		if p[len(p)-1] == '/' {
			p = p[:len(p)-1]
		}
		path = p + path
	}
	u.Path, u.RawPath = path, ""
}

// unavailable answers a request that reached no instance: its claim is
// released and its rate-limit charge given back, as for a shed request.
func (g *Gateway) unavailable(st *requestState, r *http.Request, e *apierror.Error) {
	g.settle(st, settleRelease, idempotency.Record{})
	g.refundLimits(st, r, st.plan)
	g.refuse(st, r, e)
}

// instanceDone ends st's request, r, at its instance with its outcome,
// kind (a read, or a write such as an order) and client (clientOf: the
// instance's runs of server errors eject only when they are not one
// client's alone).
func (g *Gateway) instanceDone(st *requestState, r *http.Request) {
	if inst := st.inst; inst != nil {
		st.inst = nil
		inst.Done(outcomeOf(st), upstream.KindOf(r.Method), upstream.Client(st.client))
	}
}

// outcomeOf is how st's request went, as outlier detection reads it.
func outcomeOf(st *requestState) upstream.Outcome {
	switch {
	case st.upStatus >= 500:
		return upstream.ServerError
	case st.upStatus != 0:
		return upstream.Success
	case st.upErr == nil || st.abandoned:
		return upstream.Abandoned
	case upstream.NeverTaken(st.upErr):
		return upstream.ConnectFailure // a refused connect or TLS handshake
	}
	return upstream.ServerError
}

// watchConn returns ctx, the context of st's backend call, watching for
// the connection net/http sends it on (httptrace's GotConn) when st is an
// order whose claim is held: net/http writes a request only on a
// connection it has, so a call that failed before it had one sent
// nothing (nothingSent), whatever its error says — the route's deadline
// in the TLS handshake, a client certificate the instance refused in a
// TLS 1.2 handshake, whose alert comes before the handshake ends. In TLS
// 1.3 the client's handshake ends before the instance checks the
// certificate: the connection is had, the order written. One allocation
// per such order (the trace; its context another).
func watchConn(st *requestState, ctx context.Context) context.Context {
	if st.claim.phase != claimHeld {
		return ctx
	}
	st.connWatched = true
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: st.gotConn})
}

// nothingSent reports whether st's backend call, failed with err, sent
// nothing of its request to any instance: err proves it
// (upstream.NothingSent), or the call was watched and net/http never had
// a connection for it (watchConn).
func nothingSent(st *requestState, err error) bool {
	return upstream.NothingSent(err) || st.connWatched && !st.connGot
}

// fleetTransport is the reverse proxy's Transport: the backend Transport
// (a service's own, when it has one), and the move of a failed request to
// another instance of its service.
type fleetTransport struct{ g *Gateway }

// RoundTrip sends req to the instance forward chose, and on a failure that
// allows it, to others (retryable).
func (t fleetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g := t.g
	var st *requestState
	rt := g.transport
	if g.ownTransports { // else every service's is g.transport: no look-up
		if st, _ = req.Context().Value(stateKey{}).(*requestState); st != nil && st.inst != nil {
			rt = st.inst.Service().RoundTripper(rt)
		}
	}
	res, err := rt.RoundTrip(req)
	if err == nil {
		if g.checkIDs {
			unhideResponseID(res.Header)
		}
		return res, nil
	}
	if st == nil {
		st, _ = req.Context().Value(stateKey{}).(*requestState)
	}
	if st == nil || st.inst == nil {
		return res, err
	}
	svc, c, who := st.inst.Service(), requestClass(st), upstream.Client(st.client)
	for attempt := 1; attempt < maxAttempts && retryable(st, req, err); attempt++ {
		next := svc.Retry(st.inst, c, who)
		if next == nil {
			break
		}
		next = retryWithRoom(st, next)
		var ok bool
		if next, ok = g.moveSlot(st, req, next); !ok {
			svc.EndRetry(c, who)
			next.Done(upstream.Abandoned, upstream.KindOf(req.Method), upstream.Client(st.client))
			break
		}
		st.moved = true
		st.reached = st.reached || !nothingSent(st, err)
		st.upErr = err
		prev := st.inst
		st.inst = next
		prev.Done(outcomeOf(st), upstream.KindOf(req.Method), upstream.Client(st.client))
		st.upErr = nil
		req = retryRequest(req, next, st)
		if st.upSpan != nil {
			st.upSpan.SetAttributes(semconv.ServerAddress(next.Host), semconv.ServerPort(next.Port))
		}
		res, err = rt.RoundTrip(req)
		svc.EndRetry(c, who)
		if err == nil {
			if g.checkIDs {
				unhideResponseID(res.Header)
			}
			return res, nil
		}
	}
	return nil, err
}

// retryable reports whether a request that failed with err may go to
// another instance: its client still waits (or it is a claimed order,
// which goes whatever its client does), its body can be sent again (none,
// or the one read whole), and either nothing of it reached the
// instance or it is a GET or HEAD (safe to repeat) that did not run out
// of time.
func retryable(st *requestState, req *http.Request, err error) bool {
	if req.Context().Err() != nil || st.clientCx.Err() != nil && st.claim.phase == claimNone {
		return false
	}
	bodyless := req.Body == nil || req.Body == http.NoBody
	if !bodyless && st.sentBody == nil {
		return false // a body exgate does not hold cannot be sent again
	}
	if nothingSent(st, err) {
		return true
	}
	return bodyless && (req.Method == http.MethodGet || req.Method == http.MethodHead) && !metrics.IsTimeout(err)
}

// retryRequest is req sent to inst instead.
func retryRequest(req *http.Request, inst *upstream.Instance, st *requestState) *http.Request {
	out := req.Clone(req.Context())
	target(out.URL, inst, st.path)
	if st.sentBody != nil {
		out.Body = io.NopCloser(bytes.NewReader(st.sentBody))
	}
	return out
}

// fleetStatus reports the fleet for the metrics.
type fleetStatus struct{ f *upstream.Fleet }

// FleetStatus returns each service's state and its instances'.
func (s fleetStatus) FleetStatus() []metrics.ServiceStatus {
	var out []metrics.ServiceStatus
	for _, svc := range s.f.Services() {
		state, counts := svc.State(), svc.Counts()
		ss := metrics.ServiceStatus{Name: svc.Name(), Available: state.Available(), Panic: state.Panic,
			Failover: state.Failover, Retries: counts.Retries, Unavailable: counts.Unavailable,
			RetriesOverBudget: counts.RetriesOverBudget, RetriesOverShare: counts.RetriesOverShare}
		for _, in := range svc.Status() {
			ss.Instances = append(ss.Instances, metrics.InstanceStatus{Addr: in.Addr, State: in.State, Active: in.Active,
				Requests: in.Requests, Ejections: in.Ejections})
		}
		out = append(out, ss)
	}
	return out
}

// retryWithRoom returns the instance st's request, moved off its own by
// Retry to next, goes to: next, or when next has no slot for it now,
// another instance of the rotation (not its own) that has
// (upstream.Service.PickOther), as admit's roomElsewhere does; a retry
// waits at a full instance only when none has room.
func retryWithRoom(st *requestState, next *upstream.Instance) *upstream.Instance {
	if !st.slot {
		return next // the overload step is off: no slot to take
	}
	c, who, prev := requestClass(st), overload.Client(st.client), st.inst
	if next.Controller.Room(c, who) {
		return next
	}
	room := func(in *upstream.Instance) bool { return in != prev && in.Controller.Room(c, who) }
	if other := next.Service().PickOther(next, room); other != nil {
		return other
	}
	return next
}

// moveSlot gives back the slot st's request holds at its instance's limit
// (no sample: the instance did not answer) and takes one at next's,
// waiting as admit would (a cancel takes the first slot freed for it at
// any instance of the rotation but the one it leaves: retryElsewhere).
// It returns the instance whose slot it took, next or that one, and
// false when none had one to give.
func (g *Gateway) moveSlot(st *requestState, req *http.Request, next *upstream.Instance) (*upstream.Instance, bool) {
	if !st.slot {
		return next, true
	}
	who, c := overload.Client(st.client), requestClass(st)
	st.slotCtl.Release(who, c, time.Time{}, 0, false)
	st.slot, st.slotCtl = false, nil
	var away overload.Elsewhere
	var re *retryElsewhere
	if c == overload.Cancel {
		re = &retryElsewhere{prev: st.inst, next: next, who: who}
		away = re
	}
	ok, moved, _ := next.Controller.AcquireOr(req.Context(), c, who, away)
	if !ok {
		return next, false
	}
	if moved {
		next = re.next
	}
	st.slot, st.slotCtl = true, next.Controller
	return next, true
}

// retryElsewhere is where a cancel moved off prev, waiting at next's
// limit, may take a slot instead (overload.Elsewhere): another instance
// of the rotation, not prev, that frees one first, as cancelElsewhere
// for a cancel's first instance.
type retryElsewhere struct {
	prev, next *upstream.Instance
	who        overload.Client
}

// Watch returns the channel closed when an instance of the service may
// have a slot for a cancel.
func (e *retryElsewhere) Watch() <-chan struct{} { return e.next.Service().Watch() }

// Take takes a slot for the cancel at an instance of the rotation, not
// prev nor next, that has one for it now, and counts the request there.
func (e *retryElsewhere) Take() bool {
	who, prev := e.who, e.prev
	inst := e.next.Service().TakeOther(e.next,
		func(in *upstream.Instance) bool { return in != prev && in.Controller.Room(overload.Cancel, who) },
		func(in *upstream.Instance) bool { return in.Controller.TryAcquire(overload.Cancel, who) })
	if inst == nil {
		return false
	}
	e.next = inst
	return true
}

// fleetOverload reports the instances' concurrency limits, summed over
// the fleet, for the overload gauges (each instance's own limit is in
// the console).
type fleetOverload struct{ f *upstream.Fleet }

func (o fleetOverload) sum(get func(*overload.Controller) int) int {
	n := 0
	for _, svc := range o.f.Services() {
		for _, inst := range svc.Instances() {
			n += get(inst.Controller)
		}
	}
	return n
}

// Limit is the sum of the limits of the instances in each service's
// rotation: what exgate lets be under way at once. An instance out of it
// (an idle SRV backup, one ejected or down) gets no new request, so its
// limit is not counted.
func (o fleetOverload) Limit() int {
	n := 0
	for _, svc := range o.f.Services() {
		for _, inst := range svc.Rotation() {
			n += inst.Controller.Limit()
		}
	}
	return n
}

// InFlight is the slots taken at every instance.
func (o fleetOverload) InFlight() int { return o.sum((*overload.Controller).InFlight) }

// Waiting is the requests waiting for a slot at every instance.
func (o fleetOverload) Waiting() int { return o.sum((*overload.Controller).Waiting) }

// Clients is the clients holding or awaiting a slot, summed over the
// instances (one at two instances counts twice).
func (o fleetOverload) Clients() int { return o.sum((*overload.Controller).Clients) }

// MinRTT is the lowest unloaded latency an instance has measured, 0
// before any has.
func (o fleetOverload) MinRTT() time.Duration {
	var least time.Duration
	for _, svc := range o.f.Services() {
		for _, inst := range svc.Instances() {
			if d := inst.Controller.MinRTT(); d > 0 && (least == 0 || d < least) {
				least = d
			}
		}
	}
	return least
}
