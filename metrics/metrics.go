// Package metrics holds exgate's Prometheus collectors. Every collector is
// built by New on a prometheus.Registerer the caller passes in: the package
// has no globals and never touches prometheus.DefaultRegisterer.
//
// Label values never carry a token, a client address or a raw request path.
// Routes and limits are labelled by their configured names, and requests
// that matched no route are labelled route="default" (DefaultRoute).
//
// The request path is allocation-free: the caller resolves a *RouteMetrics
// per route and a *LimitMetrics per (route, limit, tier) once, when the
// configuration is loaded, and calls their methods per request. Every
// method is safe on a nil receiver and then does nothing, so code paths
// without metrics (unit tests) need no branches.
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultRoute is the route label of requests that matched no route
// (404, 405, refused paths, oversize headers).
const DefaultRoute = "default"

// DefaultTier is the tier label of decisions for requests whose token maps
// to no tier, and of address limits.
const DefaultTier = "default"

// Metric names, exported so that callers and tests can refer to them.
const (
	NameRequests          = "exgate_requests_total"
	NameRequestDuration   = "exgate_request_duration_seconds"
	NameUpstreamDuration  = "exgate_upstream_duration_seconds"
	NameUpstreamErrors    = "exgate_upstream_errors_total"
	NameRateLimitDecision = "exgate_ratelimit_decisions_total"
	NameStoreErrors       = "exgate_ratelimit_store_errors_total"
	NameStoreDuration     = "exgate_ratelimit_store_duration_seconds"
	NameFallback          = "exgate_ratelimit_fallback_total"
	NameValidation        = "exgate_validation_rejections_total"
	NameIdempotency       = "exgate_idempotency_total"
	NameCatalogueAge      = "exgate_market_catalogue_age_seconds"
	NameInflight          = "exgate_inflight_requests"
	NameConfigReloads     = "exgate_config_reloads_total"
	NameAdminResets       = "exgate_admin_resets_total"
	NameBuildInfo         = "exgate_build_info"
	NameAuthFailures      = "exgate_auth_failures_total"
	NameJWKSFetches       = "exgate_jwks_fetches_total"
	NameAuthCached        = "exgate_auth_failures_cached_total"
	NameBodyBudget        = "exgate_body_budget_refusals_total"
	NameLogSuppressed     = "exgate_log_refusals_suppressed_total"
)

// Metrics is exgate's set of collectors. Build it with New; the zero value
// is not usable, but every method is safe on a nil *Metrics and then does
// nothing (and returns nil resolvers).
type Metrics struct {
	requests         *prometheus.CounterVec
	requestDuration  *prometheus.HistogramVec
	upstreamDuration *prometheus.HistogramVec
	upstreamErrors   *prometheus.CounterVec
	decisions        *prometheus.CounterVec
	storeErrors      *prometheus.CounterVec
	storeDuration    prometheus.Histogram
	fallback         *prometheus.CounterVec
	validation       *prometheus.CounterVec
	idempotency      *prometheus.CounterVec
	catalogueAge     prometheus.GaugeFunc
	inflight         prometheus.Gauge
	bodyBudget       prometheus.Counter
	logSuppressed    *prometheus.CounterVec
	logCodes         boundedLabel
	reloads          *prometheus.CounterVec
	adminResets      prometheus.Counter
	buildInfo        *prometheus.GaugeVec
	replicaInfo      *prometheus.GaugeVec
	authFailures     *prometheus.CounterVec
	authCachedVec    *prometheus.CounterVec
	jwksFetches      *prometheus.CounterVec
	overload         *overloadCollectors
	fleet            *fleetCollector
	bodyBudgetGauges *bodyBudgetCollectors
	goColl           prometheus.Collector
	liveHeap         prometheus.Collector
	procColl         prometheus.Collector

	// Pre-resolved children of the label sets that have no route.
	storeErrKinds [numStoreErrorKinds]prometheus.Counter
	idemOutcomes  [numIdempotencyOutcomes]prometheus.Counter
	reloadResults results
	jwksResults   results

	// catalogueLoaded is the Unix time in nanoseconds of the last
	// catalogue load, 0 before the first.
	catalogueLoaded atomic.Int64
	now             func() time.Time

	mu         sync.RWMutex
	routes     map[string]*RouteMetrics
	limits     map[string]map[string]map[string]*LimitMetrics // route → limit → tier
	validCodes boundedLabel                                   // validation rejection codes
	authCodes  boundedLabel                                   // auth failure reasons
	authCached boundedLabel                                   // auth failures answered from the refusal cache
}

// New builds exgate's collectors and registers them, with the Go and
// process collectors, on reg. info labels exgate_build_info.
//
// Registering on a registry that already holds exgate's collectors (New
// called twice on one registry) is an error; whatever this call registered
// is unregistered again. Go and process collectors already present on reg
// (prometheus.DefaultRegisterer has them) are kept and not an error.
func New(reg prometheus.Registerer, info BuildInfo) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	m := newMetrics(info)
	if err := register(reg, m.own(), m.goColl, m.liveHeap, m.procColl); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers own and then shared on reg, all or none: when one
// fails, it unregisters what it registered and returns the error. A
// collector of shared that reg holds already (the Go and process
// collectors of prometheus.DefaultRegisterer) is kept and not an error.
func register(reg prometheus.Registerer, own []prometheus.Collector, shared ...prometheus.Collector) error {
	var done []prometheus.Collector
	for i, c := range append(slices.Clip(own), shared...) {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
			done = append(done, c)
		case i >= len(own) && errors.As(err, &are): // held already: kept
		default:
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("metrics: register: %w", err)
		}
	}
	return nil
}

// newMetrics builds the collectors without registering them.
func newMetrics(info BuildInfo) *Metrics {
	m := &Metrics{
		now:    time.Now,
		routes: make(map[string]*RouteMetrics),
		limits: make(map[string]map[string]map[string]*LimitMetrics),
	}
	m.newRequestCollectors()
	m.newLimitCollectors()
	m.newOrderCollectors()
	m.newAuthCollectors()
	m.newProcessCollectors(info)
	m.overload = newOverloadCollectors()
	m.fleet = newFleetCollector()
	m.bodyBudgetGauges = newBodyBudgetCollectors()
	return m
}

// own returns exgate's collectors, without the Go and process collectors.
func (m *Metrics) own() []prometheus.Collector {
	return append([]prometheus.Collector{
		m.requests, m.requestDuration, m.upstreamDuration, m.upstreamErrors,
		m.decisions, m.storeErrors, m.storeDuration, m.fallback,
		m.validation, m.idempotency, m.inflight,
		m.reloads, m.adminResets, m.buildInfo, m.replicaInfo, m.authFailures, m.authCachedVec, m.jwksFetches, m.bodyBudget, m.logSuppressed,
		m.fleet,
	}, append(m.overload.all(), m.bodyBudgetGauges.gauges...)...)
}

// Names returns the name of every metric family New and
// RegisterCatalogueAge register, exgate's and those of the Go and process
// collectors, sorted. Histograms and summaries
// are listed by their base name (without _bucket, _sum and _count). The
// names are read from the collectors' descriptors.
func Names() []string {
	m := newMetrics(BuildInfo{})
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range append(m.own(), m.catalogueAge, m.goColl, m.liveHeap, m.procColl) {
			c.Describe(ch)
		}
		close(ch)
	}()
	seen := map[string]bool{}
	var names []string
	for d := range ch {
		n, err := descName(d)
		if err != nil || seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// descName extracts the fully qualified name from a Desc, whose String
// method is the only place client_golang exposes it.
func descName(d *prometheus.Desc) (string, error) {
	const prefix = "Desc{fqName: "
	s := d.String()
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return "", fmt.Errorf("metrics: unexpected descriptor %q", s)
	}
	q, err := strconv.QuotedPrefix(s[len(prefix):])
	if err != nil {
		return "", fmt.Errorf("metrics: unexpected descriptor %q: %w", s, err)
	}
	return strconv.Unquote(q)
}

// Handler returns the /metrics handler for g (normally the
// *prometheus.Registry passed to New): the text exposition format, or
// OpenMetrics to a scraper that asks for it (the request durations'
// trace-id exemplars are shown only there), errors
// in single collectors served around rather than failing the scrape, at
// most 4 concurrent scrapes and a 10 s bound per scrape.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}
