package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the metrics of how a service's instances are found and
// dialled: DNS discovery and TLS to the backend.
const (
	NameDNSLookups        = "exgate_upstream_dns_lookups_total"
	NameBackendTLSReloads = "exgate_upstream_tls_reloads_total"
	NameBackendCertExpiry = "exgate_upstream_tls_client_certificate_not_after_timestamp_seconds"
)

// Discovery is the set of collectors of a fleet's discovery and backend
// TLS, labelled by service. Build it with NewDiscovery; every method is
// safe on a nil *Discovery and then does nothing.
type Discovery struct {
	lookups  *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	notAfter *prometheus.GaugeVec
}

// NewDiscovery builds the discovery collectors and registers them on reg.
// Like New, it unregisters what it registered when one fails.
func NewDiscovery(reg prometheus.Registerer) (*Discovery, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	d := &Discovery{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameDNSLookups,
			Help: "DNS lookups of a service's instances, by service and result (ok; empty or error: the instances last found are kept).",
		}, []string{"service", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameBackendTLSReloads,
			Help: "Reloads of the changed TLS files a service's instances are dialled with (upstream.tls, or the service's own tls: CA, client certificate and key), by service and result (success; failure: the last good files stay in use).",
		}, []string{"service", "result"}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameBackendCertExpiry,
			Help: "Expiry (Unix seconds) of the client certificate exgate presents to a service's instances (mutual TLS), by service; 0 without one.",
		}, []string{"service"}),
	}
	if err := register(reg, []prometheus.Collector{d.lookups, d.reloads, d.notAfter}); err != nil {
		return nil, err
	}
	return d, nil
}

// DiscoveryNames lists the discovery metric names.
func DiscoveryNames() []string {
	return []string{NameDNSLookups, NameBackendTLSReloads, NameBackendCertExpiry}
}

// DNSLookup returns the function that counts service's lookups by
// result, for upstream.DNS.Observe; its children are resolved once.
func (d *Discovery) DNSLookup(service string) func(result string) {
	if d == nil {
		return func(string) {}
	}
	c := map[string]prometheus.Counter{}
	for _, r := range []string{"ok", "empty", "error"} {
		c[r] = d.lookups.WithLabelValues(service, r)
	}
	return func(result string) {
		if ctr, ok := c[result]; ok {
			ctr.Inc()
		}
	}
}

// BackendTLS returns the function that counts a reload of the TLS files
// that services' instances are dialled with and sets the client
// certificate's expiry (zero: none), for upstream.ClientTLS.OnReload,
// and sets the expiry in force now, notAfter. Each of services gets its
// series: those that share upstream.tls count each of its reloads.
func (d *Discovery) BackendTLS(services []string, notAfter time.Time) func(ok bool, notAfter time.Time) {
	if d == nil {
		return func(bool, time.Time) {}
	}
	type series struct {
		reloads  results
		notAfter prometheus.Gauge
	}
	all := make([]series, len(services))
	for i, svc := range services {
		all[i] = series{results{d.reloads.WithLabelValues(svc, "failure"), d.reloads.WithLabelValues(svc, "success")}, d.notAfter.WithLabelValues(svc)}
	}
	set := func(t time.Time) {
		v := 0.0
		if !t.IsZero() {
			v = float64(t.Unix())
		}
		for _, s := range all {
			s.notAfter.Set(v)
		}
	}
	set(notAfter)
	return func(ok bool, t time.Time) {
		for _, s := range all {
			s.reloads.of(ok).Inc()
		}
		set(t)
	}
}
