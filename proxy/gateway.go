// Package proxy is exgate's HTTP front: the traffic server, the compiled
// route table, the request pipeline (Gateway.ServeHTTP: a named step for
// each check — path, route, auth, limits, the order, its identifier,
// admission — then the reverse proxy to the backend), and WriteError, the
// one function that writes the answers exgate gives itself.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/internal/logshare"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/share"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/traceheader"
	"github.com/exgate/exgate/upstream"
	"github.com/exgate/exgate/validate"
)

// StatusClientClosed is the status logged (never sent) when the client went
// away before exgate could answer, as NGINX logs it.
const StatusClientClosed = 499

// Options are a Gateway's dependencies. Transport, Fleet and Rules are
// required (New refuses nil); every other nil field has the meaning its
// comment documents.
type Options struct {
	// Logger receives the access log and errors. Nil means no logging.
	Logger *zap.Logger
	// Evidence receives the access log lines that are evidence — of an
	// order or a cancel (a route of class place or cancel), and of every
	// refusal (a status of 400 or more, or an answer exgate gave itself)
	// — which log sampling must never drop; the composition root gives it
	// the logger's core without the sampler. Nil means Logger.
	Evidence *zap.Logger
	// Now is the clock. Nil means time.Now, a request's later times then
	// read as time elapsed since its start (nowSince): give the process's
	// wall clock as nil, not as time.Now, which is read whole each time.
	Now func() time.Time
	// Transport carries requests to the backend
	// (upstream.NewTransport(cfg.Upstream)). Required.
	Transport http.RoundTripper
	// Fleet holds the services routes forward to; the caller runs its
	// sources and health checks (Fleet.Run). Required.
	Fleet *upstream.Fleet
	// Limits enforces the rate limits. Nil means no route is limited.
	Limits *limiter.Enforcer
	// Rules are the compiled rate limits (limiter.Compile). Required.
	Rules *limiter.Rules
	// Metrics receives the request, upstream and rate-limit series. Nil
	// means no metrics.
	Metrics *metrics.Metrics
	// Validator checks the bodies of routes with validate: order. Nil
	// means those bodies are forwarded unchecked.
	Validator *validate.Validator
	// Verifier verifies JWT access tokens on routes that read tokens
	// (identity.verify). Nil means tokens are opaque.
	Verifier *identity.Verifier
	// Idempotency protects order identifiers against duplicate placement.
	// Nil means no duplicate protection. It needs Limits (for token ids)
	// or a Verifier (for account keys). When it is an idempotency.Joiner,
	// an order's claim rides in the round trip that decides its limits
	// (the Limits' store must then be a Redis limiter on the same Redis,
	// built with idempotency.ClaimFunc).
	// Each call to it is bounded by idempotency.timeout, and the largest
	// response recorded for replay is idempotency.max_response_bytes (a
	// longer one is recorded as an unknown outcome).
	Idempotency idempotency.Store
	// Top counts requests and refusals of limited routes by identity and
	// client address for the admin console. Nil means none.
	Top *topk.Tracker
	// Tracer starts each request's spans (tracing.Provider.Tracer); whose
	// trace context a request continues is tracing.trust_incoming. Nil
	// means tracing is off: no span is started, no trace context read, and
	// a client's trace context reaches the backend only when
	// tracing.trust_incoming trusts it (removed otherwise).
	Tracer Tracer
}

// Gateway is the traffic handler: it answers bad requests itself and
// forwards the rest to the backend. It is safe for concurrent use.
type Gateway struct {
	plan        atomic.Pointer[requestPlan]
	limits      *limiter.Enforcer
	top         *topk.Tracker
	verifier    *identity.Verifier
	idem        idempotency.Store
	joiner      idempotency.Joiner // idem, when its claims ride in the limits' round trip
	idemTimeout time.Duration
	idemMaxResp int
	metrics     *metrics.Metrics
	unrouted    *metrics.RouteMetrics
	fleet       *upstream.Fleet
	rp          httputil.ReverseProxy // what each pooled state's proxy is made of (newState), but its Rewrite
	transport   http.RoundTripper
	// ownTransports is set when a service has a Transport of its own
	// (upstream.Service.RoundTripper): forward then looks it up.
	ownTransports bool
	proxies       *clientip.Proxies // client_ip: whose forwarding header names a request's client
	log           *zap.Logger
	evidence      *zap.Logger     // the access log lines sampling must keep
	logShare      *logshare.Share // each client's share of the refusal lines (log.refusals_per_client), nil when off
	access        bool
	now           func() time.Time
	monotonic     bool // now is time.Now: a request's later times are read as time elapsed (nowSince)
	ids           *requestIDs
	maxHeader     int64
	maxBody       int64
	checkIDs      bool // upstream.check_response_id
	// hidden are the fields of the backend's answers no client gets
	// (upstream.hide_headers), in canonical form.
	hidden    []string
	errHeader *apierror.Error
	errBody   *apierror.Error
	budget    *share.Pool // bytes of order bodies read whole, shared by clients
	draining  atomic.Bool
	pool      sync.Pool // *requestState
	deadlines deadlineQueues
	lastHost  atomic.Pointer[[1]string] // the X-Forwarded-Host value last made (forwardedHost)
	// tracer starts the requests' spans; nil when tracing is off
	// (trace.go).
	tracer    Tracer
	formats   traceheader.Formats     // tracing.propagators
	spanStart []trace.SpanStartOption // a server span's start options, built once
	trust     uint8                   // tracing.trust_incoming
	refusals  *recentRefusals         // the sampled refusals the console lists
}

// New builds a Gateway from a validated configuration. It refuses options
// without a Transport, a Fleet or Rules.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	switch {
	case opts.Transport == nil:
		return nil, errors.New("proxy: Options.Transport is nil")
	case opts.Fleet == nil:
		return nil, errors.New("proxy: Options.Fleet is nil")
	case opts.Rules == nil:
		return nil, errors.New("proxy: Options.Rules is nil")
	}
	g := &Gateway{
		limits:      opts.Limits,
		top:         opts.Top,
		verifier:    opts.Verifier,
		idem:        opts.Idempotency,
		idemTimeout: cfg.Idempotency.Timeout,
		idemMaxResp: int(cfg.Idempotency.MaxResponseBytes),
		metrics:     opts.Metrics,
		unrouted:    opts.Metrics.Unrouted(),
		fleet:       opts.Fleet,
		transport:   opts.Transport,
		log:         opts.Logger,
		access:      cfg.Log.Access,
		now:         opts.Now,
		ids:         newRequestIDs(),
		maxHeader:   int64(cfg.Server.MaxHeaderBytes),
		maxBody:     int64(cfg.Server.MaxBodyBytes),
		checkIDs:    cfg.Upstream.CheckResponseID,
		hidden:      canonicalNames(cfg.Upstream.HideHeaders),
		tracer:      opts.Tracer,
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	g.evidence = opts.Evidence
	if g.evidence == nil {
		g.evidence = g.log
	}
	if rs := cfg.Log.RefusalsPerClient; g.access {
		g.logShare = logshare.New(logshare.Options{
			Rate: rs.Rate.N, Period: rs.Rate.Period, Burst: int64(cmp.Or(rs.Burst, int(rs.Rate.N))),
			Log: g.evidence, Suppressed: g.metrics.LogRefusalSuppressed,
		})
	}
	if g.now == nil {
		g.now, g.monotonic = time.Now, true
	}
	for _, svc := range g.fleet.Services() {
		g.ownTransports = g.ownTransports || svc.RoundTripper(nil) != nil
	}
	g.metrics.SetFleetSource(fleetStatus{g.fleet})
	g.proxies = clientip.New(cfg.ClientIP)
	g.joiner, _ = opts.Idempotency.(idempotency.Joiner)
	g.plan.Store(g.newPlan(cfg, opts.Rules, opts.Validator))
	g.errHeader = headerTooLarge(g.maxHeader)
	g.errBody = apierror.TooLarge(g.maxBody)
	g.budget = share.NewPool(int64(cfg.Server.MaxBufferedBytes))
	g.metrics.SetBodyBudgetSource(g.budget)
	g.rp = httputil.ReverseProxy{
		Transport:    fleetTransport{g},
		BufferPool:   newBufferPool(),
		ErrorHandler: g.proxyError,
		ErrorLog:     zap.NewStdLog(g.log.Named("reverseproxy")),
	}
	g.pool.New = func() any { return g.newState() }
	if err := g.setTracing(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

// requestPlan is the plan every request follows, compiled from the
// configuration and replaced whole by a reload: the route table with each
// route's compiled limits, the CORS policy, the order validator and the
// overload settings. A request follows the plan it started with
// throughout.
type requestPlan struct {
	cors      *corsPolicy // nil when off
	table     *table
	rules     *limiter.Rules
	validator *validate.Validator
	admission admissionPlan
	v6Prefix  int // client_ip.ipv6_prefix: the IPv6 addresses that count as one client
}

// newPlan compiles the route table, attaching to each route its compiled
// limits and its metric children, resolved once here rather than per
// request.
func (g *Gateway) newPlan(cfg *config.Config, rules *limiter.Rules, v *validate.Validator) *requestPlan {
	t := compileTable(cfg)
	all := t.allRoutes()
	caps := map[string]*share.Pool{} // the routes' caps in the plan in force, by name
	if prev := g.plan.Load(); prev != nil {
		for _, r := range prev.table.allRoutes() {
			if r.admission != nil && r.admission.inflight != nil {
				caps[r.Name] = r.admission.inflight
			}
		}
	}
	for _, r := range all {
		if r.Config.Validate == config.ValidateBulk {
			r.bulk = &bulkTargets{orders: t.named(r.Config.Bulk.Orders), cancels: t.named(r.Config.Bulk.Cancels)}
		}
		r.limits = rules.Route(r.Name)
		r.service = g.fleet.Service(r.Config.Service)
		r.split, r.sticky = g.newSplit(r.Config)
		r.metrics = g.metrics.Route(r.Name)
		r.deadlines = g.deadlines.queue(r.Timeout)
		if g.tracer != nil {
			r.trace = newRouteTrace(r)
		}
		g.compileAdmission(r, caps[r.Name])
		if g.metrics == nil || !r.limits.Limited() {
			continue
		}
		for i, name := range r.limits.LimitNames() {
			tiers := r.limits.LimitTiers(i)
			byTier := make(map[string]*metrics.LimitMetrics, len(tiers))
			for _, tier := range tiers {
				byTier[tier] = g.metrics.Limit(r.Name, name, tier)
			}
			r.limitMetrics = append(r.limitMetrics, byTier)
		}
	}
	return &requestPlan{table: t, rules: rules, validator: v, cors: compileCORS(cfg.CORS), admission: g.newAdmissionPlan(cfg),
		v6Prefix: cfg.ClientIP.IPv6Prefix}
}

// Reload replaces the route table, the rate limits and the order
// validator with those of cfg, rules and v, without dropping a request:
// requests under way finish with the plan they started with. Only routes,
// limits, tiers, header style and validation rules change; listeners,
// timeouts of the server, the upstream, trusted proxies and the stores are
// fixed at start (the caller should say so when they differ).
func (g *Gateway) Reload(cfg *config.Config, rules *limiter.Rules, v *validate.Validator) {
	g.plan.Store(g.newPlan(cfg, rules, v))
}

// Rules returns the rate limits in force.
func (g *Gateway) Rules() *limiter.Rules { return g.plan.Load().rules }

// SetDraining marks the gateway as shutting down: /readyz answers 503 from
// then on so load balancers stop sending traffic, and every answer closes
// its connection (Connection: close; a GOAWAY over HTTP/2) so that
// clients on keep-alive connections move to a ready replica before the
// listener closes.
func (g *Gateway) SetDraining() { g.draining.Store(true) }

// Draining reports whether SetDraining was called.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// CloseIdleConnections closes idle backend connections, those of the
// services' own Transports too.
func (g *Gateway) CloseIdleConnections() {
	rts := []http.RoundTripper{g.transport}
	for _, svc := range g.fleet.Services() {
		rts = append(rts, svc.RoundTripper(nil))
	}
	for _, rt := range rts {
		if t, ok := rt.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
}

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

// evidence reports whether the request's access log line must survive
// log sampling: an order or a cancel, or a refusal — by exgate or the
// backend, 499 included.
func (st *requestState) evidence() bool {
	return st.rw.status >= 400 || st.code != "" || st.route != nil && st.route.evidence
}

// ownRefusal reports whether the request was refused by exgate before it
// went to the backend, and without its limits letting it through: its
// access log line is charged to its client's share of such lines
// (log.refusals_per_client). The line of a request that went to the
// backend, whatever its status, never is, nor that of a request its
// limits allowed (then answered by duplicate protection, shed, or
// refused by validation), which the limits bound.
func (st *requestState) ownRefusal() bool {
	return st.upStart.IsZero() && (st.code != "" || st.rw.status >= 400) &&
		!(st.limitsDecided && st.decision.Allowed)
}

// rewrite turns the inbound request into the outbound one, st's: sent
// with st's forwarded context (forward), the client's request keeping its
// own. The inbound URL
// path is already the route's canonical path.
func (g *Gateway) rewrite(st *requestState, pr *httputil.ProxyRequest) {
	out := pr.Out // its URL is the instance's, set by forward (target)
	if st.fwdCtx != nil {
		setContext(out, st.fwdCtx)
		st.fwdCtx = nil
	}
	out.Host = ""
	// The query as the client sent it, which checkQuery held to what
	// ReverseProxy forwards unchanged: ReverseProxy re-encodes every query
	// (sorted, escaped anew, past its bound dropped whole) when GODEBUG
	// names urlmaxqueryparams, whatever its value.
	out.URL.RawQuery = pr.In.URL.RawQuery
	closeAfterHead(out)
	src := out.Header // ReverseProxy's copy of the client's header
	if st.inHeader != nil {
		src, pr.In.Header = st.inHeader, st.inHeader // hidden by forward: out's is empty (hideHeader)
	}
	keepInMemoryBody(pr)
	dropRequestTrailers(out)
	p := g.forwardedPeer(pr.In, st)
	// Tracing off, a client's trace context is still not the backend's
	// to sample by or read baggage from (tracing.trust_incoming);
	// scanHeader saw the W3C fields.
	dropTrace := g.tracer == nil && (!st.noDrops || g.formats.NonW3C()) && !g.trustsTraceOf(p)
	out.Header = g.backendHeader(pr, st, src, p, dropTrace)
	// What httputil.ProxyRequest.SetXForwarded sets, from the
	// connection's peer worked out once per connection, with shared
	// header values instead of new ones per request. The client's
	// (and Forwarded) are not copied (sentAs).
	if p.ok {
		xff := p.realIP
		switch {
		case !p.trusted: // from anyone else, the chain is dropped
		case g.proxies.Forwarded():
			// The trusted proxies wrote Forwarded: the chain read there,
			// never the X-Forwarded-For they passed through unread.
			if fwd := pr.In.Header["Forwarded"]; len(fwd) > 0 {
				xff = []string{g.proxies.Chain(p.addr, fwd)}
			}
		default:
			// Keep the chain the trusted proxy built and append the peer.
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
				xff = []string{strings.Join(prior, ", ") + ", " + p.realIP[0]}
			}
		}
		out.Header["X-Forwarded-For"] = xff
	}
	out.Header["X-Forwarded-Host"] = g.forwardedHost(pr.In.Host)
	proto := forwardedHTTP
	if pr.In.TLS != nil {
		proto = forwardedHTTPS
	}
	if p.trusted {
		switch v := g.proxies.Proto(pr.In.Header); {
		case asciiEqualFold(v, "http"):
			proto = forwardedHTTP
		case asciiEqualFold(v, "https"):
			proto = forwardedHTTPS
		}
	}
	out.Header["X-Forwarded-Proto"] = proto
	if _, ok := out.Header["User-Agent"]; !ok {
		// What ReverseProxy sets after the rewrite (so that the
		// Transport sends none of Go's own), in a shared value.
		out.Header["User-Agent"] = noUserAgent
	}
}

// setBackendHeaders sets in h, the outbound request's header, the headers
// exgate sends the backend in place of the client's (which sentAs leaves
// out): X-Request-ID when exgate chose the id sent (idValue), and
// X-Real-IP, the client address (none when it is not known). They are set
// on the outbound request alone, in values never modified: the inbound
// header stays as the client sent it.
func (st *requestState) setBackendHeaders(h http.Header) {
	if st.idValue != nil {
		h["X-Request-Id"] = st.idValue
	}
	if st.realIP != nil {
		h["X-Real-Ip"] = st.realIP
	}
}

// forwardedPeer returns the peer of in, a request forward sends: the one
// setClientAddress derived (st's), else the connection's.
func (g *Gateway) forwardedPeer(in *http.Request, st *requestState) *peer {
	if st.peer != nil {
		return st.peer
	}
	return g.peerOf(in)
}

// forwardedHost returns the X-Forwarded-Host value of host: the one last
// made, shared by the requests that name the same host (almost all do:
// a gateway serves a few names), never modified; a new one for another.
func (g *Gateway) forwardedHost(host string) []string {
	if v := g.lastHost.Load(); v != nil && v[0] == host {
		return v[:]
	}
	v := &[1]string{host}
	g.lastHost.Store(v)
	return v[:]
}

// Shared X-Forwarded-Proto values and the empty User-Agent of a request
// that came without one, never modified.
var (
	forwardedHTTP  = []string{"http"}
	forwardedHTTPS = []string{"https"}
	noUserAgent    = []string{""}
)

// modifyResponse refuses a response with a status HTTP does not define,
// one that switches protocols or one that names another request's id,
// leaves the client one set of legacy rate-limit fields, records the
// response of a claimed order and adds the request id to backend
// responses that lack one. st is the state of the request res answers:
// the reverse proxy calling it is the state's own (newState).
func (g *Gateway) modifyResponse(st *requestState, res *http.Response) error {
	st.rw.endHints() // exgate's own fields back, after a 1xx
	if st.rw.interims > maxInterim {
		return errTooManyInterim // an answer that came as the call was cut for its 1xx answers
	}
	if err := checkStatus(res); err != nil {
		return err
	}
	if err := checkNoSwitch(res); err != nil {
		return err
	}
	// The backend's X-Request-ID, read once: nothing below writes it
	// before answerWithID.
	id, idSent := res.Header["X-Request-Id"]
	if g.checkIDs {
		if err := checkResponseID(res, id); err != nil {
			return err // before anything is recorded: the answer is not this request's
		}
	}
	if g.plan.Load().cors != nil {
		dropBackendCORS(res.Header)
	}
	g.hide(res.Header)
	mergeLegacyRateLimit(res, st.rw.Header())
	if err := g.recordResponse(st, res); err != nil {
		return err
	}
	if len(id) == 0 || id[0] == "" {
		answerWithID(st, res, idSent) // none, or an empty one (the header as res.Header.Get reads it)
	}
	moveHeader(st.rw.Header(), res.Header)
	return nil
}

// hide removes from h, a backend's answer's or 1xx's header, the fields
// upstream.hide_headers names: before it is recorded for replay or
// reaches the client.
func (g *Gateway) hide(h http.Header) {
	for _, k := range g.hidden {
		delete(h, k)
	}
}

// canonicalNames returns names in canonical form, as http.Header keys
// them.
func canonicalNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return out
}

// moveHeader moves every field of from, the backend's response header,
// that out, the client's answer's, does not have yet into out, value
// slice and all, where ReverseProxy would copy each value after ModifyResponse
// (copyHeader: Header.Add, an allocation and a key check per value; a
// GET's Date, Content-Length and X-Request-Id were three allocations). It
// is what copyHeader makes of them: keys as the Transport read them are
// canonical already, and a field the answer has (exgate's own) is left in
// res.Header for copyHeader to add to, as before (so is a field without
// a value, which copyHeader leaves out). Nothing else holds the
// moved slices once they are out of res.Header (each the Transport's own,
// of capacity one per field or grown by append: an append to one never
// writes into another). The Content-Type of an event stream stays too:
// ReverseProxy reads it from res.Header after the copy to flush the stream
// as it comes; any other moves, so that ReverseProxy finds none and parses
// none (mime.ParseMediaType's parameter map, an allocation per answer) and
// copies none.
func moveHeader(out, from http.Header) {
	for k, v := range from {
		if _, ok := out[k]; ok || len(v) == 0 || k == "Content-Type" && isEventStream(v[0]) {
			continue // copyHeader's to add to, nothing to copy, or read later
		}
		out[k] = v
		delete(from, k)
	}
}

// isEventStream reports whether ReverseProxy takes an answer of Content-Type
// ct for an event stream, which it flushes as it comes: ct's media type,
// lowercased as mime.ParseMediaType makes it, is text/event-stream
// (ReverseProxy.flushInterval). Nothing is allocated for a type in lower
// case, and a type shorter than that is not read: only ASCII letters
// lowercase to its ASCII, byte for byte.
func isEventStream(ct string) bool {
	const eventStream = "text/event-stream"
	base, _, _ := strings.Cut(ct, ";")
	if len(base) < len(eventStream) {
		return false
	}
	return strings.TrimSpace(strings.ToLower(base)) == eventStream
}

// answerWithID gives a response the backend sent without an X-Request-ID
// the one sent with its request (the client's own, once clientsID has
// given it back). It goes straight into the client's answer, whose header
// the reverse proxy copies the backend's into next: set on res, net/http
// would copy it again, into a slice of its own. sent is whether the backend
// sent the field (empty): it is removed from res then.
func answerWithID(st *requestState, res *http.Response, sent bool) {
	id := res.Request.Header["X-Request-Id"]
	if len(id) != 1 {
		return
	}
	if sent {
		delete(res.Header, "X-Request-Id") // an empty value of the backend's
	}
	st.rw.Header()["X-Request-Id"] = id // the outbound request's, never modified
}

// proxyError maps a failure to reach the backend to an answer: client gone
// → nothing (logged as 499), timeout → 504, body over the limit → 413,
// anything else → 502.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rw, ok := w.(*respWriter)
	if !ok { // cannot happen: the gateway always passes its own writer
		WriteError(w, "", errBadGateway)
		return
	}
	st := rw.st
	rw.endHints() // exgate's own fields back, after a 1xx
	if rw.interims > maxInterim {
		err = errTooManyInterim // the call cut for them (passInterim): context.Canceled, or this, its cause
	}
	st.upErr = err
	g.observeUpstream(st)
	g.settleFailed(st, err)
	st.abandoned = st.clientCx.Err() != nil
	if st.route != nil {
		st.route.metrics.UpstreamError(metrics.ClassifyUpstreamError(err, st.clientCx.Err() != nil))
	}
	switch {
	case st.clientCx.Err() != nil:
		rw.status = StatusClientClosed
	case upstream.NothingSent(err) && st.reached:
		// The last instance took no connection, but one before it read
		// the request and failed it: it was served, and its charge stays.
		g.refuse(st, r, sentFailed(r, errBadGateway, errWriteBadGateway))
	case upstream.NothingSent(err):
		// No instance took a connection: nothing of the request was
		// sent, and it costs its client nothing.
		g.unavailable(st, r, errUpstreamUnavailable)
	case metrics.IsTimeout(err):
		g.refuse(st, r, sentFailed(r, errGatewayTimeout, errWriteTimeout))
	case errors.As(err, new(brokenAnswer)):
		g.refuse(st, r, errOrderAnswerBroken)
	default:
		g.refuse(st, r, sentFailed(r, errBadGateway, errWriteBadGateway))
	}
}

// sentFailed returns the answer to r, sent to the backend and failed
// there: read for a read (GET, HEAD), write for anything else, whose
// outcome is unknown.
func sentFailed(r *http.Request, read, write *apierror.Error) *apierror.Error {
	if upstream.KindOf(r.Method) == upstream.Read {
		return read
	}
	return write
}

// observeUpstream records, once, how long the backend took to answer with
// headers or to fail.
func (g *Gateway) observeUpstream(st *requestState) {
	if st.upDone || st.upStart.IsZero() || st.route == nil {
		return
	}
	st.upDone = true
	st.upEnd = g.nowSince(st.upStart)
	st.upDur = st.upEnd.Sub(st.upStart)
	if st.rec {
		st.route.metrics.ObserveUpstreamTraced(st.upDur, st.span.SpanContext().TraceID())
		return
	}
	st.route.metrics.ObserveUpstream(st.upDur)
}

// finish ends the request and returns st to the pool. A panic from a
// handler is logged; http.ErrAbortHandler (the backend broke off a
// response already under way) is passed on so the server drops the
// connection, anything else is answered 500.
func (g *Gateway) finish(st *requestState, r *http.Request) {
	switch p := recover(); {
	case p == nil:
	case p == http.ErrAbortHandler:
		if st.rw.status == 0 {
			st.rw.status = StatusClientClosed
		}
		if st.route != nil {
			kind := metrics.UpstreamReset
			if st.clientCx.Err() != nil {
				kind = metrics.UpstreamClientGone
			}
			st.route.metrics.UpstreamError(kind)
		}
		g.end(st, r, zap.Bool("aborted", true))
		panic(p)
	default:
		g.log.Error("panic serving request",
			zap.String("request_id", st.id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		if st.rw.status == 0 {
			g.refuse(st, r, apierror.Internal())
		}
	}
	if st.rw.status == 0 {
		st.rw.status = http.StatusOK // net/http's answer when nothing was written
	}
	g.end(st, r)
	g.clear(st)
	g.pool.Put(st)
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

// end gives back what the request holds — a claim still held here is
// settled as of unknown outcome (it may have been placed), then the
// backend slot, the body buffers and their budget — records it in the
// metrics and the access log, ends its spans and its call at its backend
// instance.
func (g *Gateway) end(st *requestState, r *http.Request, extra ...zap.Field) {
	g.settle(st, settleUnknown, idempotency.Record{})
	g.releaseHolds(st)
	var done time.Time // when the request ended, read once for all that record it
	if g.metrics != nil || g.access || st.rec {
		done = g.nowSince(st.start)
	}
	g.observe(st, r, done)
	g.logAccess(st, r, done, extra...)
	if st.rec {
		g.endSpans(st, r, done)
	}
	g.instanceDone(st, r)
}

// nowSince returns the time now on the gateway's clock, for a request
// that read t on it earlier (its start, its call's start): with time.Now,
// t and the time elapsed since, one read of the monotonic clock where
// time.Now reads the wall clock too; with a clock of the caller's
// (Options.Now), that clock.
func (g *Gateway) nowSince(t time.Time) time.Time {
	if g.monotonic {
		return t.Add(time.Since(t))
	}
	return g.now()
}

// sinceEpoch returns t, a time nowSince gave, as the deadline queues count
// time (monotonic, since deadlineEpoch), reading no clock when t carries
// the monotonic reading.
func (g *Gateway) sinceEpoch(t time.Time) time.Duration {
	if g.monotonic {
		return t.Sub(deadlineEpoch)
	}
	return time.Since(deadlineEpoch)
}

// releaseHolds gives back what st holds of the shared pools: its backend
// slot and its route's, the pooled buffers its body was read into and the
// bytes of the body budget they took.
func (g *Gateway) releaseHolds(st *requestState) {
	g.releaseSlot(st)
	st.releaseBodyBuffers()
	g.budget.Give(st.client, st.buffered)
}

// observe records the request, ended at done, in the metrics.
func (g *Gateway) observe(st *requestState, r *http.Request, done time.Time) {
	g.metrics.DecInflight()
	if g.metrics == nil {
		return
	}
	rm := g.unrouted
	if st.route != nil {
		rm = st.route.metrics
	}
	if st.rec {
		rm.ObserveRequestTraced(r.Method, st.rw.status, done.Sub(st.start), st.span.SpanContext().TraceID())
		return
	}
	rm.ObserveRequest(r.Method, st.rw.status, done.Sub(st.start))
}

// logAccess writes the request's access log line; done is when it ended.
func (g *Gateway) logAccess(st *requestState, r *http.Request, done time.Time, extra ...zap.Field) {
	if !g.access {
		return
	}
	lg := g.log
	if st.evidence() {
		lg = g.evidence
	}
	ce := lg.Check(zapcore.InfoLevel, "request")
	if ce == nil || g.logShare != nil && st.ownRefusal() && !g.withinLogShare(st, r, done) {
		return
	}
	route := "default"
	if st.route != nil {
		route = st.route.Name
	}
	fp := accessFields.Get().(*[]zap.Field)
	fields := append((*fp)[:0],
		zap.String("request_id", st.id),
		zap.String("route", route),
		zap.String("method", r.Method),
		zap.String("path", st.path),
		zap.String("protocol", r.Proto),
		zap.Int("status", st.rw.status),
		zap.Duration("duration", done.Sub(st.start)),
		zap.Int64("bytes", st.rw.bytes),
		zap.String("peer", r.RemoteAddr),
	)
	if ua := r.Header["User-Agent"]; len(ua) > 0 {
		fields = append(fields, zap.String("user_agent", userAgent(ua[0], r)))
	}
	if st.code != "" {
		// Why exgate answered itself (duplicate_protection_unavailable,
		// rate_limit_unavailable, throttled, …): the status alone does
		// not tell one 503 from another.
		fields = append(fields, zap.String("code", st.code))
	}
	if st.authFailed != "" {
		fields = append(fields, zap.String("auth_failure", st.authFailed))
	}
	if st.replayed {
		fields = append(fields, zap.Bool("replayed", true))
	}
	if st.addr.IsValid() {
		fields = append(fields, zap.String("client", st.addr.String())) // as zap.Stringer writes it, without boxing the address
	}
	if a := st.caller.id.Account; a != "" {
		fields = append(fields, zap.String("account", a[:12])) // an HMAC prefix, never the user id
	}
	if st.limitsDecided {
		fields = g.limitFields(fields, &st.decision)
	}
	if st.inst != nil {
		fields = append(fields, zap.String("upstream_instance", st.inst.Addr))
	}
	if st.upDone {
		if st.upStatus != 0 {
			fields = append(fields, zap.Int("upstream_status", st.upStatus))
		}
		fields = append(fields, zap.Duration("upstream_duration", st.upDur))
	}
	if st.upErr != nil {
		fields = append(fields, zap.NamedError("upstream_error", st.upErr))
	}
	if st.sc.IsValid() {
		fields = traceFields(fields, st)
	}
	fields = append(fields, extra...)
	ce.Write(fields...)
	clear(fields) // the line's strings, for the collector
	*fp = fields[:0]
	accessFields.Put(fp)
}

// accessFields holds the field slices of access log lines, reused from
// one line to the next, where each line made one of 1.5 KiB: a core
// encodes a line's fields while its Write runs (zap's JSON and console
// cores, its sampler and tee pass them on, zaptest's observer copies
// them), and none keeps the slice.
var accessFields = sync.Pool{New: func() any {
	s := make([]zap.Field, 0, 28)
	return &s
}}

// maxUserAgent bounds the user agent an access log line carries.
const maxUserAgent = 256

// userAgent is the user agent as the access log writes it: at most
// maxUserAgent bytes, and never a token of the request's Authorization
// headers (all of them: a request may send two, and is refused for it),
// should a client have put it there.
func userAgent(ua string, r *http.Request) string {
	for _, auth := range r.Header["Authorization"] {
		if _, t, ok := strings.Cut(auth, " "); ok && len(t) >= 8 && strings.Contains(ua, t) {
			ua = strings.ReplaceAll(ua, t, "[token]")
		}
	}
	if len(ua) > maxUserAgent {
		ua = ua[:maxUserAgent]
	}
	return ua
}

// limitFields adds the rate-limit decision to an access log line: the
// token id's first 12 hex digits (never the token), the tier, and the
// limit that decided (Decision.Deciding: the one that denied, else the
// one closest to denial, as the RateLimit headers and the trace name it).
func (g *Gateway) limitFields(fields []zap.Field, d *limiter.Decision) []zap.Field {
	if d.TokenID != "" {
		fields = append(fields, zap.String("token_id", d.TokenID[:12]))
	}
	if d.Tier != "" {
		fields = append(fields, zap.String("tier", d.Tier))
	}
	if d.Demoted {
		fields = append(fields, zap.Bool("token_demoted", true))
	}
	if o := d.Deciding(); o != nil {
		fields = append(fields, zap.String("limit", o.Limit), zap.String("limit_decision", o.Decision.String()),
			zap.Int64("limit_remaining", o.Result.Remaining))
		if o.Fallback != "" {
			fields = append(fields, zap.String("limit_fallback", o.Fallback))
		}
		if d.ExceedsBurst {
			fields = append(fields, zap.Int64("limit_max_cost", d.MaxCost))
		}
	}
	return fields
}

// respWriter records the status and size of a response.
type respWriter struct {
	http.ResponseWriter
	st     *requestState
	status int
	bytes  int64
	// hinting is set while the backend's answer is awaited (forward, until
	// endHints): a 1xx it sends meanwhile (103 Early Hints) reaches the
	// client through ReverseProxy, which adds the 1xx's fields to the
	// answer's header, writes it and clears the header (proxy/interim.go).
	hinting bool
	// own is the header as it stood when ReverseProxy first read it for a
	// 1xx, before adding the 1xx's fields: exgate's own (RateLimit, CORS),
	// which the final answer gets back (endHints), without the 1xx's.
	own http.Header
	// interims counts the backend's 1xx answers (passInterim); http10 is
	// set for a client speaking HTTP/1.0, which gets none of them.
	interims int
	http10   bool
}

// WriteHeader records the final status; informational ones pass through,
// their fields filtered as a final answer's are (hint). The first final
// status of a proxied request marks the backend's answer. A final answer
// without a Content-Type is written without one; one after a 1xx gets
// back exgate's own fields, which ReverseProxy cleared (endHints).
func (w *respWriter) WriteHeader(code int) {
	if code < 200 {
		if !w.passInterim() {
			return
		}
		w.hint()
	} else {
		w.endHints()
	}
	if w.status == 0 && code >= 200 {
		w.status = code
		if h := w.ResponseWriter.Header(); h["Content-Type"] == nil {
			// An answer the backend sent without a type goes without
			// one: net/http would guess one from the body (text/html
			// for a body that starts like HTML).
			h["Content-Type"] = nil
		}
		if !w.st.upStart.IsZero() && !w.st.upDone {
			w.st.upStatus = code // the backend's answer, as ReverseProxy writes it
			w.st.clientsID()
		}
		w.st.g.observeUpstream(w.st)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records the bytes written.
func (w *respWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush flushes the underlying writer when it can.
func (w *respWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bufferPool is the ReverseProxy's pool of copy buffers. It holds each
// buffer by a pointer to its array, which an interface holds without an
// allocation (a slice would be boxed), in a sync.Pool: each processor
// takes and gives back buffers of its own, where a channel's one lock
// went from core to core with every response.
type bufferPool struct{ p *sync.Pool }

// proxyBufSize is the size of a copy buffer.
const proxyBufSize = 32 << 10

func newBufferPool() bufferPool { return bufferPool{p: new(sync.Pool)} }

// Get returns a buffer from the pool or a new one.
func (p bufferPool) Get() []byte {
	if b, ok := p.p.Get().(*[proxyBufSize]byte); ok {
		return b[:]
	}
	return make([]byte, proxyBufSize)
}

// Put returns a buffer to the pool; one of another size is dropped.
func (p bufferPool) Put(b []byte) {
	if cap(b) != proxyBufSize {
		return
	}
	p.p.Put((*[proxyBufSize]byte)(b[:proxyBufSize]))
}
