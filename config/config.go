// Package config defines exgate's configuration: the YAML schema, the
// built-in defaults (which equal the trading API's limits table), loading
// with strict decoding and environment overrides, and validation that names
// every problem by its YAML path.
//
// A Config is built by starting from Default, decoding a YAML document over
// it, applying EXGATE_<PATH> environment overrides, and validating the
// result. Load and Parse do all four steps.
//
// Decoding is strict: unknown keys, type mismatches, duplicate keys and
// more than one document are errors. Mappings merge into the defaults key
// by key; a sequence replaces the default list whole, so giving routes
// replaces the entire default route table. A null value leaves the default
// in place. Anchors, aliases and merge keys ("<<") are supported.
//
// Every scalar can be overridden by the environment variable "EXGATE_" +
// its YAML path upper-cased, with "." and list indexes as "_"
// (EXGATE_UPSTREAM_URL, EXGATE_ROUTES_0_TIMEOUT,
// EXGATE_TIERS_VIP_PLACE_ORDER_RATE); lists of scalars take one
// comma-separated variable (EXGATE_LIMITER_REDIS_ADDRS=a:6379,b:6379).
// Variables under the prefix that name no existing value are ignored,
// because other tools share it. Secrets are never configuration values:
// the file only names the variables that hold them (key_secret_env,
// password_env).
//
// All problems are reported together as an Errors value; each FieldError
// names its YAML path, its line in the file, or the variable it came from.
// docs/configuration.md lists every key.
package config

import (
	"cmp"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is the whole gateway configuration. Its zero value is not useful;
// start from Default.
type Config struct {
	// Listen is the address of the traffic listener. Default ":8080".
	Listen string `yaml:"listen" reload:"restart"`
	// AdminListen is the address of the admin listener that serves
	// /metrics, /healthz, /readyz and the operator console. Default
	// "127.0.0.1:9090".
	AdminListen string `yaml:"admin_listen" reload:"restart"`
	// Admin configures the admin listener: its token, the Host names it
	// answers, pprof.
	Admin Admin `yaml:"admin" reload:"restart"`
	// Replica names this process among the replicas of a fleet: in every
	// log line, in exgate_replica_info, on the console and in `exgate
	// top`. Default "": the machine's host name (in Kubernetes, the pod's
	// name). Set it (EXGATE_REPLICA) where replicas share a host name.
	Replica string `yaml:"replica" reload:"restart"`
	// Server holds the traffic listener's timeouts and size limits.
	Server Server `yaml:"server" reload:"restart"`
	// Upstream is the backend exgate forwards to.
	Upstream Upstream `yaml:"upstream" reload:"restart"`
	// ClientIP says how the client address is derived.
	ClientIP ClientIP `yaml:"client_ip" reload:"restart"`
	// Limiter selects and configures the rate-limit store.
	Limiter Limiter `yaml:"limiter" reload:"restart"`
	// Tiers maps a tier name to per-route overrides of the token limits,
	// for tokens that the tokens file maps to that tier. Default: none.
	Tiers map[string]map[string]TierLimit `yaml:"tiers" reload:"live"`
	// ReloadInterval is how often the configuration file, the tokens file
	// and the users file are read again; when their content changed, the
	// configuration is reloaded as on SIGHUP (Kubernetes swaps a mounted
	// ConfigMap's files in place, and distroless containers have no shell
	// to send a signal from). 0 turns polling off. Default 10s.
	ReloadInterval time.Duration `yaml:"reload_interval" reload:"restart"`
	// TokensFile is the path of a YAML file mapping token ids (HMAC) to
	// tier names. Default "" (no tiers assigned).
	TokensFile string `yaml:"tokens_file" reload:"live"`
	// Validation configures order-body validation and the market
	// catalogue it checks against.
	Validation Validation `yaml:"validation" reload:"live"`
	// Idempotency configures duplicate protection on order identifiers.
	Idempotency Idempotency `yaml:"idempotency" reload:"restart"`
	// Identity says who a request counts as: its token string, or the
	// account of a JWT access token verified at the edge.
	Identity Identity `yaml:"identity" reload:"restart"`
	// Log configures logging.
	Log Log `yaml:"log" reload:"restart"`
	// Tracing configures OpenTelemetry spans exported over OTLP; off by
	// default. The OTEL_* variables override it.
	Tracing Tracing `yaml:"tracing" reload:"restart"`
	// Overload bounds the requests under way at the backend and sheds
	// the least important first when it is full.
	Overload Overload `yaml:"overload" reload:"live"`
	// CORS is the policy for browsers on other origins; off by default.
	CORS CORS `yaml:"cors" reload:"live"`
	// Routes is the route table, matched in the order given except that a
	// default route ("*") is always tried last. Giving routes in YAML
	// replaces the whole default table.
	Routes []Route `yaml:"routes" reload:"live"`
}

// Default returns the built-in configuration: the trading API's limits
// table (trading-api.md, "Limits") and production-safe timeouts, each
// section's defaults beside its type. Each call returns a fresh value that
// the caller may modify. The result is already normalised (Burst written
// out as the rate's N), so that it equals what Load returns with no file
// and no environment.
func Default() *Config {
	return &Config{
		Listen:         ":8080",
		AdminListen:    "127.0.0.1:9090",
		Admin:          DefaultAdmin(),
		ReloadInterval: 10 * time.Second,
		Server:         DefaultServer(),
		Upstream:       DefaultUpstream(),
		ClientIP:       DefaultClientIP(),
		Limiter:        DefaultLimiter(),
		Validation:     DefaultValidation(),
		CORS:           DefaultCORS(),
		Idempotency:    DefaultIdempotency(),
		Identity:       DefaultIdentity(),
		Log:            DefaultLog(),
		Tracing:        DefaultTracing(),
		Overload:       DefaultOverload(),
		Routes:         DefaultRoutes(),
	}
}

// Validate normalises c and checks it, returning every problem at once as
// an Errors value, or nil when c is valid. Normalising sets a Route.Auth
// of "" to "none", a Limit.When of "" to "always", and a Burst of 0 (in
// route limits and tier limits) to the rate's N. Each problem names its
// YAML path; Validate knows nothing of files or the environment, so its
// problems carry no line numbers (Load and Parse add them).
func (c *Config) Validate() error {
	col := &collector{}
	c.validate(col)
	return col.result()
}

// validate normalises c, then checks each section on its own, and last
// the rules that relate sections to each other (checkAcrossSections).
func (c *Config) validate(col *collector) {
	c.normalise()
	c.checkTopLevel(col)
	c.Admin.check(col, "admin")
	c.Server.check(col, "server")
	c.CORS.check(col, "cors")
	c.Upstream.check(col, "upstream")
	c.ClientIP.check(col, "client_ip")
	c.Limiter.check(col, "limiter")
	c.Log.check(col, "log")
	c.Tracing.check(col, "tracing")
	c.Validation.check(col, "validation")
	c.Idempotency.check(col, "idempotency")
	c.Identity.check(col, "identity")
	c.Overload.check(col, "overload")
	checkRoutes(col, "routes", c.Routes)
	checkTiers(col, "tiers", c.Tiers, c.Routes)
	c.checkAcrossSections(col)
}

// normalise fills in the documented meanings of zero values.
func (c *Config) normalise() {
	c.countAccounts()
	for i := range c.Routes {
		c.Routes[i].normalise()
	}
	normaliseTiers(c.Tiers)
	// store, else backend, its former name
	c.Limiter.Store = cmp.Or(c.Limiter.Store, c.Limiter.Backend)
	c.Idempotency.Store = cmp.Or(c.Idempotency.Store, c.Idempotency.Backend)
	da := &c.Idempotency.DuplicateAnswers
	da.Burst = normalBurst(da.Burst, da.Rate)
	lr := &c.Log.RefusalsPerClient
	lr.Burst = normalBurst(lr.Burst, lr.Rate)
}

// checkTopLevel checks the keys of the document's root that belong to no
// section: the listener addresses and the reload interval.
func (c *Config) checkTopLevel(col *collector) {
	checkListenAddr(col, "listen", c.Listen)
	checkListenAddr(col, "admin_listen", c.AdminListen)
	if sameListener(c.Listen, c.AdminListen) {
		col.addf("admin_listen", "must differ from listen (%q)", c.Listen)
	}
	if c.Replica != "" && !isReplicaName(c.Replica) {
		col.addf("replica", "want 1 to 253 letters, digits and . _ : - (such as \"exgate-1\"), got %q", c.Replica)
	}
	if c.ReloadInterval != 0 && c.ReloadInterval < time.Second {
		col.addf("reload_interval", "must be at least 1s (0 turns polling off), got %s", c.ReloadInterval)
	}
}

// checkListenAddr checks a listener address: host:port with a numeric
// port from 0 to 65535; the host may be empty (all interfaces).
func checkListenAddr(col *collector, p path, a string) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		col.addf(p, "want host:port such as \":8080\" or \"127.0.0.1:9090\", got %q", a)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port == "" || n > 65535 {
		col.addf(p, "port %q must be a number from 0 to 65535", port)
	}
	if strings.ContainsAny(host, " \t/") {
		col.addf(p, "host %q is not a host name or IP address", host)
	}
}

// sameListener reports whether two listener addresses would claim the
// same socket: the same non-zero port on the same host, or on hosts of
// which one is a wildcard.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}
