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
	reloads  results
	reloadsV *prometheus.CounterVec
	notAfter prometheus.Gauge
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
		reloadsV: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameBackendTLSReloads,
			Help: "Reloads of the changed backend TLS files (upstream.tls: CA, client certificate and key), by result (success; failure: the last good files stay in use).",
		}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: NameBackendCertExpiry,
			Help: "Expiry (Unix seconds) of the client certificate exgate presents to the backends (mutual TLS); 0 without one.",
		}),
	}
	if err := register(reg, []prometheus.Collector{d.lookups, d.reloadsV, d.notAfter}); err != nil {
		return nil, err
	}
	d.reloads = newResults(d.reloadsV)
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

// BackendTLSReload counts a reload of the backend TLS files and sets the
// client certificate's expiry (zero: none), for
// upstream.ClientTLS.OnReload.
func (d *Discovery) BackendTLSReload(ok bool, notAfter time.Time) {
	if d == nil {
		return
	}
	d.reloads.of(ok).Inc()
	d.SetBackendCertNotAfter(notAfter)
}

// SetBackendCertNotAfter sets the client certificate's expiry (zero:
// none).
func (d *Discovery) SetBackendCertNotAfter(notAfter time.Time) {
	if d == nil {
		return
	}
	if notAfter.IsZero() {
		d.notAfter.Set(0)
		return
	}
	d.notAfter.Set(float64(notAfter.Unix()))
}
