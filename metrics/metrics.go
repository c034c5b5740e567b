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
	"runtime"
	"runtime/debug"
	runtimemetrics "runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/exgate/exgate/limiter"
)

// DefaultRoute is the route label of requests that matched no route
// (404, 405, refused paths, oversize headers).
const DefaultRoute = "default"

// DefaultTier is the tier label of decisions for requests whose token maps
// to no tier, and of address limits.
const DefaultTier = "default"

// maxValidationCodes bounds the distinct code label values of
// exgate_validation_rejections_total; further codes are counted as
// "other".
const maxValidationCodes = 64

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

// RequestBuckets returns the bucket bounds, in seconds, of the request and
// upstream duration histograms: 100 µs to 10 s.
func RequestBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}

// StoreBuckets returns the bucket bounds, in seconds, of the rate-limit
// store duration histogram: 50 µs to 100 ms, fine around the store's 25 ms
// deadline.
func StoreBuckets() []float64 {
	return []float64{.00005, .0001, .00025, .0005, .001, .002, .005, .01, .015, .02, .025, .05, .1}
}

// BuildInfo labels exgate_build_info. Empty fields are exported as
// "unknown", except GoVersion, whose zero value means runtime.Version().
type BuildInfo struct {
	// Version is the release, such as "v1.2.0". Default "unknown".
	Version string
	// Revision is the VCS commit. Default "unknown".
	Revision string
	// GoVersion is the Go release that built the binary. Default
	// runtime.Version().
	GoVersion string
}

// ReadBuildInfo returns the BuildInfo the Go toolchain embedded in the
// running binary (BuildInfoOf). Fields it cannot find are left empty.
func ReadBuildInfo() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return BuildInfo{GoVersion: runtime.Version()}
	}
	return BuildInfoOf(bi)
}

// BuildInfoOf reads the version and revision of a build from its
// debug.BuildInfo: the main module's version, and the version control
// settings a build from a git checkout records (vcs.revision, vcs.time,
// vcs.modified). Where the toolchain left the version "(devel)" although
// it recorded the commit (Go before 1.24), the version is the Go
// pseudo-version of that commit (v0.0.0-20260102150405-0123456789ab),
// with "+dirty" when the tree had uncommitted changes, as Go 1.24 and
// later write it themselves. Without version control information (a
// build with -buildvcs=false, or outside a git checkout) it is "devel",
// and Revision is empty.
func BuildInfoOf(bi *debug.BuildInfo) BuildInfo {
	info := BuildInfo{GoVersion: bi.GoVersion, Version: bi.Main.Version}
	if info.GoVersion == "" {
		info.GoVersion = runtime.Version()
	}
	var at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if info.Version == "" || info.Version == "(devel)" {
		info.Version = "devel"
		if t, err := time.Parse(time.RFC3339, at); err == nil && len(info.Revision) >= 12 {
			info.Version = "v0.0.0-" + t.UTC().Format("20060102150405") + "-" + info.Revision[:12]
			if modified {
				info.Version += "+dirty"
			}
		}
	}
	return info
}

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

// results are the two series of a counter by result: failure and success.
type results [2]prometheus.Counter

// newResults resolves the failure and success series of vec, whose one
// label is the result.
func newResults(vec *prometheus.CounterVec) results {
	return results{vec.WithLabelValues("failure"), vec.WithLabelValues("success")}
}

// of returns the series of a success, or of a failure.
func (r *results) of(success bool) prometheus.Counter {
	if success {
		return r[1]
	}
	return r[0]
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

// newRequestCollectors builds the collectors of requests and of the
// backend's answers to them.
func (m *Metrics) newRequestCollectors() {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRequests,
		Help: "Requests answered, by route, method (GET HEAD POST PUT PATCH DELETE OPTIONS or other) and status code (499: the client went away).",
	}, []string{"route", "method", "code"})
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameRequestDuration,
		Help:    "Time from receiving a request's headers to the end of its answer, by route.",
		Buckets: RequestBuckets(),
	}, []string{"route"})
	m.upstreamDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameUpstreamDuration,
		Help:    "Time from sending a request to the backend to its response headers (or the error), by route.",
		Buckets: RequestBuckets(),
	}, []string{"route"})
	m.upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameUpstreamErrors,
		Help: "Requests the backend did not answer, by route and kind (timeout, unreachable, reset, client_gone, other).",
	}, []string{"route", "kind"})
}

// newLimitCollectors builds the collectors of rate-limit decisions and of
// the limit store.
func (m *Metrics) newLimitCollectors() {
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRateLimitDecision,
		Help: "Rate-limit decisions, by route, limit, tier and decision (allowed, limited, shadow_limited, exceeds_burst: a bulk larger than the limit's burst, which can never pass at its size).",
	}, []string{"route", "limit", "tier", "decision"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameStoreErrors,
		Help: "Failed calls to the rate-limit store, by kind (timeout; full: Redis at maxmemory; other).",
	}, []string{"kind"})
	m.storeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    NameStoreDuration,
		Help:    "Duration of calls to the rate-limit store, failed ones included.",
		Buckets: StoreBuckets(),
	})
	m.fallback = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameFallback,
		Help: "Rate-limit decisions taken without the store because it failed, by route and mode (open, closed, local).",
	}, []string{"route", "mode"})
	for k := range m.storeErrKinds {
		m.storeErrKinds[k] = m.storeErrors.WithLabelValues(storeErrorKind(k).String())
	}
}

// newOrderCollectors builds the collectors of order checks: validation,
// duplicate protection, the body budget and the market catalogue.
func (m *Metrics) newOrderCollectors() {
	m.validation = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameValidation,
		Help: "Orders refused by validation before reaching the backend, by rejection code.",
	}, []string{"code"})
	m.idempotency = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameIdempotency,
		Help: "Duplicate-protection outcomes for order identifiers (claimed, replayed, in_progress, conflict, unknown, released, store_error, store_full, account_full, not_acceptable).",
	}, []string{"outcome"})
	m.bodyBudget = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameBodyBudget,
		Help: "Requests refused with 503 server_busy because their client's share of server.max_buffered_bytes was full (a client may hold at most as many bytes as are left free).",
	})
	m.logSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameLogSuppressed,
		Help: "Access log lines of refusals exgate answered itself not written because their client was past its share of them (log.refusals_per_client), by code; each such client's are summed up in a line every 10 s.",
	}, []string{"code"})
	m.logCodes = boundedLabel{vec: m.logSuppressed, m: map[string]prometheus.Counter{}}
	m.catalogueAge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: NameCatalogueAge,
		Help: "Seconds since the market catalogue was last loaded from the backend; -1 until the first load.",
	}, m.catalogueAgeSeconds)
	m.validCodes = boundedLabel{vec: m.validation, m: map[string]prometheus.Counter{}}
	for o := range m.idemOutcomes {
		m.idemOutcomes[o] = m.idempotency.WithLabelValues(IdempotencyOutcome(o).String())
	}
}

// newAuthCollectors builds the collectors of token verification.
func (m *Metrics) newAuthCollectors() {
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameAuthFailures,
		Help: "Bearer tokens refused at the edge, by reason (malformed, noncanonical, bad_signature, bad_algorithm, unknown_key, expired, not_yet_valid, issued_in_future, missing_claim, wrong_type, wrong_issuer, wrong_audience).",
	}, []string{"reason"})
	m.authCachedVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameAuthCached,
		Help: "Bearer tokens refused from the cache of refused tokens, without their signature being checked again, by reason; also counted in " + NameAuthFailures + ".",
	}, []string{"reason"})
	m.jwksFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameJWKSFetches,
		Help: "Fetches of the JWKS URL, by result (success, failure).",
	}, []string{"result"})
	m.authCodes = boundedLabel{vec: m.authFailures, m: map[string]prometheus.Counter{}}
	m.authCached = boundedLabel{vec: m.authCachedVec, m: map[string]prometheus.Counter{}}
	m.jwksResults = newResults(m.jwksFetches)
}

// newProcessCollectors builds the collectors of the process itself:
// requests in flight, reloads, admin resets, the replica and the build,
// and the Go and process collectors.
func (m *Metrics) newProcessCollectors(info BuildInfo) {
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameInflight,
		Help: "Requests being served.",
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameConfigReloads,
		Help: "Configuration reloads, by result (success, failure).",
	}, []string{"result"})
	m.adminResets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameAdminResets,
		Help: "Rate-limit buckets of one account, token or address cleared by an operator through the admin console.",
	})
	m.replicaInfo = newReplicaInfo()
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: NameBuildInfo,
		Help: "Always 1; the labels say which build of exgate is running.",
	}, []string{"version", "revision", "goversion"})
	m.reloadResults = newResults(m.reloads)
	m.buildInfo.WithLabelValues(orUnknown(info.Version), orUnknown(info.Revision), orDefault(info.GoVersion, runtime.Version())).Set(1)
	m.goColl = collectors.NewGoCollector()
	m.liveHeap = newLiveHeap()
	m.procColl = collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
}

// newLiveHeap returns the gauge go_gc_heap_live_bytes, the Go runtime's
// /gc/heap/live:bytes under the name client_golang's Go collector gives
// it when asked: the heap the last collection marked live, what the
// process holds without its garbage or part-used spans. It is a gauge of
// its own, not a rule of the Go collector, so that a registry that holds
// the default Go collector already (New keeps it) takes it beside.
func newLiveHeap() prometheus.Collector {
	sample := []runtimemetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var mu sync.Mutex
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "go_gc_heap_live_bytes",
		Help: "Heap memory occupied by live objects that were marked by the previous GC. Sourced from /gc/heap/live:bytes.",
	}, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		runtimemetrics.Read(sample)
		return float64(sample[0].Value.Uint64())
	})
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

// IncInflight counts a request as being served; pair it with DecInflight.
func (m *Metrics) IncInflight() {
	if m != nil {
		m.inflight.Inc()
	}
}

// DecInflight counts a request as done.
func (m *Metrics) DecInflight() {
	if m != nil {
		m.inflight.Dec()
	}
}

// ObserveStore records one call to the rate-limit store that took d and
// failed with err (nil for success). Errors are counted by kind: timeout
// when err is or wraps context.DeadlineExceeded or an error whose
// Timeout method reports true, other otherwise.
func (m *Metrics) ObserveStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrKinds[classifyStoreError(err)].Inc()
	}
}

// Idempotency counts one duplicate-protection outcome. Outcomes outside
// the defined set are ignored.
func (m *Metrics) Idempotency(o IdempotencyOutcome) {
	if m == nil || o >= numIdempotencyOutcomes {
		return
	}
	m.idemOutcomes[o].Inc()
}

// BodyBudgetExhausted counts one order or bulk refused because its
// client's share of the buffered body budget was full.
func (m *Metrics) BodyBudgetExhausted() {
	if m == nil {
		return
	}
	m.bodyBudget.Inc()
}

// LogRefusalSuppressed counts one access log line of a refusal with the
// given code ("" counts as other) not written because its client was past
// its share of such lines. On a nil *Metrics it does nothing.
func (m *Metrics) LogRefusalSuppressed(code string) {
	if m == nil {
		return
	}
	m.logCodes.counter(code).Inc()
}

// ValidationRejected counts one order refused by validation with the given
// rejection code. Codes are cached after first use, so the call does not
// allocate; past 64 distinct codes, new ones are counted as "other" to
// bound the label's cardinality. An empty code is counted as "other".
func (m *Metrics) ValidationRejected(code string) {
	if m == nil {
		return
	}
	m.validationCounter(code).Inc()
}

func (m *Metrics) validationCounter(code string) prometheus.Counter {
	return m.validCodes.counter(code)
}

// AuthFailure counts one bearer token refused at the edge, by reason
// (identity.Reason). Like validation codes, reasons are cached after first
// use and bounded; an empty reason counts as "other".
func (m *Metrics) AuthFailure(reason string) {
	if m == nil {
		return
	}
	m.authCodes.counter(reason).Inc()
}

// AuthFailureCached counts one bearer token refused from the cache of
// refused tokens (identity.Options.OnCachedRefusal), by reason, bounded
// like AuthFailure. The refusal is also counted by AuthFailure.
func (m *Metrics) AuthFailureCached(reason string) {
	if m == nil {
		return
	}
	m.authCached.counter(reason).Inc()
}

// JWKSFetch counts one fetch of the JWKS URL.
func (m *Metrics) JWKSFetch(ok bool) {
	if m == nil {
		return
	}
	m.jwksResults.of(ok).Inc()
}

// boundedLabel resolves the children of a one-label counter vector on
// first use, so that counting does not allocate, and counts past
// maxValidationCodes distinct values as "other" to bound the label's
// cardinality.
type boundedLabel struct {
	vec *prometheus.CounterVec
	mu  sync.RWMutex
	m   map[string]prometheus.Counter
}

func (b *boundedLabel) counter(value string) prometheus.Counter {
	if value == "" {
		value = "other"
	}
	b.mu.RLock()
	c, ok := b.m[value]
	b.mu.RUnlock()
	if ok {
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.m[value]; ok {
		return c
	}
	if len(b.m) >= maxValidationCodes {
		if c, ok := b.m["other"]; ok {
			return c
		}
		value = "other"
	}
	c = b.vec.WithLabelValues(value)
	b.m[value] = c
	return c
}

// AdminReset counts one reset of an identity's buckets by an operator.
func (m *Metrics) AdminReset() {
	if m == nil {
		return
	}
	m.adminResets.Inc()
}

// ConfigReload counts one configuration reload, successful or not.
func (m *Metrics) ConfigReload(success bool) {
	if m == nil {
		return
	}
	m.reloadResults.of(success).Inc()
}

// SetCatalogueLoaded records when the market catalogue was last loaded
// successfully. exgate_market_catalogue_age_seconds is computed from it at
// scrape time, so it keeps growing while loads fail; before the first call
// it reads -1.
func (m *Metrics) SetCatalogueLoaded(t time.Time) {
	if m == nil {
		return
	}
	m.catalogueLoaded.Store(t.UnixNano())
}

// RegisterCatalogueAge registers exgate_market_catalogue_age_seconds on
// reg. Only a gateway that validates orders has a catalogue, so only it
// exports the age: elsewhere the gauge would read -1 for ever and its
// "never loaded" alert would fire for nothing.
func (m *Metrics) RegisterCatalogueAge(reg prometheus.Registerer) error {
	if m == nil || reg == nil {
		return nil
	}
	if err := reg.Register(m.catalogueAge); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

func (m *Metrics) catalogueAgeSeconds() float64 {
	at := m.catalogueLoaded.Load()
	if at == 0 {
		return -1
	}
	age := m.now().Sub(time.Unix(0, at)).Seconds()
	if age < 0 {
		return 0
	}
	return age
}

// Route returns the metrics of the named route, creating them on first
// use; later calls with the same name return the same value. Resolve it
// once per route when the configuration is loaded. An empty name means
// DefaultRoute. On a nil *Metrics it returns nil, whose methods do
// nothing.
func (m *Metrics) Route(name string) *RouteMetrics {
	if m == nil {
		return nil
	}
	if name == "" {
		name = DefaultRoute
	}
	m.mu.RLock()
	r := m.routes[name]
	m.mu.RUnlock()
	if r != nil {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.routes[name]; r != nil {
		return r
	}
	r = newRouteMetrics(m, name)
	m.routes[name] = r
	return r
}

// Unrouted returns Route(DefaultRoute), the metrics of requests that
// matched no route.
func (m *Metrics) Unrouted() *RouteMetrics { return m.Route(DefaultRoute) }

// Limit returns the decision counters of one limit of one route for one
// tier, creating them on first use; later calls with the same names return
// the same value. An empty tier means DefaultTier. Resolve them when the
// configuration is loaded (one per route × limit × tier, DefaultTier
// included). On a nil *Metrics it returns nil, whose methods do nothing.
func (m *Metrics) Limit(route, limit, tier string) *LimitMetrics {
	if m == nil {
		return nil
	}
	if route == "" {
		route = DefaultRoute
	}
	if tier == "" {
		tier = DefaultTier
	}
	rm := m.Route(route) // before m.mu: Route takes it too
	m.mu.RLock()
	l := m.limits[route][limit][tier]
	m.mu.RUnlock()
	if l != nil {
		return l
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	byLimit := m.limits[route]
	if byLimit == nil {
		byLimit = make(map[string]map[string]*LimitMetrics)
		m.limits[route] = byLimit
	}
	byTier := byLimit[limit]
	if byTier == nil {
		byTier = make(map[string]*LimitMetrics)
		byLimit[limit] = byTier
	}
	if l := byTier[tier]; l != nil {
		return l
	}
	l = &LimitMetrics{route: rm}
	for v := range limiter.NumVerdicts {
		l.decisions[v] = m.decisions.WithLabelValues(route, limit, tier, v.String())
	}
	byTier[tier] = l
	return l
}

// LimitMetrics counts the decisions of one limit of one route for one
// tier. A nil *LimitMetrics is valid and counts nothing.
type LimitMetrics struct {
	route     *RouteMetrics
	decisions [limiter.NumVerdicts]prometheus.Counter // by verdict
}

// Observe records one limit's outcome as the limiter reports it: its
// verdict, and fallback, "" when the store decided, or the
// limiter.on_store_error mode that decided instead ("open", "closed" or
// "local"), which is counted in exgate_ratelimit_fallback_total of the
// limit's route. The open and closed modes decide without looking at the
// limit, so their outcomes are counted only there; the local mode's
// decision is counted as a decision too. An unknown fallback is ignored.
func (l *LimitMetrics) Observe(v limiter.Verdict, fallback string) {
	if l == nil {
		return
	}
	if fallback != "" {
		f, ok := ParseFallbackMode(fallback)
		if !ok {
			return
		}
		l.route.Fallback(f)
		if f != FallbackLocal {
			return
		}
	}
	if v < limiter.NumVerdicts {
		l.decisions[v].Inc()
	}
}

func orUnknown(s string) string { return orDefault(s, "unknown") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
