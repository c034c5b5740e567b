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
	"time"
)

// Config is the whole gateway configuration. Its zero value is not useful;
// start from Default.
type Config struct {
	// Listen is the address of the traffic listener. Default ":8080".
	Listen string `yaml:"listen" reload:"restart"`
	// AdminListen is the address of the admin listener that serves
	// /metrics, /healthz and /readyz. Default "127.0.0.1:9090".
	AdminListen string `yaml:"admin_listen" reload:"restart"`
	// Admin configures what the admin listener serves beyond the defaults.
	Admin Admin `yaml:"admin" reload:"restart"`
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
	// Overload bounds the requests under way at the backend and sheds
	// the least important first when it is full.
	Overload Overload `yaml:"overload" reload:"live"`
	// Routes is the route table, matched in the order given except that a
	// default route ("*") is always tried last. Giving routes in YAML
	// replaces the whole default table.
	// CORS is the policy for browsers on other origins; off by default.
	CORS   CORS    `yaml:"cors" reload:"live"`
	Routes []Route `yaml:"routes" reload:"live"`
}

// Server holds the traffic listener's timeouts and size limits.
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response; it must exceed every route
	// timeout. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes is the largest request line plus headers accepted;
	// larger requests get 431. Default 16KiB.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// MaxBodyBytes is the largest request body accepted on any route;
	// larger bodies get 413. Default 1MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// MaxBufferedBytes bounds the request-body bytes held in memory at
	// once across all requests: order bodies, which are read whole to be
	// validated (every other body streams to the backend). Past it,
	// orders get 503 server_busy. Default 64MiB.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// DrainDelay is how long exgate keeps serving after a shutdown signal
	// with /readyz answering 503, so that load balancers stop sending
	// traffic before the listener closes. Default 5s; 0 closes at once.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// ShutdownTimeout bounds how long in-flight requests may take to finish
	// after the listener closes. Default 25s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TLS terminates TLS on the traffic listener. Default: off (plain
	// HTTP/1.1).
	TLS TLS `yaml:"tls"`
	// HTTP2 sets the limits of HTTP/2, offered to TLS clients through
	// ALPN.
	HTTP2 HTTP2 `yaml:"http2"`
	// ProxyProtocol accepts the PROXY protocol (v1 and v2) from load
	// balancers. Default: off.
	ProxyProtocol ProxyProtocol `yaml:"proxy_protocol"`
}

// Admin configures the admin listener.
type Admin struct {
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin
	// listener. Default false.
	Pprof bool `yaml:"pprof"`
}

// Upstream is the backend exgate forwards to.
type Upstream struct {
	// URL is the backend's base URL (http or https). A path in it is
	// prefixed to every forwarded path. Default "http://127.0.0.1:9000".
	URL URL `yaml:"url"`
	// Timeout is the default route timeout: the longest exgate waits for
	// the backend's whole response before answering 504. Default 10s.
	Timeout time.Duration `yaml:"timeout" reload:"live"`
	// DialTimeout bounds opening a connection to the backend. Default 2s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MaxIdleConns is the size of the keep-alive pool to the backend.
	// Default 512.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// MaxConnsPerHost caps concurrent connections to the backend; 0 means
	// no cap. Default 0.
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// IdleConnTimeout closes pooled connections idle this long; keep it
	// below the backend's own keep-alive timeout. Default 90s.
	IdleConnTimeout time.Duration `yaml:"idle_conn_timeout"`
	// CheckResponseID refuses (502) a backend response whose X-Request-ID
	// is not the one exgate sent with the request: with a backend that
	// echoes the id, no client can be handed another request's answer.
	// Turn it off only for a backend that sets X-Request-ID to ids of its
	// own. Default true.
	CheckResponseID bool `yaml:"check_response_id"`
}

// Values of client_ip.header.
const (
	HeaderXForwardedFor = "x-forwarded-for"
	HeaderForwarded     = "forwarded"
)

// ClientIP says how the client address is derived.
type ClientIP struct {
	// TrustedProxies lists the peers (CIDR or single address) whose
	// Header is believed, read right to left. Default: none.
	TrustedProxies []Prefix `yaml:"trusted_proxies"`
	// Header is the header the trusted proxies append the client's
	// address to: "x-forwarded-for" or "forwarded" (RFC 7239, its for=
	// parameters). Only that one is read: a proxy that writes one header
	// passes the other through from the client unchecked. Default
	// "x-forwarded-for".
	Header string `yaml:"header"`
	// IPv6Prefix is the prefix length that groups IPv6 clients into one
	// address for limiting. Default 64.
	IPv6Prefix int `yaml:"ipv6_prefix" reload:"live"`
}

// Limiter selects and configures the rate-limit store.
type Limiter struct {
	// Backend is "redis" or "memory". Empty means redis when
	// Redis.Addrs is set, memory otherwise. Default "".
	Backend string `yaml:"backend"`
	// Replicas is how many exgate instances share the limits; it sizes
	// the local fallback (rate / replicas). Default 1.
	Replicas int `yaml:"replicas" reload:"live"`
	// Redis configures the Redis store.
	Redis Redis `yaml:"redis"`
	// OnStoreError is what happens when the store fails: "open" (allow),
	// "closed" (deny with 503) or "local" (in-process limits).
	// Default "local".
	OnStoreError string `yaml:"on_store_error" reload:"live"`
	// KeySecretEnv names the environment variable holding the HMAC secret
	// that turns tokens into keys. Default "EXGATE_KEY_SECRET".
	KeySecretEnv string `yaml:"key_secret_env"`
	// Headers selects the rate-limit headers sent on limited routes:
	// "ietf" (RateLimit-Policy and RateLimit, draft-ietf-httpapi-ratelimit-headers),
	// "legacy" (X-RateLimit-Limit/-Remaining/-Reset) or "none".
	// Default "ietf".
	Headers string `yaml:"headers" reload:"live"`
	// MaxKeys bounds the keys the in-process limiter (the memory backend
	// and the local fallback) keeps; past it, the keys closest to full are
	// evicted first. Default 1000000.
	MaxKeys int `yaml:"max_keys"`
	// DenyCacheKeys bounds the in-process cache of keys known to be over
	// their limit, answered without a store round trip until they reset;
	// 0 disables the cache. Default 100000.
	DenyCacheKeys int `yaml:"deny_cache_keys"`
	// TokenSpray limits how many distinct tokens one client address may
	// present; further new tokens are limited as anonymous requests.
	TokenSpray TokenSpray `yaml:"token_spray" reload:"live"`
}

// TokenSpray bounds the distinct tokens one client address may present in
// a window, so that inventing tokens cannot multiply allowances.
type TokenSpray struct {
	// MaxTokens is how many distinct tokens an address may present per
	// Window; 0 turns the check off. Tokens mapped to a tier in the tokens
	// file are not counted. Default 20.
	MaxTokens int `yaml:"max_tokens"`
	// Window is the period over which distinct tokens are counted.
	// Default 1h.
	Window time.Duration `yaml:"window"`
}

// Redis configures the Redis store. Secrets are read from the environment
// variables named here, never from the file.
type Redis struct {
	// Addrs lists Redis addresses: one means standalone, several mean
	// Cluster, unless MasterName is set (Sentinel). Default: none.
	Addrs []string `yaml:"addrs"`
	// MasterName selects Sentinel mode. Default "".
	MasterName string `yaml:"master_name"`
	// DB is the database number (standalone and Sentinel). Default 0.
	DB int `yaml:"db"`
	// Username is the ACL user name. Default "".
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable holding the password.
	// Default "EXGATE_REDIS_PASSWORD".
	PasswordEnv string `yaml:"password_env"`
	// TLS enables TLS to Redis. Default false.
	TLS bool `yaml:"tls"`
	// TLSCAFile is a PEM file of the certificate authorities that sign
	// Redis's certificate; "" means the system's. A relative path is taken
	// from the configuration file's directory. Requires TLS. Default "".
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSCertFile and TLSKeyFile are the PEM certificate and key exgate
	// presents to Redis, which asks for one unless tls-auth-clients is no.
	// Both or neither; relative paths as TLSCAFile. Requires TLS.
	// Default "".
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSServerName is the name Redis's certificate must be valid for;
	// "" means the host of the address dialled. Requires TLS. Default "".
	TLSServerName string `yaml:"tls_server_name"`
	// Timeout is the deadline of every Redis call. Default 25ms.
	Timeout time.Duration `yaml:"timeout"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Access enables the one-line-per-request access log. Default true.
	Access bool `yaml:"access"`
	// Sampling thins out repeated log lines.
	Sampling Sampling `yaml:"sampling"`
}

// Sampling keeps, of the lines with the same level and message in each
// second, the first Initial and then every Thereafter-th. Access log
// lines all share one message, so this bounds their rate.
type Sampling struct {
	// Initial is how many lines per second are always kept; 0 turns
	// sampling off. Default 0.
	Initial int `yaml:"initial"`
	// Thereafter keeps every Thereafter-th line past Initial; 0 drops them
	// all. Default 0.
	Thereafter int `yaml:"thereafter"`
}

// Route is one entry of the route table.
type Route struct {
	// Name labels the route in limits, tiers, logs and metrics. Required
	// and unique; "default" is conventional for the "*" route.
	Name string `yaml:"name"`
	// Match is "METHOD /path/{param}/", "/path/" (any method) or "*"
	// (everything no other route matches).
	Match Match `yaml:"match"`
	// Auth is "none", "optional" or "required". Required means a request
	// without a well-formed Bearer token gets 401. Default "none"
	// (Validate turns "" into "none").
	Auth string `yaml:"auth"`
	// Validate names a body validator: "order" (one order), "order_bulk"
	// (a JSON array of orders, or of order ids to cancel) or "" for none.
	// Default "".
	Validate string `yaml:"validate"`
	// Bulk says, for a route with validate: order_bulk, which routes'
	// limits its requests are charged against.
	Bulk BulkRoute `yaml:"bulk"`
	// Timeout overrides Upstream.Timeout for this route. Default 0 (use
	// Upstream.Timeout).
	Timeout time.Duration `yaml:"timeout"`
	// OnStoreError overrides Limiter.OnStoreError for this route: "open",
	// "closed" or "local". Default "" (use Limiter.OnStoreError).
	OnStoreError string `yaml:"on_store_error"`
	// Limits are the route's rate limits. Default: none.
	Limits []Limit `yaml:"limits"`
	// Priority is the route's overload class: "cancel", "status",
	// "place", "private_read" or "market_data" (most important first).
	// Default "" (Validate writes place for validate: order and
	// order_bulk, cancel for a DELETE on an auth: required route,
	// private_read for other auth: required routes, market_data
	// otherwise). A bulk of order ids to cancel is a cancel whatever its
	// route's class.
	Priority string `yaml:"priority"`
	// MaxInFlight, when not 0, caps this route's requests under way at
	// the backend on top of the overload limit; past it, requests are
	// shed at once. Default 0.
	MaxInFlight int `yaml:"max_in_flight"`
}

// BulkRoute names the routes whose limits a bulk request is charged
// against, one unit per order or order id, so that a bulk of k orders
// costs what k single orders cost.
type BulkRoute struct {
	// Orders is the route whose limits a bulk placement (an array of
	// orders) is charged against. Required with validate: order_bulk.
	Orders string `yaml:"orders"`
	// Cancels is the route whose limits a bulk cancel (an array of order
	// ids) is charged against. Required with validate: order_bulk.
	Cancels string `yaml:"cancels"`
}

// Limit is one rate limit of a route.
type Limit struct {
	// Name labels the limit in headers, logs and metrics; unique within
	// its route. Default "" (Validate writes the key, "token" or
	// "address").
	Name string `yaml:"name"`
	// Key is what the limit counts by: "token" (the bearer token string),
	// "account" (the verified account; needs identity.verify) or
	// "address".
	Key string `yaml:"key"`
	// When is "always", "token" (only requests carrying a token) or
	// "anonymous" (only requests without one). Default "always" (Validate
	// turns "" into "always").
	When string `yaml:"when"`
	// Rate is N requests per period, written "N/period".
	Rate Rate `yaml:"rate"`
	// Burst is how many requests may arrive at once; 0 means Rate.N, and
	// Validate writes that out. Default 0.
	Burst int `yaml:"burst"`
	// Shadow decides and reports the limit without rejecting anything.
	// Default false.
	Shadow bool `yaml:"shadow"`
}

// TierLimit overrides a route's token limit for one tier.
type TierLimit struct {
	// Rate replaces the route's token limit rate.
	Rate Rate `yaml:"rate"`
	// Burst replaces the burst; 0 means Rate.N, and Validate writes that
	// out. Default 0.
	Burst int `yaml:"burst"`
}

// Auth values.
const (
	AuthNone     = "none"
	AuthOptional = "optional"
	AuthRequired = "required"
)

// Limit keys and conditions.
const (
	KeyToken     = "token"
	KeyAddress   = "address"
	WhenAlways   = "always"
	WhenToken    = "token"
	WhenAnon     = "anonymous"
	ValidateNone = ""
	ValidateOrd  = "order"
	ValidateBulk = "order_bulk"
)

// Limiter backends, store-error modes and header styles.
const (
	HeadersIETF   = "ietf"
	HeadersLegacy = "legacy"
	HeadersNone   = "none"

	BackendRedis  = "redis"
	BackendMemory = "memory"
	StoreOpen     = "open"
	StoreClosed   = "closed"
	StoreLocal    = "local"
)

// Default returns the built-in configuration: the trading API's limits
// table (trading-api.md, "Limits") and production-safe timeouts. Each call
// returns a fresh value that the caller may modify. The result is already
// normalised (Burst written out as the rate's N), so that it equals what
// Load returns with no file and no environment.
func Default() *Config {
	return &Config{
		Listen:         ":8080",
		ReloadInterval: 10 * time.Second,
		AdminListen:    "127.0.0.1:9090",
		Server: Server{
			ReadHeaderTimeout: 5 * time.Second,
			DrainDelay:        5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    16 << 10,
			MaxBodyBytes:      1 << 20,
			MaxBufferedBytes:  64 << 20,
			ShutdownTimeout:   25 * time.Second,
			TLS:               TLS{ReloadInterval: 10 * time.Second},
			HTTP2:             HTTP2{Enabled: true, MaxConcurrentStreams: 100},
			ProxyProtocol:     ProxyProtocol{Policy: ProxyRequired},
		},
		Upstream: Upstream{
			URL:             MustURL("http://127.0.0.1:9000"),
			Timeout:         10 * time.Second,
			DialTimeout:     2 * time.Second,
			MaxIdleConns:    512,
			IdleConnTimeout: 90 * time.Second,
			CheckResponseID: true,
		},
		ClientIP: ClientIP{IPv6Prefix: 64, Header: HeaderXForwardedFor},
		Limiter: Limiter{
			Replicas:      1,
			OnStoreError:  StoreLocal,
			KeySecretEnv:  "EXGATE_KEY_SECRET",
			Headers:       HeadersIETF,
			MaxKeys:       1000000,
			DenyCacheKeys: 100000,
			TokenSpray:    TokenSpray{MaxTokens: 20, Window: time.Hour},
			Redis: Redis{
				PasswordEnv: "EXGATE_REDIS_PASSWORD",
				Timeout:     25 * time.Millisecond,
			},
		},
		Validation:  DefaultValidation(),
		CORS:        DefaultCORS(),
		Idempotency: DefaultIdempotency(),
		Identity:    DefaultIdentity(),
		Log:         Log{Level: "info", Access: true},
		Overload:    DefaultOverload(),
		Routes:      DefaultRoutes(),
	}
}

// RouteTimeout returns the route's own timeout, or the upstream default.
func (c *Config) RouteTimeout(r *Route) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return c.Upstream.Timeout
}
