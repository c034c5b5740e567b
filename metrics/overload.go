package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the overload metrics (the concurrency limit to the backend).
const (
	NameOverloadShed     = "exgate_overload_shed_total"
	NameOverloadQueue    = "exgate_overload_queue_seconds"
	NameOverloadLimit    = "exgate_overload_limit"
	NameOverloadInFlight = "exgate_overload_in_flight"
	NameOverloadWaiting  = "exgate_overload_waiting"
	NameOverloadMinRTT   = "exgate_overload_min_rtt_seconds"
	NameOverloadClients  = "exgate_overload_clients"
)

// OverloadSource reports the state of the concurrency limit to the
// backend; the gateway's overload.Controller is one.
type OverloadSource interface {
	Limit() int
	InFlight() int
	Waiting() int
	MinRTT() time.Duration
	Clients() int
}

// sourceRef boxes an OverloadSource behind an atomic.Pointer.
type sourceRef struct{ s OverloadSource }

// overloadCollectors are the overload families of a Metrics.
type overloadCollectors struct {
	shed   *prometheus.CounterVec
	queue  *prometheus.HistogramVec
	gauges []prometheus.Collector
	source atomic.Pointer[sourceRef]
}

// QueueBuckets returns the bucket bounds, in seconds, of the queue-time
// histogram: 100 µs to 2.5 s.
func QueueBuckets() []float64 {
	return []float64{.0001, .0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5}
}

func newOverloadCollectors() *overloadCollectors {
	o := &overloadCollectors{}
	o.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameOverloadShed,
		Help: "Requests shed with 503 overloaded because the backend was full, or their client held its share of it, by route and priority class (cancel, status, place, private_read, market_data).",
	}, []string{"route", "class"})
	o.queue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameOverloadQueue,
		Help:    "Time requests that found the backend full waited for a slot, served or shed, by priority class.",
		Buckets: QueueBuckets(),
	}, []string{"class"})
	gauge := func(name, help string, f func(OverloadSource) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if r := o.source.Load(); r != nil {
				return f(r.s)
			}
			return 0
		})
	}
	o.gauges = []prometheus.Collector{
		gauge(NameOverloadLimit, "The concurrency limit to the backend: requests exgate lets be under way there at once (0 when overload.enabled is false).",
			func(s OverloadSource) float64 { return float64(s.Limit()) }),
		gauge(NameOverloadInFlight, "Requests under way at the backend, counted against the concurrency limit (cancels may go over it by an eighth of it).",
			func(s OverloadSource) float64 { return float64(s.InFlight()) }),
		gauge(NameOverloadWaiting, "Requests waiting for a slot under the concurrency limit.",
			func(s OverloadSource) float64 { return float64(s.Waiting()) }),
		gauge(NameOverloadMinRTT, "The backend's unloaded round-trip time the limit adapts against, in seconds; 0 before it is measured.",
			func(s OverloadSource) float64 { return s.MinRTT().Seconds() }),
		gauge(NameOverloadClients, "Clients (verified accounts, else addresses) holding a slot under the concurrency limit or waiting for one; each may hold at most as many slots as are left free.",
			func(s OverloadSource) float64 { return float64(s.Clients()) }),
	}
	return o
}

func (o *overloadCollectors) all() []prometheus.Collector {
	return append([]prometheus.Collector{o.shed, o.queue}, o.gauges...)
}

// SetOverloadSource makes the overload gauges read s. Until it is called
// they read 0. On a nil *Metrics it does nothing.
func (m *Metrics) SetOverloadSource(s OverloadSource) {
	if m == nil {
		return
	}
	if s == nil {
		m.overload.source.Store(nil)
		return
	}
	m.overload.source.Store(&sourceRef{s})
}

// OverloadMetrics are the overload series of one route and class,
// resolved once. A nil *OverloadMetrics records nothing.
type OverloadMetrics struct {
	shed  prometheus.Counter
	queue prometheus.Observer
}

// Overload returns the overload series of a route and a priority class.
// Resolve them when the configuration is loaded. On a nil *Metrics it
// returns nil.
func (m *Metrics) Overload(route, class string) *OverloadMetrics {
	if m == nil {
		return nil
	}
	return &OverloadMetrics{
		shed:  m.overload.shed.WithLabelValues(route, class),
		queue: m.overload.queue.WithLabelValues(class),
	}
}

// Shed counts one shed request.
func (o *OverloadMetrics) Shed() {
	if o != nil {
		o.shed.Inc()
	}
}

// Queued observes how long a request waited for a slot.
func (o *OverloadMetrics) Queued(d time.Duration) {
	if o != nil {
		o.queue.Observe(d.Seconds())
	}
}
