package config

// Admin configures what the admin listener (admin_listen) serves beyond
// /metrics, /healthz and /readyz. It has no checks: every value is valid.
type Admin struct {
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin
	// listener. Default false.
	Pprof bool `yaml:"pprof"`
}
