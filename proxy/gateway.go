// Package proxy is exgate's HTTP front: the traffic server, the compiled
// route table, the request pipeline (canonical path, route, auth, size
// limits) and the reverse proxy to the backend, plus the one function that
// writes every error exgate answers itself.
package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/validate"
)

// StatusClientClosed is the status logged (never sent) when the client went
// away before exgate could answer, as NGINX logs it.
const StatusClientClosed = 499

// Options are a Gateway's dependencies. The zero value is usable.
type Options struct {
	// Logger receives the access log and errors. Nil means no logging.
	Logger *zap.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Transport carries requests to the backend. Nil means
	// NewTransport(upstream).
	Transport http.RoundTripper
	// Limits enforces the rate limits. Nil means no route is limited.
	Limits *limiter.Enforcer
	// Rules are the compiled rate limits. Nil means limiter.Compile of
	// the configuration with no token tiers.
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
	// or a Verifier (for account keys).
	Idempotency idempotency.Store
	// IdempotencyTimeout bounds each call to the Idempotency store. Zero
	// means 100ms.
	IdempotencyTimeout time.Duration
	// IdempotencyMaxResponse is the largest response recorded for replay,
	// in bytes; a longer one is recorded as an unknown outcome. Zero
	// means 64 KiB.
	IdempotencyMaxResponse int
	// Top counts requests and refusals of limited routes by identity and
	// client address for the admin console. Nil means none.
	Top *topk.Tracker
}

// Gateway is the traffic handler: it answers bad requests itself and
// forwards the rest to the backend. It is safe for concurrent use.
type Gateway struct {
	plan         atomic.Pointer[plan]
	limits       *limiter.Enforcer
	top          *topk.Tracker
	verifier     *identity.Verifier
	idem         idempotency.Store
	idemTimeout  time.Duration
	idemMaxResp  int
	metrics      *metrics.Metrics
	unrouted     *metrics.RouteMetrics
	target       *url.URL
	basePath     string // target path without its trailing slash
	rp           *httputil.ReverseProxy
	transport    http.RoundTripper
	trusted      []netip.Prefix
	forwarded    bool   // client_ip.header is "forwarded"
	clientHeader string // the canonical name of client_ip.header
	log          *zap.Logger
	access       bool
	now          func() time.Time
	ids          *requestIDs
	maxHeader    int64
	maxBody      int64
	checkIDs     bool // upstream.check_response_id
	errHeader    *apierror.Error
	errBody      *apierror.Error
	budget       bufferBudget // of order bodies read whole
	admission    *overload.Limiter
	draining     atomic.Bool
	pool         sync.Pool // *exchange
}

// New builds a Gateway from a validated configuration.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	if cfg.Upstream.URL.URL == nil {
		return nil, errors.New("proxy: upstream.url is not set")
	}
	g := &Gateway{
		limits:      opts.Limits,
		top:         opts.Top,
		verifier:    opts.Verifier,
		idem:        opts.Idempotency,
		idemTimeout: opts.IdempotencyTimeout,
		idemMaxResp: opts.IdempotencyMaxResponse,
		metrics:     opts.Metrics,
		unrouted:    opts.Metrics.Unrouted(),
		target:      cfg.Upstream.URL.URL,
		basePath:    strings.TrimSuffix(cfg.Upstream.URL.Path, "/"),
		transport:   opts.Transport,
		log:         opts.Logger,
		access:      cfg.Log.Access,
		now:         opts.Now,
		ids:         newRequestIDs(),
		maxHeader:   int64(cfg.Server.MaxHeaderBytes),
		maxBody:     int64(cfg.Server.MaxBodyBytes),
		checkIDs:    cfg.Upstream.CheckResponseID,
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.transport == nil {
		g.transport = NewTransport(cfg.Upstream)
	}
	g.clientHeader = "X-Forwarded-For"
	if cfg.ClientIP.Header == config.HeaderForwarded {
		g.forwarded, g.clientHeader = true, "Forwarded"
	}
	for _, p := range cfg.ClientIP.TrustedProxies {
		g.trusted = append(g.trusted, p.Prefix)
	}
	rules := opts.Rules
	if rules == nil {
		rules = limiter.Compile(cfg, nil)
	}
	if g.idemTimeout <= 0 {
		g.idemTimeout = idemDefaultTimeout
	}
	if g.idemMaxResp <= 0 {
		g.idemMaxResp = 64 << 10
	}
	g.plan.Store(g.newPlan(cfg, rules, opts.Validator))
	g.errHeader = headerTooLarge(g.maxHeader)
	g.errBody = apierror.TooLarge(g.maxBody)
	g.budget.left.Store(int64(cfg.Server.MaxBufferedBytes))
	g.rp = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      g.transport,
		BufferPool:     newBufferPool(),
		ErrorHandler:   g.proxyError,
		ModifyResponse: g.modifyResponse,
		ErrorLog:       zap.NewStdLog(g.log.Named("reverseproxy")),
	}
	g.pool.New = func() any { return new(exchange) }
	return g, nil
}

// plan is what a reload replaces: the route table with each route's
// compiled limits. A request uses the plan it started with throughout.
type plan struct {
	cors      *corsPolicy // nil when off
	table     *table
	rules     *limiter.Rules
	validator *validate.Validator
	admission admissionPlan
}

// newPlan compiles the route table, attaching to each route its compiled
// limits and its metric children, resolved once here rather than per
// request.
func (g *Gateway) newPlan(cfg *config.Config, rules *limiter.Rules, v *validate.Validator) *plan {
	t := compileTable(cfg)
	all := t.routes
	if t.def != nil {
		all = append(all[:len(all):len(all)], t.def)
	}
	for _, r := range all {
		if r.Config.Validate == config.ValidateBulk {
			r.bulk = &bulkTargets{orders: t.named(r.Config.Bulk.Orders), cancels: t.named(r.Config.Bulk.Cancels)}
		}
		r.limits = rules.Route(r.Name)
		r.metrics = g.metrics.Route(r.Name)
		g.compileAdmission(r)
		if g.metrics == nil || !r.limits.Limited() {
			continue
		}
		tiers := append([]string{""}, r.limits.TierNames()...)
		for _, name := range r.limits.LimitNames() {
			byTier := make(map[string]*metrics.LimitMetrics, len(tiers))
			for _, tier := range tiers {
				byTier[tier] = g.metrics.Limit(r.Name, name, tier)
			}
			r.limitMetrics = append(r.limitMetrics, byTier)
		}
	}
	return &plan{table: t, rules: rules, validator: v, cors: compileCORS(cfg.CORS), admission: g.newAdmissionPlan(cfg)}
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
// then on so load balancers stop sending traffic.
func (g *Gateway) SetDraining() { g.draining.Store(true) }

// Draining reports whether SetDraining was called.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// CloseIdleConnections closes idle backend connections.
func (g *Gateway) CloseIdleConnections() {
	if t, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// exchange is the state of one request, pooled.
type exchange struct {
	rw         respWriter
	start      time.Time
	id         string
	route      *Route
	path       string // canonical path, or "" when refused before that
	clientCx   context.Context
	upErr      error
	addr       netip.Addr // client address, once derived
	caller     caller     // who sent the request, from the auth step
	order      orderState // validation and duplicate protection
	limited    bool       // the route's limits were decided
	decision   limiter.Decision
	g          *Gateway
	upStart    time.Time       // when the request went to the backend, or zero
	upDone     bool            // the upstream duration was observed
	upDur      time.Duration   // how long the backend took to answer with headers, or to fail
	upStatus   int             // the backend's status, or 0
	body       *streamBody     // the request body as it streams, when it has one and is not an order
	buffered   int64           // bytes of the buffer budget this request holds
	bulkCancel bool            // the request is a bulk of order ids to cancel
	slot       bool            // the request holds a backend slot (admission)
	routeSlot  *routeAdmission // the route whose own in-flight cap counts the request
}

// ServeHTTP runs the request pipeline: request id, header size,
// Connection options, canonical path, route, auth, body size, then the
// backend.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.metrics.IncInflight()
	ex := g.pool.Get().(*exchange)
	*ex = exchange{g: g, start: g.now(), clientCx: r.Context()}
	ex.rw = respWriter{ResponseWriter: w, ex: ex}
	defer g.finish(ex, r)

	if id := r.Header.Get("X-Request-Id"); validRequestID(id) {
		ex.id = id
	} else {
		ex.id = g.ids.next()
		r.Header["X-Request-Id"] = []string{ex.id}
	}
	pl := g.plan.Load()
	if origin := r.Header["Origin"]; pl.cors != nil && len(origin) == 1 {
		pl.cors.decorate(w.Header(), origin)
	}
	if headerSize(r) > g.maxHeader {
		g.refuse(ex, r, g.errHeader)
		return
	}
	if e := checkConnection(r.Header); e != nil {
		g.refuse(ex, r, e)
		return
	}
	p, err := canonicalPath(r.URL.EscapedPath())
	if err != nil {
		g.refuse(ex, r, pathErrors[err.(pathError)])
		return
	}
	ex.path = p
	if methodOverridden(r.Header) {
		g.refuse(ex, r, errMethodOverride)
		return
	}
	preflight := isPreflight(r)
	if preflight && hasBody(r) {
		g.refuse(ex, r, errPreflightBody)
		return
	}
	if preflight && pl.cors != nil {
		g.answerPreflight(ex, r, pl.cors)
		return
	}
	var route *Route
	var matched, allow string
	if preflight && pl.table.def != nil {
		// No policy: the backend answers preflights, on the default
		// route, whatever the path (a browser sends them without
		// credentials; OPTIONS runs no view of a DRF backend).
		route, matched = pl.table.def, p
	} else {
		route, matched, allow = pl.table.match(r.Method, p)
	}
	if route == nil {
		if allow != "" {
			g.refuse(ex, r, methodNotAllowed(r.Method, allow))
		} else {
			g.refuse(ex, r, errNotFound)
		}
		return
	}
	ex.route = route
	ex.path = route.forwardPath(matched)

	if e := g.authenticate(ex, r, route); e != nil {
		g.refuse(ex, r, e)
		return
	}
	var realIP []string
	ex.addr, realIP = g.client(r)
	if realIP != nil {
		r.Header["X-Real-Ip"] = realIP // what the client sent is replaced
	} else {
		delete(r.Header, "X-Real-Ip")
	}
	if !g.admitEarly(ex, r, pl) {
		return
	}
	if route.bulk != nil {
		// A bulk is charged by its size, so its body is checked first.
		if !g.checkBulk(ex, r, pl) {
			return
		}
	} else {
		if !g.enforceLimits(ex, r, pl, route, 1) {
			return
		}
		if route.Config.Validate == config.ValidateOrd && pl.validator != nil {
			if !g.checkOrder(ex, r, pl.validator) {
				return
			}
		} else if e := g.streamBodyOf(ex, r); e != nil {
			g.reject(ex, e)
			return
		}
	}

	if !g.admit(ex, r, pl) {
		return
	}
	r.URL.Path, r.URL.RawPath = ex.path, ""
	parent := r.Context()
	if ex.order.claimed {
		// A claimed order goes through even if its client hangs up, so
		// that its outcome is recorded and a retry gets the replay.
		parent = context.WithValue(context.WithoutCancel(parent), claimKey{}, ex)
	}
	ex.upStart = g.now()
	ctx, cancel := context.WithTimeout(parent, route.Timeout)
	defer cancel()
	g.rp.ServeHTTP(&ex.rw, r.WithContext(ctx))
}

// reject answers the request with e.
func (g *Gateway) reject(ex *exchange, e *apierror.Error) {
	WriteError(&ex.rw, ex.id, e)
}

// refuse answers a request whose body has not been read with e. A body of
// unknown length (chunked) would otherwise be read by net/http before the
// answer goes out, up to 256 KiB, so the connection is closed instead: a
// refused client cannot make exgate wait for its body.
func (g *Gateway) refuse(ex *exchange, r *http.Request, e *apierror.Error) {
	if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
		ex.rw.Header()["Connection"] = connClose
	}
	WriteError(&ex.rw, ex.id, e)
}

var connClose = []string{"close"}

// rewrite turns the inbound request into the outbound one. The inbound URL
// path is already the route's canonical path.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL.Scheme = g.target.Scheme
	out.URL.Host = g.target.Host
	out.URL.Path = g.basePath + pr.In.URL.Path
	out.URL.RawPath = ""
	out.Host = ""
	closeAfterHead(out)
	keepInMemoryBody(pr)
	// What httputil.ProxyRequest.SetXForwarded sets, from the
	// connection's peer worked out once per connection, with shared
	// header values instead of new ones per request. ReverseProxy has
	// removed what the client sent of these (and Forwarded).
	p := g.peerOf(pr.In)
	if p.ok {
		xff := p.realIP
		if p.trusted {
			// Keep the chain the trusted proxy built and append the
			// peer. From anyone else, the chain is dropped.
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
				xff = []string{strings.Join(prior, ", ") + ", " + p.realIP[0]}
			}
		}
		out.Header["X-Forwarded-For"] = xff
	}
	out.Header["X-Forwarded-Host"] = []string{pr.In.Host}
	proto := forwardedHTTP
	if pr.In.TLS != nil {
		proto = forwardedHTTPS
	}
	if p.trusted {
		switch pr.In.Header.Get("X-Forwarded-Proto") {
		case "http":
			proto = forwardedHTTP
		case "https":
			proto = forwardedHTTPS
		}
	}
	out.Header["X-Forwarded-Proto"] = proto
	// X-Real-Ip is the client address ServeHTTP derived, set on the
	// inbound request and copied with its headers.
}

// Shared X-Forwarded-Proto values, never modified.
var (
	forwardedHTTP  = []string{"http"}
	forwardedHTTPS = []string{"https"}
)

// modifyResponse refuses a response that names another request's id,
// records the response of a claimed order and adds the request id to
// backend responses that lack one.
func (g *Gateway) modifyResponse(res *http.Response) error {
	if g.checkIDs {
		if err := checkResponseID(res); err != nil {
			return err // before anything is recorded: the answer is not this request's
		}
	}
	if g.plan.Load().cors != nil {
		dropBackendCORS(res.Header)
	}
	if err := g.recordResponse(res); err != nil {
		return err
	}
	if res.Header.Get("X-Request-Id") == "" && res.Request != nil {
		if id := res.Request.Header["X-Request-Id"]; len(id) == 1 {
			res.Header["X-Request-Id"] = id // shared, never modified
		}
	}
	return nil
}

// proxyError maps a failure to reach the backend to an answer: client gone
// → nothing (logged as 499), timeout → 504, body over the limit → 413,
// anything else → 502.
func (g *Gateway) proxyError(w http.ResponseWriter, _ *http.Request, err error) {
	rw, ok := w.(*respWriter)
	if !ok { // cannot happen: the gateway always passes its own writer
		WriteError(w, "", errBadGateway)
		return
	}
	ex := rw.ex
	ex.upErr = err
	g.observeUpstream(ex)
	g.settleFailed(ex, err)
	bodyErr := g.bodyError(ex)
	if bodyErr == nil && ex.route != nil {
		ex.route.metrics.UpstreamError(metrics.ClassifyUpstreamError(err, ex.clientCx.Err() != nil))
	}
	switch {
	case bodyErr != nil:
		// The client's own body failed; the rest of it stays unread.
		rw.Header()["Connection"] = connClose
		g.reject(ex, bodyErr)
	case ex.clientCx.Err() != nil:
		rw.status = StatusClientClosed
	case metrics.IsTimeout(err):
		g.reject(ex, errGatewayTimeout)
	default:
		g.reject(ex, errBadGateway)
	}
}

// observeUpstream records, once, how long the backend took to answer with
// headers or to fail.
func (g *Gateway) observeUpstream(ex *exchange) {
	if ex.upDone || ex.upStart.IsZero() || ex.route == nil {
		return
	}
	ex.upDone = true
	ex.upDur = g.now().Sub(ex.upStart)
	ex.route.metrics.ObserveUpstream(ex.upDur)
}

// finish writes the access log line and returns ex to the pool. A panic
// from a handler is logged; http.ErrAbortHandler (the backend broke off a
// response already under way) is passed on so the server drops the
// connection, anything else is answered 500.
func (g *Gateway) finish(ex *exchange, r *http.Request) {
	p := recover()
	if p != nil {
		if p == http.ErrAbortHandler {
			if ex.rw.status == 0 {
				ex.rw.status = StatusClientClosed
			}
			if ex.route != nil {
				kind := metrics.UpstreamReset
				if ex.clientCx.Err() != nil {
					kind = metrics.UpstreamClientGone
				}
				ex.route.metrics.UpstreamError(kind)
			}
			g.settleFailed(ex, nil)
			g.releaseSlot(ex)
			ex.releaseOrder()
			g.budget.release(ex.buffered)
			g.observe(ex, r)
			g.logAccess(ex, r, zap.Bool("aborted", true))
			panic(p)
		}
		g.log.Error("panic serving request",
			zap.String("request_id", ex.id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		if ex.rw.status == 0 {
			g.reject(ex, errInternal)
		}
	}
	if ex.rw.status == 0 {
		ex.rw.status = http.StatusOK // net/http's answer when nothing was written
	}
	g.settleFailed(ex, nil) // a claim still open here has an unknown outcome
	g.releaseSlot(ex)
	ex.releaseOrder()
	g.budget.release(ex.buffered)
	g.observe(ex, r)
	g.logAccess(ex, r)
	*ex = exchange{}
	g.pool.Put(ex)
}

// observe records the request in the metrics.
func (g *Gateway) observe(ex *exchange, r *http.Request) {
	g.metrics.DecInflight()
	if g.metrics == nil {
		return
	}
	rm := g.unrouted
	if ex.route != nil {
		rm = ex.route.metrics
	}
	rm.ObserveRequest(r.Method, ex.rw.status, g.now().Sub(ex.start))
}

func (g *Gateway) logAccess(ex *exchange, r *http.Request, extra ...zap.Field) {
	if !g.access {
		return
	}
	ce := g.log.Check(zapcore.InfoLevel, "request")
	if ce == nil {
		return
	}
	route := "default"
	if ex.route != nil {
		route = ex.route.Name
	}
	fields := make([]zap.Field, 0, 18+len(extra))
	fields = append(fields,
		zap.String("request_id", ex.id),
		zap.String("route", route),
		zap.String("method", r.Method),
		zap.String("path", ex.path),
		zap.Int("status", ex.rw.status),
		zap.Duration("duration", g.now().Sub(ex.start)),
		zap.Int64("bytes", ex.rw.bytes),
		zap.String("peer", r.RemoteAddr),
	)
	if ex.addr.IsValid() {
		fields = append(fields, zap.Stringer("client", ex.addr))
	}
	if a := ex.caller.id.Account; a != "" {
		fields = append(fields, zap.String("account", a[:12])) // an HMAC prefix, never the user id
	}
	if ex.limited {
		fields = g.limitFields(fields, &ex.decision)
	}
	if ex.upDone {
		if ex.upStatus != 0 {
			fields = append(fields, zap.Int("upstream_status", ex.upStatus))
		}
		fields = append(fields, zap.Duration("upstream_duration", ex.upDur))
	}
	if ex.upErr != nil {
		fields = append(fields, zap.NamedError("upstream_error", ex.upErr))
	}
	ce.Write(append(fields, extra...)...)
}

// limitFields adds the rate-limit decision to an access log line: the
// token id's first 12 hex digits (never the token), the tier, and the
// limit that decided (the one that denied, else the last one checked).
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
	if d.N > 0 {
		o := &d.Outcomes[d.N-1]
		for i := 0; i < d.N; i++ {
			if d.Outcomes[i].Decision != limiter.DecisionAllowed {
				o = &d.Outcomes[i]
				break
			}
		}
		fields = append(fields, zap.String("limit", o.Limit), zap.String("limit_decision", o.Decision),
			zap.Int64("limit_remaining", o.Result.Remaining))
		if o.Fallback != "" {
			fields = append(fields, zap.String("limit_fallback", o.Fallback))
		}
	}
	return fields
}

// headerSize approximates the size of the request line and headers as
// they were read.
func headerSize(r *http.Request) int64 {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// respWriter records the status and size of a response.
type respWriter struct {
	http.ResponseWriter
	ex     *exchange
	status int
	bytes  int64
}

// WriteHeader records the final status; informational ones pass through.
// The first final status of a proxied request marks the backend's answer.
func (w *respWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		if !w.ex.upStart.IsZero() && !w.ex.upDone {
			w.ex.upStatus = code // the backend's answer, as ReverseProxy writes it
		}
		w.ex.g.observeUpstream(w.ex)
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

// bufferPool is the ReverseProxy's pool of copy buffers. A channel keeps
// the free list without boxing slices in interfaces.
type bufferPool chan []byte

const proxyBufSize = 32 << 10

func newBufferPool() bufferPool { return make(bufferPool, 256) }

// Get returns a buffer from the pool or a new one.
func (p bufferPool) Get() []byte {
	select {
	case b := <-p:
		return b
	default:
		return make([]byte, proxyBufSize)
	}
}

// Put returns a buffer to the pool, dropping it when the pool is full.
func (p bufferPool) Put(b []byte) {
	if cap(b) != proxyBufSize {
		return
	}
	select {
	case p <- b[:proxyBufSize]:
	default:
	}
}
