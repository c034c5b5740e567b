package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// NameReplicaInfo is the metric that names the replica a scrape comes
// from.
const NameReplicaInfo = "exgate_replica_info"

func newReplicaInfo() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: NameReplicaInfo,
		Help: "Always 1; the label names this replica (the replica setting, or the host name: in Kubernetes the pod's name).",
	}, []string{"replica"})
}

// SetReplica exports exgate_replica_info{replica="name"} 1. The
// replica's name is an info metric, joined to any series on the scrape's
// target labels (`* on(instance) group_left(replica)`), as
// exgate_build_info is, and never a label of every series: Prometheus
// already tells targets apart, and a label on every series would give
// every series a new identity whenever a pod is replaced.
func (m *Metrics) SetReplica(name string) {
	if m == nil {
		return
	}
	m.replicaInfo.Reset()
	m.replicaInfo.WithLabelValues(name).Set(1)
}

// StoreTotals are the rate-limit store's failures since start, read from
// the counters /metrics exports, so that the console and the metrics
// cannot disagree.
type StoreTotals struct {
	// Errors is exgate_ratelimit_store_errors_total, every kind: failed
	// round trips to the store.
	Errors int64
	// Fallback is exgate_ratelimit_fallback_total by mode (open, closed,
	// local), every route: decisions taken without the store.
	Fallback [numFallbackModes]int64
}

// StoreTotals returns the store's failure counts; zero on a nil Metrics.
func (m *Metrics) StoreTotals() StoreTotals {
	var st StoreTotals
	if m == nil {
		return st
	}
	for _, c := range m.storeErrKinds {
		st.Errors += counterValue(c)
	}
	ch := make(chan prometheus.Metric, 16)
	go func() { m.fallback.Collect(ch); close(ch) }()
	for c := range ch {
		var d dto.Metric
		if c.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if f, ok := ParseFallbackMode(l.GetValue()); ok && l.GetName() == "mode" {
				st.Fallback[f] += int64(d.GetCounter().GetValue())
			}
		}
	}
	return st
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) int64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return int64(d.GetCounter().GetValue())
}
