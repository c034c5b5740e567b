package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// startFleet builds the backend services of cfg and runs their sources
// and active health checks, over transport, until shutdown.
func (a *app) startFleet(cfg *config.Config, transport http.RoundTripper) {
	lg := a.log.Named("upstream")
	oo := upstream.OverloadOptions(cfg.Overload)
	oo.Now = a.d.now // the gateway's clock, which it reads the backend's time on
	a.fleet = upstream.NewFleet(cfg.Upstream, upstream.FleetOptions{Now: a.d.now, Overload: oo,
		OnChange: func(ev upstream.Event) { logFleetEvent(lg, ev) }, Source: a.serviceSource, Transport: a.serviceTransport})
	ctx, cancel := context.WithCancel(context.Background())
	a.stopFleet = cancel
	go a.fleet.Run(ctx, transport)
}

// logFleetEvent logs an instance leaving or rejoining its service's
// rotation, with the service's state after it.
func logFleetEvent(lg *zap.Logger, ev upstream.Event) {
	if ev.Instance == nil {
		return
	}
	fields := []zap.Field{zap.String("service", ev.Service.Name()), zap.String("instance", ev.Instance.Addr),
		zap.String("event", ev.Kind.String()), zap.Int("healthy", ev.State.Healthy), zap.Int("instances", ev.State.Instances),
		zap.Bool("panic", ev.State.Panic), zap.Bool("failover", ev.State.Failover)}
	switch ev.Kind {
	case upstream.Ejected:
		lg.Warn("backend instance ejected", append(fields, zap.String("reason", ev.Reason.String()))...)
	case upstream.MarkedDown:
		lg.Warn("backend instance failed its health checks", fields...)
	default:
		lg.Info("backend instance back in the rotation", fields...)
	}
	if !ev.State.Available() {
		lg.Error("backend service has no available instance: its routes answer 503 upstream_unavailable", zap.String("service", ev.Service.Name()))
	}
}

// catalogueTransport sends the market catalogue's requests to the default
// service's instances.
func (a *app) catalogueTransport(transport http.RoundTripper) http.RoundTripper {
	return a.fleet.Service(config.DefaultService).Transport(transport)
}

// defaultInstance is the URL of the default service's first instance:
// the market catalogue's base path is read from it (its requests go to
// any instance, catalogueTransport).
func defaultInstance(cfg *config.Config) *url.URL {
	s, _ := cfg.Upstream.Service(config.DefaultService)
	if len(s.URLs) == 0 { // found in DNS: no base path
		d := s.DNS
		return &url.URL{Scheme: d.Scheme, Host: net.JoinHostPort(upstream.ServerName(d.SRV+d.Name), strconv.Itoa(max(d.Port, 1)))}
	}
	return s.URLs[0].URL
}
