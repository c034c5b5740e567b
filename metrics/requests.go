package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RequestBuckets returns the bucket bounds, in seconds, of the request and
// upstream duration histograms: 100 µs to 10 s.
func RequestBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
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
