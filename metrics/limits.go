package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exgate/exgate/limiter"
)

// StoreBuckets returns the bucket bounds, in seconds, of the rate-limit
// store duration histogram: 50 µs to 100 ms, fine around the store's 25 ms
// deadline.
func StoreBuckets() []float64 {
	return []float64{.00005, .0001, .00025, .0005, .001, .002, .005, .01, .015, .02, .025, .05, .1}
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
