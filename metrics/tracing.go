package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the tracing metrics.
const (
	NameTraceSpansExported = "exgate_tracing_spans_exported_total"
	NameTraceSpansDropped  = "exgate_tracing_spans_dropped_total"
	NameTraceQueue         = "exgate_tracing_queue_spans"
)

// Tracing counts what becomes of the spans of sampled requests: exported
// to the collector, or dropped (the export queue full, an export failed).
// Build it with NewTracing; it satisfies tracing.Counts. Every method is
// safe on a nil *Tracing and then does nothing.
type Tracing struct {
	exported prometheus.Counter
	dropped  *prometheus.CounterVec
	reasons  map[string]prometheus.Counter
	queued   func() int
}

// Reasons a span is dropped, as tracing names them.
var traceDropReasons = []string{"queue_full", "export_failed"}

// NewTracing builds the tracing collectors and registers them on reg.
// They are registered whether tracing is on or not (off, they stay 0),
// so that a dashboard's queries have series to read.
func NewTracing(reg prometheus.Registerer) (*Tracing, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	t := &Tracing{reasons: map[string]prometheus.Counter{}}
	t.exported = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameTraceSpansExported,
		Help: "Spans the trace collector accepted.",
	})
	t.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameTraceSpansDropped,
		Help: "Spans of sampled requests dropped instead of exported, by reason (queue_full: tracing.max_queue_size spans were waiting, the collector slow or unreachable; export_failed: the export failed within tracing.export_timeout).",
	}, []string{"reason"})
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: NameTraceQueue,
		Help: "Spans waiting for export (at most tracing.max_queue_size); 0 with tracing off.",
	}, func() float64 {
		if t.queued == nil {
			return 0
		}
		return float64(t.queued())
	})
	if err := register(reg, []prometheus.Collector{t.exported, t.dropped, queue}); err != nil {
		return nil, err
	}
	for _, r := range traceDropReasons {
		t.reasons[r] = t.dropped.WithLabelValues(r)
	}
	return t, nil
}

// TracingNames lists the tracing metric names.
func TracingNames() []string {
	return []string{NameTraceSpansExported, NameTraceSpansDropped, NameTraceQueue}
}

// SetQueue sets the source of the queue gauge. Call it before the first
// scrape.
func (t *Tracing) SetQueue(queued func() int) {
	if t != nil {
		t.queued = queued
	}
}

// Exported counts n spans exported.
func (t *Tracing) Exported(n int) {
	if t != nil {
		t.exported.Add(float64(n))
	}
}

// Dropped counts n spans dropped for reason; an unknown reason is not
// counted.
func (t *Tracing) Dropped(reason string, n int) {
	if t == nil {
		return
	}
	if c, ok := t.reasons[reason]; ok {
		c.Add(float64(n))
	}
}
