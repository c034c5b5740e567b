package metrics

import (
	"runtime"
	runtimemetrics "runtime/metrics"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

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
