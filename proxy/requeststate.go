package proxy

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/share"
	"github.com/exgate/exgate/upstream"
)

// requestState is what the pipeline knows of one request as it goes: who
// sent it and where it goes, then a part per concern — what the order
// check found, the claim of its identifiers, its limits, its backend
// call, what it holds of the shared pools, its trace — each given back by
// end, in one place, when the request ends. Pooled: finish clears it for
// the next request, but for the parts of what the gateway does not do
// (duplicate protection, limits, tracing), which no request writes.
type requestState struct {
	requestCore
	claim      claimState // the claim of its identifiers, settled by end (claim.go); Options.Idempotency's
	limitState            // its limits (limits.go); Options.Limits'
	traceState            // its spans, ended by end (trace.go); Options.Tracer's
	// proxy is the reverse proxy the state's requests are forwarded with,
	// made with the state (newState) and kept: its Rewrite and
	// ModifyResponse are rewrite and modifyResponse bound to the state.
	proxy *httputil.ReverseProxy
	// gotConn, made with the state, records that net/http has a
	// connection for its request's backend call (watchConn).
	gotConn func(httptrace.GotConnInfo)
}

// newState makes a pooled request state with its reverse proxy: the
// gateway's, its Rewrite and ModifyResponse bound to the state, so that
// rewrite has the state without looking for it in the client's request's
// context, where forward would have to set it (setContext), and
// modifyResponse without looking for it in the outbound request's, a walk
// of two contexts.
func (g *Gateway) newState() *requestState {
	st := new(requestState)
	rp := g.rp
	rp.Rewrite = func(pr *httputil.ProxyRequest) { g.rewrite(st, pr) }
	rp.ModifyResponse = func(res *http.Response) error { return g.modifyResponse(st, res) }
	st.proxy = &rp
	st.gotConn = func(httptrace.GotConnInfo) { st.connGot = true }
	return st
}

// requestCore is the part of requestState every request writes.
type requestCore struct {
	g          *Gateway
	rw         respWriter
	start      time.Time
	plan       *requestPlan // the plan the request started with
	id         string
	clientID   bool // id is the client's own X-Request-ID
	route      *Route
	path       string // canonical path, or "" when refused before that
	clientCx   context.Context
	addr       netip.Addr // client address, once derived
	peer       *peer      // the connection's peer (checkConnShare, else setClientAddress)
	caller     caller     // who sent the request, from the auth step
	client     share.Key  // whose share of the shared pools the request takes (clientOf)
	forwarded  bool       // the client sent X-Forwarded-* or other address headers (scanHeader)
	envoy      bool       // the client sent X-Envoy-* headers (scanHeader)
	plainBody  bool       // no header describing the body's bytes (scanHeader): forwardEncoded drops none
	noDrops    bool       // none of the headers forwarding removes or renames (isRewritten, scanHeader): none is looked up
	bulkCancel bool       // the request is a bulk of order ids to cancel
	bodyTaken  bool       // the body was read whole or handed to the backend (see refuse)

	order        orderState // what the order check found (order.go)
	upstreamCall            // its backend call
	holds                   // what it holds of the shared pools, given back by end

	code       string // the code of exgate's own error answer (refuse), or ""
	authFailed string // why a 401 refused the request's credentials (the access log's auth_failure), or ""
	replayed   bool   // the answer is an order's recorded response, replayed

	// idValue is the X-Request-ID value exgate sends the backend in
	// place of the client's (idValue: its own id, or the client's made
	// unique), or nil when the client's own goes: set on the outbound
	// request by rewrite.
	idValue []string
	// realIP is the X-Real-IP value the backend receives in place of the
	// client's, or nil for none (setClientAddress; shared, never modified).
	realIP []string
	// inHeader is the client's header while forward hides it from
	// ReverseProxy (hideHeader), else nil.
	inHeader http.Header
	// fwdCtx is the context the request is forwarded with, made in one
	// allocation with idValue when exgate made the id (nextValue), else
	// by forward; rewrite sets it on the outbound request and drops it.
	fwdCtx *stateContext
}

// limitState is what a request's limits decided.
type limitState struct {
	limitCharge
	decision limiter.Decision
}

// limitCharge is whether and where a request's limits charged it.
type limitCharge struct {
	limitsDecided bool   // the route's limits were decided
	charged       *Route // the route whose limits charged the request (its own, or a bulk's target), once they allowed it
	cost          int64  // what the request was charged in each of them
	// legacyFields is whether the answer's rate-limit fields are in the
	// legacy style (setLimitFields), which the backend's are merged with.
	legacyFields bool
}

// upstreamCall is the request's call to the backend.
type upstreamCall struct {
	upID     string        // the X-Request-ID sent to the backend when it is not id (see forward)
	upStart  time.Time     // when the request went to the backend, or zero
	upDone   bool          // the upstream duration was observed
	upEnd    time.Time     // when the backend answered with headers, or failed
	upDur    time.Duration // how long the backend took to answer with headers, or to fail
	upStatus int           // the backend's status, or 0
	upErr    error
	deadline deadlineEntry // its place in its route's deadline queue while under way
	// cut cancels the call, with its cause, while it is under way
	// (forward): a backend that sends too many 1xx answers (passInterim).
	cut context.CancelCauseFunc
	// inst is the backend instance the request is under way at, from its
	// choice (admit, else forward) to end (fleet.go); moved, that the
	// request moved to another instance (its round trip is not one
	// instance's); reached, that an instance it moved from may have read
	// it (a GET or HEAD that failed there after its connect), so that it
	// is charged whatever its last instance did; sentBody the body sent
	// (read whole; an order's canonical form), sent again when the
	// request moves; abandoned, that the call ended for a reason of its
	// own (its client went away).
	inst      *upstream.Instance
	peeked    *upstream.Instance // the instance admitEarly asked, where pickInstance sends the request
	moved     bool
	reached   bool
	sentBody  []byte
	abandoned bool
	// connWatched says that the call watches for its connection (an
	// order whose claim is held: watchConn), and connGot that net/http
	// had one for it, on which alone it writes a request: a watched call
	// that failed without one sent nothing (nothingSent).
	connWatched, connGot bool
}

// holds is what a request holds of what clients share, each charged to
// its client's share (docs/pools.md) and given back when the request ends
// (releaseHolds): the pooled buffers its body was read into and the bytes
// of the body budget they take, its backend slot and its route's.
type holds struct {
	bodyBuf    *[]byte              // pooled buffer holding the client's body (its start), or nil
	bodyMore   []*[]byte            // pooled buffers holding the rest of the client's body, while it is read
	buffered   int64                // bytes of the buffer budget this request holds
	bodyReader chargedBody          // the body being read whole, charged to the client's share
	slot       bool                 // the request holds a backend slot (admission)
	slotCtl    *overload.Controller // the instance's limit slot was taken from
	routeSlot  *routeAdmission      // the route whose own in-flight cap counts the request
}

// traceState is the request's spans, while tracing is on (trace.go).
type traceState struct {
	sc       trace.SpanContext // the server span's context, sampled or not
	span     trace.Span        // the server span, when the request is sampled (else nil)
	traceCtx context.Context   // the context of span, for the backend call's
	rec      bool              // span records: the request is sampled
	upSpan   trace.Span        // the backend call's client span, when recording
}

// clear makes st zero, as ServeHTTP takes it from the pool: the parts of
// the features the gateway has, since no request writes those of the
// others (a claim needs duplicate protection, a decision the limits, spans
// a tracer), and the 2 KiB of the first two need no clearing then. While
// the collector marks, clearing a pointer costs a write barrier: the
// trace's 8 are not cleared without a tracer.
func (g *Gateway) clear(st *requestState) {
	st.requestCore = requestCore{}
	if g.idem != nil {
		st.claim = claimState{}
	}
	if g.limits != nil {
		st.limitCharge = limitCharge{}
		st.decision.Reset() // its outcomes recorded only: most of its kilobyte is never written
	}
	if g.tracer != nil {
		st.traceState = traceState{}
	}
}
