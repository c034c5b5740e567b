package main

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
)

// readinessChecks are what /readyz looks at besides draining. Whether a
// failure makes the instance not ready, and what /readyz says it
// degrades, follow the configuration in force (reloads included):
//   - backend: accepts connections; critical (without it every request
//     fails).
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
	u := a.cfg.Upstream.URL
	hostport := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			hostport = net.JoinHostPort(u.Hostname(), "443")
		} else {
			hostport = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	checks := []admin.Check{{
		Name: "backend", Critical: true,
		Run: func(ctx context.Context) error {
			var dl net.Dialer
			c, err := dl.DialContext(ctx, "tcp", hostport)
			if err != nil {
				return err
			}
			return c.Close()
		},
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
