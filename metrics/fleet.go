package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the fleet metrics (the backend services and their instances).
const (
	NameUpstreamAvailable        = "exgate_upstream_service_available"
	NameUpstreamPanic            = "exgate_upstream_service_panic"
	NameUpstreamFailover         = "exgate_upstream_service_failover"
	NameUpstreamInstances        = "exgate_upstream_instances"
	NameUpstreamInstanceActive   = "exgate_upstream_instance_active"
	NameUpstreamInstanceRequests = "exgate_upstream_instance_requests_total"
	NameUpstreamEjections        = "exgate_upstream_ejections_total"
	NameUpstreamRetries          = "exgate_upstream_retries_total"
	NameUpstreamUnavailable      = "exgate_upstream_unavailable_total"
	NameUpstreamRetriesRefused   = "exgate_upstream_retries_refused_total"
)

// FleetSource reports the backend services' state at scrape time; the
// gateway's fleet is one.
type FleetSource interface {
	FleetStatus() []ServiceStatus
}

// ServiceStatus is a service's state for the fleet metrics.
type ServiceStatus struct {
	Name      string
	Available bool
	Panic     bool
	// Failover is true while requests go to instances of a higher
	// priority than the service's lowest (SRV backups).
	Failover bool
	// Retries and Unavailable count requests moved to another instance
	// and requests that found none.
	Retries, Unavailable uint64
	// RetriesOverBudget and RetriesOverShare count requests refused a
	// move to another instance: the retry budget was spent, or their
	// client held its share of it.
	RetriesOverBudget, RetriesOverShare uint64
	Instances                           []InstanceStatus
}

// InstanceStatus is an instance's state for the fleet metrics. Its
// address (host:port) is an operator's, never a client's: the series are
// bounded by the fleet's size, and an instance's series go with it. Its
// label is upstream_instance (as in the access log), not instance, which
// Prometheus gives the scraped target and would rename a metric's own
// to exported_instance.
type InstanceStatus struct {
	Addr  string
	State string // healthy, ejected or down
	// Active counts its requests under way.
	Active int64
	// Requests counts the requests it ended, by outcome; Ejections its
	// ejections, by reason.
	Requests, Ejections map[string]uint64
}

// fleetCollector reads a FleetSource at each scrape.
type fleetCollector struct {
	source                                        atomic.Pointer[fleetRef]
	available, panic, instances, active, requests *prometheus.Desc
	ejections, retries, unavailable, failover     *prometheus.Desc
	retriesRefused                                *prometheus.Desc
}

type fleetRef struct{ s FleetSource }

// instanceStates are the values of exgate_upstream_instances' state
// label, each reported for every service (0 included).
var instanceStates = []string{"healthy", "ejected", "down"}

func newFleetCollector() *fleetCollector {
	return &fleetCollector{
		available: prometheus.NewDesc(NameUpstreamAvailable,
			"1 while the service has an instance requests may be sent to; 0 while its routes answer 503 upstream_unavailable.", []string{"service"}, nil),
		panic: prometheus.NewDesc(NameUpstreamPanic,
			"1 while fewer of the service's instances than upstream.panic_threshold are healthy and requests go to ejected ones too.", []string{"service"}, nil),
		failover: prometheus.NewDesc(NameUpstreamFailover,
			"1 while no instance of the service's lowest priority (SRV) is healthy enough and requests go to a higher priority's (backups).", []string{"service"}, nil),
		instances: prometheus.NewDesc(NameUpstreamInstances,
			"The service's instances by state: healthy, ejected (by outlier detection) or down (failing the active health check).", []string{"service", "state"}, nil),
		active: prometheus.NewDesc(NameUpstreamInstanceActive,
			"Requests under way at an instance (host:port), what least-request balancing compares.", []string{"service", "upstream_instance"}, nil),
		requests: prometheus.NewDesc(NameUpstreamInstanceRequests,
			"Requests an instance ended, by outcome (success, server_error, connect_failure, abandoned).", []string{"service", "upstream_instance", "outcome"}, nil),
		ejections: prometheus.NewDesc(NameUpstreamEjections,
			"Instances ejected by outlier detection, by reason (consecutive_5xx, consecutive_5xx_writes, consecutive_5xx_reads, failure_percentage, connect_failure).", []string{"service", "upstream_instance", "reason"}, nil),
		retries: prometheus.NewDesc(NameUpstreamRetries,
			"Requests moved to another instance of the service (nothing of them reached the first, or a GET/HEAD).", []string{"service"}, nil),
		unavailable: prometheus.NewDesc(NameUpstreamUnavailable,
			"Requests answered 503 upstream_unavailable: the service had no instance to send them to.", []string{"service"}, nil),
		retriesRefused: prometheus.NewDesc(NameUpstreamRetriesRefused,
			"Requests refused a move to another instance, by reason: budget (upstream.retry_budget spent), client_share (their client held its share of it).", []string{"service", "reason"}, nil),
	}
}

// Describe sends the fleet descriptors.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.panic, c.failover, c.instances, c.active, c.requests, c.ejections, c.retries, c.unavailable, c.retriesRefused} {
		ch <- d
	}
}

// Collect sends the fleet's state now.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.source.Load()
	if r == nil {
		return
	}
	for _, s := range r.s.FleetStatus() {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, b2f(s.Available), s.Name)
		ch <- prometheus.MustNewConstMetric(c.panic, prometheus.GaugeValue, b2f(s.Panic), s.Name)
		ch <- prometheus.MustNewConstMetric(c.failover, prometheus.GaugeValue, b2f(s.Failover), s.Name)
		ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(s.Retries), s.Name)
		ch <- prometheus.MustNewConstMetric(c.unavailable, prometheus.CounterValue, float64(s.Unavailable), s.Name)
		ch <- prometheus.MustNewConstMetric(c.retriesRefused, prometheus.CounterValue, float64(s.RetriesOverBudget), s.Name, "budget")
		ch <- prometheus.MustNewConstMetric(c.retriesRefused, prometheus.CounterValue, float64(s.RetriesOverShare), s.Name, "client_share")
		byState := map[string]int{}
		for _, in := range s.Instances {
			byState[in.State]++
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(in.Active), s.Name, in.Addr)
			for o, n := range in.Requests {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n), s.Name, in.Addr, o)
			}
			for why, n := range in.Ejections {
				ch <- prometheus.MustNewConstMetric(c.ejections, prometheus.CounterValue, float64(n), s.Name, in.Addr, why)
			}
		}
		for _, state := range instanceStates {
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(byState[state]), s.Name, state)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// SetFleetSource makes the fleet metrics read s. Until it is called there
// are none. On a nil *Metrics it does nothing.
func (m *Metrics) SetFleetSource(s FleetSource) {
	if m == nil {
		return
	}
	m.fleet.source.Store(&fleetRef{s})
}
