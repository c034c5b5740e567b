package metrics

import (
	"errors"
	"fmt"
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
			Help: "Reloads of a service's changed backend TLS files (CA, client certificate and key), by service and result (success; failure: the last good files stay in use).",
		}, []string{"service", "result"}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameBackendCertExpiry,
			Help: "Expiry (Unix seconds) of the client certificate exgate presents to a service's instances (mutual TLS); absent without one.",
		}, []string{"service"}),
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{d.lookups, d.reloads, d.notAfter} {
		if err := reg.Register(c); err != nil {
			for _, r := range done {
				reg.Unregister(r)
			}
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
		done = append(done, c)
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

// BackendTLSReload returns the function that counts service's backend
// TLS reloads and sets its client certificate's expiry, for
// upstream.ClientTLS.OnReload; a zero notAfter (no client certificate)
// removes the gauge.
func (d *Discovery) BackendTLSReload(service string) func(ok bool, notAfter time.Time) {
	if d == nil {
		return func(bool, time.Time) {}
	}
	success, failure := d.reloads.WithLabelValues(service, "success"), d.reloads.WithLabelValues(service, "failure")
	return func(ok bool, notAfter time.Time) {
		if ok {
			success.Inc()
		} else {
			failure.Inc()
		}
		if notAfter.IsZero() {
			d.notAfter.DeleteLabelValues(service)
		} else {
			d.notAfter.WithLabelValues(service).Set(float64(notAfter.Unix()))
		}
	}
}

// SetBackendCertNotAfter sets service's client certificate expiry as
// loaded at start (zero: none).
func (d *Discovery) SetBackendCertNotAfter(service string, notAfter time.Time) {
	if d == nil || notAfter.IsZero() {
		return
	}
	d.notAfter.WithLabelValues(service).Set(float64(notAfter.Unix()))
}
