package config

import (
	"net/netip"
	"strings"
)

// Admin configures the admin listener (admin_listen) beyond its address:
// who may use the operator console and pprof, which Host names it
// answers, and pprof itself.
type Admin struct {
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin
	// listener. Default false.
	Pprof bool `yaml:"pprof"`
	// TokenEnv names the environment variable holding the admin token:
	// when it is set and not empty, the console's API (/admin/…) and
	// pprof need "Authorization: Bearer <token>". The token itself is
	// never a configuration value. Default "EXGATE_ADMIN_TOKEN".
	TokenEnv string `yaml:"token_env"`
	// AllowedHosts are host names, besides the ones always answered, that
	// the admin listener accepts in a request's Host header for all but
	// /healthz: the console, pprof, /readyz and /metrics. Always
	// answered: an IP address, localhost (and names under .localhost),
	// the host of admin_listen and the machine's host name. Any other
	// name is refused with 403 (a page of another site whose name was
	// pointed at this listener — DNS rebinding — must not read the
	// console, the checks' errors or the metrics). Default: none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// MaxConnections bounds the connections the admin listener holds at
	// once: past it, a new connection waits in the kernel's accept queue
	// until one closes, and holds no file descriptor of the process,
	// which traffic, the backend and Redis share (docs/pools.md). Within
	// it each client address has a share (edge.ShareAdminConnections: of
	// three quarters of it, the rest kept for the connections refused),
	// so that one caller cannot keep the probes and Prometheus out; an
	// address at its share closes its oldest idle connection for a new
	// one, and is refused (503 too_many_connections) only when it has none
	// idle. Default 64.
	MaxConnections int `yaml:"max_connections"`
}

// DefaultAdmin returns the admin listener's defaults: no pprof, the
// admin token in EXGATE_ADMIN_TOKEN, 64 connections at once.
func DefaultAdmin() Admin { return Admin{TokenEnv: "EXGATE_ADMIN_TOKEN", MaxConnections: 64} }

// check reports problems in the admin section at p.
func (a *Admin) check(col *collector, p path) {
	col.envName(p.key("token_env"), a.TokenEnv)
	if a.MaxConnections < 1 {
		col.addf(p.key("max_connections"), "must be at least 1, got %d", a.MaxConnections)
	}
	for i, h := range a.AllowedHosts {
		if !isHostName(h) {
			col.addf(p.key("allowed_hosts").index(i),
				"want a host name such as \"exgate-admin.internal\" (no scheme, port or path), got %q", h)
		}
	}
}

// isHostName reports whether s is a DNS host name (letters, digits,
// hyphens and dots, with an optional final dot) or an IP address.
func isHostName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i] | 0x20
			if !(c >= 'a' && c <= 'z' || label[i] >= '0' && label[i] <= '9' || label[i] == '-' || label[i] == '_') {
				return false
			}
		}
	}
	return true
}
