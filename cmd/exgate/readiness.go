package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// readinessChecks are what /readyz looks at besides draining. Whether a
// failure makes the instance not ready, and what /readyz says it
// degrades, follow the configuration in force (reloads included):
//   - upstream: every backend service has an instance requests may be
//     sent to; never critical: readiness is exgate's own. A backend
//     outage taking every replica out of the load balancer would turn the
//     answer clients get from a JSON 503 upstream_unavailable (on the
//     failing service's routes only) into failed connections on all of
//     them.
//   - catalogue: the market catalogue is loaded; critical while a route
//     validates orders and validation.before_catalogue is reject.
//   - redis (the rate-limit store) answers; critical only while a limited
//     route fails closed without it: with a local or open fallback the
//     gateway still serves, and taking every replica out of the load
//     balancer because the store they share failed would be an outage.
//   - duplicate_protection: its store has room, and in Redis answers and
//     has the replicas replica_acks waits for on every master; not
//     critical for the same reason: only orders with an identifier are
//     refused.
func (a *app) readinessChecks() []admin.Check {
	checks := []admin.Check{{
		Name: "upstream",
		Impact: func() (bool, string) {
			return false, "the routes of a service without an available instance answer 503 upstream_unavailable"
		},
		Run: func(context.Context) error { return unavailableServices(a.fleet) },
	}}
	if a.cat != nil {
		cat := a.cat
		checks = append(checks, admin.Check{
			Name: "catalogue",
			Impact: func() (bool, string) {
				if a.live.Load().Validation.BeforeCatalogue == config.BeforeCataloguePass {
					return false, "orders are checked without the market rules"
				}
				return true, "orders are refused (503 catalogue_unavailable)"
			},
			Run: func(context.Context) error {
				if !a.live.Load().ValidatesOrders() || cat.Ready() {
					return nil
				}
				return errors.New("market catalogue not loaded yet")
			},
		})
	}
	if a.limits.Client != nil {
		checks = append(checks, admin.Check{
			Name:   "redis",
			Impact: func() (bool, string) { return storeImpact(a.live.Load()) },
			Run:    a.limits.Ping,
		})
	}
	if a.dup != nil {
		checks = append(checks, admin.Check{
			Name:   "duplicate_protection",
			Impact: func() (bool, string) { return false, "orders with an identifier are refused" },
			Run:    a.dup.check,
		})
	}
	return checks
}

// storeImpact says what a failing rate-limit store degrades under cfg:
// which limited routes answer 503 (on_store_error: closed), are limited
// per replica (local) or not at all (open), and whether that makes the
// instance not ready (only failing closed does).
func storeImpact(cfg *config.Config) (critical bool, degraded string) {
	var byMode = map[string][]string{}
	for _, r := range cfg.Routes {
		if len(r.Limits) == 0 {
			continue
		}
		mode := r.OnStoreError
		if mode == "" {
			mode = cfg.Limiter.OnStoreError
		}
		byMode[mode] = append(byMode[mode], r.Name)
	}
	var parts []string
	for _, m := range []struct{ mode, says string }{
		{config.StoreClosed, "answer 503 rate_limit_unavailable (on_store_error: closed)"},
		{config.StoreLocal, "are limited by each replica on its own (on_store_error: local)"},
		{config.StoreOpen, "are not limited (on_store_error: open)"},
	} {
		if names := byMode[m.mode]; len(names) > 0 {
			parts = append(parts, "routes "+strings.Join(names, ", ")+" "+m.says)
		}
	}
	if len(parts) == 0 {
		return false, "rate-limit store unreachable"
	}
	return len(byMode[config.StoreClosed]) > 0, strings.Join(parts, "; ") + ": rate-limit store unreachable"
}

// unavailableServices names the services with no instance a request may
// be sent to, and why, or returns nil when every service has one.
func unavailableServices(f *upstream.Fleet) error {
	var down []string
	for _, s := range f.Services() {
		st := s.State()
		if st.Available() {
			continue
		}
		down = append(down, fmt.Sprintf("service %s: no available instance (%d instances: %d down, %d ejected)",
			s.Name(), st.Instances, st.Down, st.Ejected))
	}
	if len(down) == 0 {
		return nil
	}
	return errors.New(strings.Join(down, "; "))
}
