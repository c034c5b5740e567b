package upstream

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/overload"
)

// Fleet is a configuration's services, by name: the default service (of
// upstream.url and upstream.urls) and those of upstream.services.
type Fleet struct {
	byName  map[string]*Service
	ordered []*Service // the default service first, then by name
	sources map[*Service]Source
	checks  map[*Service]config.HealthCheck
}

// FleetOptions are what a Fleet needs besides the configuration.
type FleetOptions struct {
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnChange is each service's Options.OnChange.
	OnChange func(Event)
	// Overload configures each instance's concurrency limit.
	Overload overload.Options
	// Transport, when set, returns how a service's instances are reached
	// when not through the fleet's Transport (Options.Transport); nil
	// from it means the fleet's.
	Transport func(name string) http.RoundTripper
	// Source, when set, returns the source of a service's instances; nil
	// from it (or no Source) means the static list of the service's urls.
	Source func(name string, s config.Service) Source
}

// NewFleet builds the services of u. A service with a static list has its
// instances at once; others get theirs when Run starts their sources.
func NewFleet(u config.Upstream, opts FleetOptions) *Fleet {
	f := &Fleet{byName: map[string]*Service{}, sources: map[*Service]Source{}, checks: map[*Service]config.HealthCheck{}}
	for _, name := range u.ServiceNames() {
		sc, _ := u.Service(name)
		tls, _ := u.ServiceTLS(name)
		var rt http.RoundTripper
		if opts.Transport != nil {
			rt = opts.Transport(name)
		}
		s := NewService(name, Options{
			Transport: rt,
			Outlier: Outlier{
				Consecutive5xx:                 sc.Outlier.Consecutive5xx,
				ConsecutiveConnectFailures:     sc.Outlier.ConsecutiveConnectFailures,
				BaseEjectionTime:               sc.Outlier.BaseEjectionTime,
				MaxEjectionTime:                sc.Outlier.MaxEjectionTime,
				MaxEjectionPercent:             sc.Outlier.MaxEjectionPercent,
				FailurePercentage:              sc.Outlier.FailurePercentageThreshold,
				FailurePercentageRequestVolume: sc.Outlier.FailurePercentageRequestVolume,
			},
			PanicThreshold: sc.PanicThreshold,
			RetryBudget:    RetryBudget{Percent: u.RetryBudget.Percent, Min: u.RetryBudget.MinRetries},
			Overload:       opts.Overload,
			MaxConns:       u.MaxConnsPerHost,
			HTTP2:          tls.HTTP2,
			Now:            opts.Now,
			OnChange:       opts.OnChange,
		})
		var src Source
		if opts.Source != nil {
			src = opts.Source(name, sc)
		}
		if src == nil {
			static := make(Static, 0, len(sc.URLs))
			for _, cu := range sc.URLs {
				if cu.URL != nil {
					static = append(static, Endpoint{URL: cu.URL})
				}
			}
			s.Update(static)
		} else {
			f.sources[s] = src
		}
		if sc.HealthCheck.Path != "" {
			f.checks[s] = sc.HealthCheck
		}
		f.byName[name] = s
		f.ordered = append(f.ordered, s)
	}
	return f
}

// Service returns the service named name ("" is the default service), or
// nil when there is none.
func (f *Fleet) Service(name string) *Service {
	if name == "" {
		name = config.DefaultService
	}
	return f.byName[name]
}

// OverloadOptions turns the configuration into the options of each
// backend instance's overload controller (its Now is the caller's).
func OverloadOptions(o config.Overload) overload.Options {
	return overload.Options{
		Min:           o.MinLimit,
		Max:           o.MaxLimit,
		Initial:       o.InitialLimit,
		Fixed:         o.FixedLimit,
		Tolerance:     1 + float64(o.TolerancePercent)/100,
		Slack:         max(o.ToleranceMin, time.Nanosecond), // 0 means none, not the default
		Window:        o.Window,
		ProbeInterval: o.ProbeInterval,
		MaxWait: [overload.NumClasses]time.Duration{
			overload.Cancel:      o.MaxWait.Cancel,
			overload.Status:      o.MaxWait.Status,
			overload.Place:       o.MaxWait.Place,
			overload.PrivateRead: o.MaxWait.PrivateRead,
			overload.MarketData:  o.MaxWait.MarketData,
		},
	}
}

// ConfigureOverload sets the options of every instance's concurrency
// limit, in every service.
func (f *Fleet) ConfigureOverload(o overload.Options) {
	for _, s := range f.ordered {
		s.ConfigureOverload(o)
	}
}

// Services returns every service, the default one first.
func (f *Fleet) Services() []*Service { return f.ordered }

// Run runs the services' sources and active health checks, the checks
// sent through rt (a service's own Transport, when it has one) on
// connections of their own (ownPool), until ctx ends.
func (f *Fleet) Run(ctx context.Context, rt http.RoundTripper) {
	var wg sync.WaitGroup
	for s, src := range f.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src.Run(ctx, s.Update)
		}()
	}
	for s, hc := range f.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runHealthChecks(ctx, ownPool(s.RoundTripper(rt)), hc)
		}()
	}
	wg.Wait()
}

// instanceURL is inst's base URL joined with path.
func instanceURL(inst *Instance, path string) *url.URL {
	u := *inst.URL
	u.Path = trimSlash(u.Path) + path
	u.RawPath = ""
	return &u
}

func trimSlash(p string) string {
	if len(p) > 0 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}
