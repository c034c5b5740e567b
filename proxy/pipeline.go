package proxy

import (
	"context"
	"net/http"

	"golang.org/x/net/http/httpguts"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
)

// ServeHTTP runs the request pipeline of docs/architecture.md ("Request
// path"). Each step lets the request on or returns the answer it is
// refused with; refuse writes that answer, and a refused request never
// reaches the backend.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.metrics.IncInflight()
	st := g.pool.Get().(*requestState) // zero: finish clears it before putting it back
	st.g, st.start, st.clientCx = g, g.now(), r.Context()
	// Field by field: st.rw is zero, and assigning it whole would clear
	// its pointers under the collector's write barrier first.
	st.rw.ResponseWriter, st.rw.st = w, st
	defer g.finish(st, r)
	if g.draining.Load() {
		// Shutting down: the client is to open a new connection, which
		// its balancer sends to a ready replica, rather than send its next
		// request into this one as the shutdown closes it (for HTTP/2,
		// net/http sends a GOAWAY: the streams under way finish).
		w.Header()["Connection"] = connClose
	}
	if g.tracer != nil {
		g.startSpan(st, r)
	}

	st.plan = g.plan.Load()
	for _, step := range steps {
		if e := step(g, st, r); e != nil {
			g.refuse(st, r, e)
			return
		}
	}
	g.forward(st, r)
}

// steps are the request path's steps, in order (docs/architecture.md,
// "Request path"): each lets the request on (nil) or returns the answer it
// is refused with. The plan a step reads is st.plan, the one the request
// started with.
var steps = [...]func(*Gateway, *requestState, *http.Request) *apierror.Error{
	(*Gateway).assignRequestID,  // 1: the request id (never refuses)
	(*Gateway).checkConnShare,   // a connection past its address's share
	(*Gateway).checkHead,        // 2, 3: the head and the canonical path
	(*Gateway).matchRoute,       // 4: the route (a CORS preflight answered)
	(*Gateway).authenticate,     // 5: the token
	(*Gateway).checkQuery,       // 5: a query string on an order route
	(*Gateway).setClientAddress, // the client's address and share (never refuses)
	(*Gateway).admitEarly,       // 8': shed on arrival
	(*Gateway).limitAndCheck,    // 6, 6', 6'', 7, 8: in the order of the route's kind
	(*Gateway).admit,            // 8': a backend slot
}

// limitAndCheck runs the limits, body and identifier steps of a request
// (those of a bulk: checkBulk), in the order of its route's kind, whatever the
// stores. An order (a route with validate: order) is read and checked
// first, then its limits are decided with its identifier's claim riding
// in their round trip when duplicate protection shares the limiter's
// Redis, else claimed on its own once they let it pass (limitWithClaim);
// a limit's refusal is the answer whatever the body, and claims nothing,
// and a client the deny cache knows to be throttled is refused before
// its order is read. Any other request is charged first — one unit, or
// one per order id of its path when its route takes a list — and its
// body read once its limits let it pass.
func (g *Gateway) limitAndCheck(st *requestState, r *http.Request) *apierror.Error {
	pl := st.plan
	if st.route.bulk != nil {
		return g.checkBulk(st, r, pl) // a bulk is charged by its size: its body comes first
	}
	if pl.validator == nil || st.route.Config.Validate != config.ValidateOrd {
		cost, e := g.pathIDs(st, r)
		if e != nil {
			return e
		}
		if e := g.enforceLimits(st, r, pl, st.route, cost, nil); e != nil {
			return e
		}
		return g.checkBody(st, r, pl)
	}
	if g.limits != nil && st.route.limits.Limited() {
		if e := g.refusedFromCache(st, r, pl); e != nil {
			return e
		}
	}
	refusal := g.checkOrder(st, r, pl.validator)
	claims := refusal == nil && g.orderClaims(st)
	if e := g.limitWithClaim(st, r, pl, st.route, 1, claims, refusal); e != nil {
		if e == refusal {
			g.countInvalid(st, e)
		}
		return e
	}
	return nil
}

// answered is returned by a step that has answered the request itself (a
// CORS preflight, a replayed order) or that has no one left to answer
// (the client went away): refuse writes nothing for it.
var answered = apierror.New(0, "answered", "")

// refuse answers the request with e, the answer of the step that refused
// it. While the request's body is unread and of unknown length (chunked),
// an HTTP/1 connection is closed after the answer: net/http would
// otherwise read up to 256 KiB of that body before the answer goes out,
// so a refused client could make exgate wait for it.
func (g *Gateway) refuse(st *requestState, r *http.Request, e *apierror.Error) {
	if e == answered {
		return
	}
	if !st.bodyTaken && r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
		closeAfterAnswer(st.rw.Header(), r)
	}
	if st.rec {
		g.traceRefusal(st, e)
	}
	st.code = e.Code
	WriteError(&st.rw, st.id, e)
}

var connClose = []string{"close"}

// closeAfterAnswer has an HTTP/1 connection closed after the answer, when
// the rest of the request's body is left unread. An HTTP/2 stream ends on
// its own (the server resets a stream whose body was not read); a
// Connection: close there would become a GOAWAY, ending every other
// request the client has on the connection.
func closeAfterAnswer(h http.Header, r *http.Request) {
	if r.ProtoMajor < 2 {
		h["Connection"] = connClose
	}
}

// assignRequestID gives the request its id (the client's X-Request-ID
// when well formed, else a new one, sent to the backend) and, under a CORS
// policy, the CORS headers every answer to an allowed origin carries,
// refusals included: what every answer carries, set before any step can
// refuse.
func (g *Gateway) assignRequestID(st *requestState, r *http.Request) *apierror.Error {
	pl := st.plan
	if ids := r.Header["X-Request-Id"]; len(ids) > 0 && validRequestID(ids[0]) {
		st.id, st.clientID = ids[0], true
	} else {
		st.idValue, st.fwdCtx = g.ids.nextValue()
		st.id = st.idValue[0]
	}
	if pl.cors == nil {
		return nil
	}
	if origin := r.Header["Origin"]; len(origin) == 1 {
		pl.cors.decorate(st.rw.Header(), origin)
	}
	return nil
}

// checkHead refuses a request whose head exgate and the backend could
// read differently, or that is too large: headers over
// server.max_header_bytes, a Connection option naming an end-to-end
// header, a header name with an underscore, a path with no canonical
// form, a method- or path-override header, a _method query parameter. It sets the request's canonical
// path, and has an HTTP/1.0 connection closed after its answer.
func (g *Gateway) checkHead(st *requestState, r *http.Request) *apierror.Error {
	if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		// net/http ignores (and removes) Transfer-Encoding on an
		// HTTP/1.0 request, where a proxy in front may read a chunked
		// body: on a kept-alive connection the rest would be read as
		// more requests. RFC 9112 §6.1: close after such a message.
		st.rw.Header()["Connection"] = connClose
	}
	sc := scanHeader(r)
	if sc.size > g.maxHeader {
		closeAfterAnswer(st.rw.Header(), r)
		return g.errHeader
	}
	if sc.connection {
		if e := checkConnection(r.Header); e != nil {
			return e
		}
	}
	if sc.underscore {
		return errUnderscoreHeader
	}
	if r.ProtoMajor == 2 && !httpguts.ValidHostHeader(r.Host) {
		// net/http's HTTP/2 server takes any :authority a field value
		// may hold, where its HTTP/1 server refuses such a Host: it would
		// go to the backend as its Host and X-Forwarded-Host under
		// upstream.forward_hosts: "*".
		return errInvalidAuthority
	}
	st.forwarded, st.envoy, st.plainBody, st.noDrops = sc.forwarded, sc.envoy, !sc.bodyDescribing, !sc.rewritten
	p, err := requestPath(r.URL)
	if err != nil {
		return pathErrors[err.(pathError)]
	}
	st.path = p
	if sc.methodOverride || r.URL.RawQuery != "" && queryNamesMethod(r.URL.RawQuery) {
		return errMethodOverride
	}
	if sc.pathOverride {
		return errPathOverride
	}
	return nil
}

// matchRoute finds the request's route (404, or 405 with Allow, when none
// matches) and sets the path forwarded to the backend. A CORS preflight is
// answered here under a policy; without one it goes to the backend on the
// default route, whatever its path: a browser sends it without
// credentials, and OPTIONS runs no view of a DRF backend.
func (g *Gateway) matchRoute(st *requestState, r *http.Request) *apierror.Error {
	pl := st.plan
	preflight := isPreflight(r)
	if preflight && hasBody(r) {
		return errPreflightBody
	}
	if preflight && pl.cors != nil {
		return g.answerPreflight(st, r, pl.cors)
	}
	var route *Route
	var matched, allow string
	if preflight && pl.table.def != nil {
		route, matched = pl.table.def, st.path
	} else {
		route, matched, allow = pl.table.match(r.Method, st.path)
	}
	switch {
	case route != nil:
		st.route = route
		st.path = route.forwardPath(matched)
		return nil
	case allow != "":
		return apierror.MethodNotAllowed(MethodShown(r.Method), allow)
	}
	return errNotFound
}

// setClientAddress derives the client's address (clientip.go) and the
// X-Real-IP value the backend receives in place of any the client sent
// (set by rewrite), and sets whom the request counts as in the shared
// pools (clientOf). A client's X-Forwarded-* headers, and the other
// headers a backend may read its address from (isAddressHeader), reach
// the backend only through a trusted proxy; its X-Envoy-* headers never.
func (g *Gateway) setClientAddress(st *requestState, r *http.Request) *apierror.Error {
	if st.peer == nil { // a request without the server's connection context (checkConnShare)
		st.peer = g.peerOf(r)
	}
	if st.forwarded && !st.peer.trusted {
		dropForwardedFamily(r.Header)
	}
	if st.envoy {
		dropEnvoyHeaders(r.Header)
	}
	st.addr, st.realIP = g.client(r, st.peer)
	st.client = clientOf(st, st.plan)
	return nil
}

// forward sends the request to the backend on its canonical path, within
// the route's timeout (deadlineQueue). A claimed order goes through even if its client
// hangs up, so that its outcome is recorded and a retry gets the replay.
// A request with the client's own X-Request-ID goes with that id made
// unique (upstreamValue) while backend answers are checked by id.
func (g *Gateway) forward(st *requestState, r *http.Request) {
	if st.clientID && g.checkIDs {
		st.idValue = g.ids.upstreamValue(st.id)
		st.upID = st.idValue[0]
	}
	parent := r.Context()
	if st.claim.phase == claimHeld {
		parent = context.WithoutCancel(parent)
	}
	if e := g.pickInstance(st, r); e != nil {
		g.unavailable(st, r, e)
		return
	}
	st.bodyTaken = true // the reverse proxy's from here on
	st.upStart = g.nowSince(st.start)
	ctx, cancel := context.WithCancelCause(parent)
	ctx = watchConn(st, ctx)
	deadline := st.route.deadlines.join(&st.deadline, cancel, g.sinceEpoch(st.upStart))
	sc := st.fwdCtx // made with the request's id, if exgate made it (nextValue)
	if sc == nil {
		sc = new(stateContext)
		st.fwdCtx = sc
	}
	// sc is zero (new, or nextValue's): set field by field, where a whole
	// assignment copies it under the collector's write barrier.
	sc.Context, sc.st, sc.deadline = ctx, st, deadline
	st.cut = cancel
	defer func() {
		unhideHeader(st, r)
		st.deadline.leave()
		cancel(nil)
		st.cut = nil
	}()
	if st.sc.IsValid() {
		g.startUpstreamSpan(st, r, &sc.traceparent)
	}
	hideHeader(st, r)
	st.rw.hinting = true // until the backend's answer or failure: endHints
	st.rw.http10 = !r.ProtoAtLeast(1, 1)
	st.proxy.ServeHTTP(&st.rw, r) // its rewrite sends the outbound request with sc
}

// setContext makes ctx r's context in place: rewrite's for the outbound
// request, ReverseProxy's own copy of the client's, which nothing else
// holds yet. r.WithContext's copy of r is made on the stack and copied
// back, where r.WithContext(ctx) alone made a copy of r on the heap (a
// Request is 304 bytes). The client's request keeps its own context:
// exgate's hooks find the request's state bound to its own proxy
// (requestState.proxy), not in the request's context, so that it is
// copied once under the collector's write barrier, not twice (in and
// back).
func setContext(r *http.Request, ctx context.Context) {
	*r = *r.WithContext(ctx)
}
