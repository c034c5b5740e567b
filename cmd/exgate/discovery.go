package main

import (
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// serviceSource returns the source of service name's instances: DNS when
// its dns block names a name or SRV records, else nil (its static list of
// URLs). Its lookups are counted in the discovery metrics and its
// failures logged; the TLS dialer is told the name the instances'
// certificates are for.
func (a *app) serviceSource(name string, sc config.Service) upstream.Source {
	d := sc.DNS
	if !d.On() {
		return nil
	}
	src := &upstream.DNS{
		Name: d.Name, Port: d.Port, SRV: d.SRV, Scheme: d.Scheme, Interval: d.Interval,
		Resolver: upstream.NewResolver(d.Resolver),
		Log:      a.log.Named("upstream").With(zap.String("service", name)),
		Observe:  a.discovery.DNSLookup(name),
	}
	ct := a.backendTLS[name]
	if d.Scheme != "https" || ct == nil {
		return src
	}
	return ct.NameInstances(src, upstream.ServerName(src.SRV+src.Name))
}
