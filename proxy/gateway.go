// Package proxy is exgate's HTTP front: the traffic server, the compiled
// route table, the request pipeline (Gateway.ServeHTTP: a named step for
// each check — path, route, auth, limits, the order, its identifier,
// admission — then the reverse proxy to the backend), and WriteError, the
// one function that writes the answers exgate gives itself.
package proxy

import (
	"cmp"
	"errors"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/internal/logshare"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
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
	// forwardHosts are upstream.forward_hosts without a final dot: the
	// Hosts the backend gets as they came (forwardsHost); forwardAny:
	// they hold "*".
	forwardHosts []string
	forwardAny   bool
	// hidden are the fields of the backend's answers no client gets
	// (upstream.hide_headers), in canonical form.
	hidden []string
	// hidesLegacy is whether hidden names a legacy rate-limit field
	// (hidesLegacy), which modifyResponse then removes before the merge
	// reads them.
	hidesLegacy bool
	errHeader   *apierror.Error
	errBody     *apierror.Error
	budget      *share.Pool // bytes of order bodies read whole, shared by clients
	draining    atomic.Bool
	pool        sync.Pool // *requestState
	deadlines   deadlineQueues
	lastHost    atomic.Pointer[[1]string] // the X-Forwarded-Host value last made (forwardedHost)
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
		hidesLegacy: hidesLegacy(canonicalNames(cfg.Upstream.HideHeaders)),
		tracer:      opts.Tracer,
	}
	for _, h := range cfg.Upstream.ForwardHosts {
		g.forwardHosts = append(g.forwardHosts, strings.TrimSuffix(h, "."))
		g.forwardAny = g.forwardAny || h == "*"
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
