package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the request-body budget's gauges (server.max_buffered_bytes).
const (
	NameBodyBuffered        = "exgate_body_buffered_bytes"
	NameBodyBufferedClients = "exgate_body_buffered_clients"
)

// BodyBudgetSource reports the request-body budget; the gateway's budget
// is one.
type BodyBudgetSource interface {
	Buffered() int64
	Clients() int
}

type bodyBudgetRef struct{ s BodyBudgetSource }

// bodyBudgetCollectors are the body budget's gauges.
type bodyBudgetCollectors struct {
	source atomic.Pointer[bodyBudgetRef]
	gauges []prometheus.Collector
}

func newBodyBudgetCollectors() *bodyBudgetCollectors {
	b := &bodyBudgetCollectors{}
	gauge := func(name, help string, f func(BodyBudgetSource) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if r := b.source.Load(); r != nil {
				return f(r.s)
			}
			return 0
		})
	}
	b.gauges = []prometheus.Collector{
		gauge(NameBodyBuffered, "Bytes of request bodies held whole (every body is read whole before the backend gets its request), out of server.max_buffered_bytes.",
			func(s BodyBudgetSource) float64 { return float64(s.Buffered()) }),
		gauge(NameBodyBufferedClients, "Clients (verified accounts, else addresses) holding bytes of the request-body budget; each may hold at most as many as are left free.",
			func(s BodyBudgetSource) float64 { return float64(s.Clients()) }),
	}
	return b
}

// SetBodyBudgetSource makes the body budget's gauges read s. Until it is
// called they read 0. On a nil *Metrics it does nothing.
func (m *Metrics) SetBodyBudgetSource(s BodyBudgetSource) {
	if m == nil {
		return
	}
	m.bodyBudgetGauges.source.Store(&bodyBudgetRef{s})
}
