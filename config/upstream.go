package config

import (
	"net/textproto"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// DefaultService is the name of the service that upstream.url and
// upstream.urls name, which a route without a service forwards to.
const DefaultService = "default"

// Upstream is the backend fleet exgate forwards to: the default service's
// instances, the connection settings every service shares, and the named
// services (docs/upstream.md).
type Upstream struct {
	// URL is the backend's base URL (http or https), the default
	// service's one instance when URLs is empty. A path in it is prefixed
	// to every forwarded path. Default "http://127.0.0.1:9000".
	URL URL `yaml:"url"`
	// URLs are the default service's instances, when it has several
	// (EXGATE_UPSTREAM_URLS, comma-separated); URL is then not used.
	// Default: none.
	URLs []URL `yaml:"urls"`
	// DNS finds the default service's instances in DNS instead of URL
	// and URLs (docs/upstream.md). Default: off.
	DNS Discovery `yaml:"dns"`
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
	// ForwardHosts are the names clients reach exgate by (the API's
	// public names) whose Host the backend gets as it came: the name a
	// backend builds its absolute links from (Django's
	// build_absolute_uri, DRF's pagination, a Location), so that clients
	// get links to the API, never to an instance. A request for any other
	// Host, or none, sends the instance's host:port, as NGINX's default
	// Host does: a Host the client chose is never one the backend may
	// write into a password reset mail or a cached page, nor one a
	// backend whose ALLOWED_HOSTS lists its own address refuses. A name
	// matches case-insensitively, whatever the port; "*" matches any
	// (for a backend that checks Host itself). X-Forwarded-Host carries
	// the client's Host under the same rule, and is not sent otherwise.
	// Default: none.
	ForwardHosts []string `yaml:"forward_hosts"`
	// HideHeaders are the fields of the backend's answers (and of its 1xx
	// answers) that never reach a client, as NGINX's proxy_hide_header:
	// those that tell an attacker what runs behind exgate and its version.
	// Not a field that frames or describes the body (Content-*,
	// Transfer-Encoding, Trailer), Connection nor X-Request-ID. [] passes
	// them all. Default Server and X-Powered-By.
	HideHeaders []string `yaml:"hide_headers"`
	// TLS is how instances with an https URL are dialled: a private CA,
	// a client certificate (mutual TLS), the server name, HTTP/2.
	TLS BackendTLS `yaml:"tls"`
	// HealthCheck is the default service's active health check.
	HealthCheck HealthCheck `yaml:"health_check"`
	// Outlier is the default service's passive outlier ejection.
	Outlier Outlier `yaml:"outlier"`
	// PanicThreshold is the share of the default service's instances, in
	// percent, below which the healthy ones alone are not trusted with
	// the load: requests are then balanced across every instance that
	// accepts connections, ejected ones included. 0 turns panic mode
	// off. Default 50.
	PanicThreshold int `yaml:"panic_threshold"`
	// RetryBudget bounds the requests that move to another instance.
	RetryBudget RetryBudget `yaml:"retry_budget"`
	// Services are the other named services routes may forward to
	// (routes[].service), each with its own instances, health check and
	// outlier ejection; the connection settings above are shared, and TLS
	// unless a service has a tls block of its own. Default: none.
	Services map[string]Service `yaml:"services"`
}

// Service is a named set of backend instances.
type Service struct {
	// URLs are the service's instances. Required unless DNS finds them.
	URLs []URL `yaml:"urls"`
	// DNS finds the service's instances in DNS instead of URLs. Default:
	// off.
	DNS Discovery `yaml:"dns"`
	// HealthCheck is the service's active health check.
	HealthCheck HealthCheck `yaml:"health_check"`
	// Outlier is the service's passive outlier ejection.
	Outlier Outlier `yaml:"outlier"`
	// PanicThreshold is as upstream.panic_threshold, for this service.
	// Default 50.
	PanicThreshold int `yaml:"panic_threshold"`
	// TLS is how this service's https instances are dialled, when it
	// differs from the other services' (a CA, a client certificate or a
	// server name of its own): the keys and defaults of upstream.tls, not
	// its values. The service then has a connection pool of its own (the
	// pool settings of upstream). Nil, the default, means upstream.tls.
	TLS *BackendTLS `yaml:"tls"`
}

// fillDefaults gives a service named in the file the defaults of its
// keys before the file's values are read over them.
func (s *Service) fillDefaults() {
	*s = Service{HealthCheck: DefaultHealthCheck(), Outlier: DefaultOutlier(), PanicThreshold: 50, DNS: defaultDiscovery()}
}

// HealthCheck is a service's active health check: each instance is sent
// GET path every interval, and an answer of 2xx within the timeout
// passes.
type HealthCheck struct {
	// Path is the path checked, such as "/healthz"; "" turns active
	// checks off. Default "".
	Path string `yaml:"path"`
	// Interval is the time between two checks of an instance. Default 5s.
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds one check. Default 1s.
	Timeout time.Duration `yaml:"timeout"`
	// HealthyThreshold is how many checks in a row an instance marked
	// down must pass to be sent requests again. Default 2.
	HealthyThreshold int `yaml:"healthy_threshold"`
	// UnhealthyThreshold is how many checks in a row an instance must
	// fail to be marked down. Default 3.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
}

// DefaultHealthCheck returns the health-check defaults: off, and when a
// path is set, every 5s within 1s, down after 3 failures, up after 2
// passes.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{Interval: 5 * time.Second, Timeout: time.Second, HealthyThreshold: 2, UnhealthyThreshold: 3}
}

// Outlier is a service's passive outlier ejection: an instance that
// answers a run of server errors, or refuses a run of connections, is
// taken out of the rotation for a time that grows with each ejection.
type Outlier struct {
	// Consecutive5xx ejects an instance after this many 5xx answers (or
	// resets and timeouts after the request reached it) in a row, over
	// all its requests or over its reads (GET, HEAD) or its writes
	// (orders, cancels) alone; 0 never. Default 5.
	Consecutive5xx int `yaml:"consecutive_5xx"`
	// ConsecutiveConnectFailures ejects an instance after this many
	// failed connects in a row; 0 never. Default 3.
	ConsecutiveConnectFailures int `yaml:"consecutive_connect_failures"`
	// BaseEjectionTime is how long a first ejection lasts; the n-th lasts
	// n times as long. Default 30s.
	BaseEjectionTime time.Duration `yaml:"base_ejection_time"`
	// MaxEjectionTime caps an ejection. Default 5m.
	MaxEjectionTime time.Duration `yaml:"max_ejection_time"`
	// MaxEjectionPercent is the largest share of the service's instances
	// ejected at once, in percent (at least one while it is above 0); 0
	// turns ejection off. Default 50.
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
	// FailurePercentageThreshold ejects an instance whose reads or
	// writes failed (5xx, resets, timeouts) in at least this share, in
	// percent, of its last FailurePercentageRequestVolume of them, unless
	// one client made most of those failures; 0 never. Default 0.
	FailurePercentageThreshold int `yaml:"failure_percentage_threshold"`
	// FailurePercentageRequestVolume is how many of an instance's reads,
	// or of its writes, a share is judged over. Default 50, at least 10.
	FailurePercentageRequestVolume int `yaml:"failure_percentage_request_volume"`
}

// DefaultOutlier returns the outlier-ejection defaults.
func DefaultOutlier() Outlier {
	return Outlier{Consecutive5xx: 5, ConsecutiveConnectFailures: 3, BaseEjectionTime: 30 * time.Second,
		MaxEjectionTime: 5 * time.Minute, MaxEjectionPercent: 50, FailurePercentageRequestVolume: 50}
}

// RetryBudget bounds the requests retried on another instance, as
// Envoy's retry budget does: at most Percent of a service's requests under
// way may be retries, and MinRetries at any time whatever the share.
type RetryBudget struct {
	// Percent is the share of a service's requests under way that may be
	// retries at once. Default 20.
	Percent int `yaml:"percent"`
	// MinRetries is how many retries may be under way at once whatever
	// the share. Default 3.
	MinRetries int `yaml:"min_retries"`
}

// ServiceNames returns the names of every service: the default one first,
// then the others in order.
func (u *Upstream) ServiceNames() []string {
	names := make([]string, 0, 1+len(u.Services))
	for n := range u.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	return append([]string{DefaultService}, names...)
}

// Service returns the service named name (DefaultService: the one of
// upstream.url and upstream.urls), and whether there is one.
func (u *Upstream) Service(name string) (Service, bool) {
	if name == "" || name == DefaultService {
		s := Service{URLs: u.URLs, DNS: u.DNS, HealthCheck: u.HealthCheck, Outlier: u.Outlier, PanicThreshold: u.PanicThreshold}
		if len(s.URLs) == 0 && !u.DNS.On() && u.URL.URL != nil {
			s.URLs = []URL{u.URL}
		}
		return s, true
	}
	s, ok := u.Services[name]
	return s, ok
}

// ServiceTLS returns the TLS settings service name's https instances are
// dialled with, and their YAML path: the service's own tls block, else
// upstream.tls.
func (u *Upstream) ServiceTLS(name string) (BackendTLS, string) {
	if s, ok := u.Services[name]; ok && name != DefaultService && s.TLS != nil {
		return *s.TLS, "upstream.services." + name + ".tls"
	}
	return u.TLS, "upstream.tls"
}

// DefaultUpstream returns the backend defaults: a backend on the same
// host, port 9000.
func DefaultUpstream() Upstream {
	return Upstream{
		URL:             MustURL("http://127.0.0.1:9000"),
		Timeout:         10 * time.Second,
		DialTimeout:     2 * time.Second,
		MaxIdleConns:    512,
		IdleConnTimeout: 90 * time.Second,
		CheckResponseID: true,
		HideHeaders:     []string{"Server", "X-Powered-By"},
		TLS:             defaultBackendTLS(),
		HealthCheck:     DefaultHealthCheck(),
		Outlier:         DefaultOutlier(),
		PanicThreshold:  50,
		RetryBudget:     RetryBudget{Percent: 20, MinRetries: 3},
		DNS:             defaultDiscovery(),
	}
}

// check reports problems in the upstream section at p.
func (u *Upstream) check(col *collector, p path) {
	var urls path
	if len(u.URLs) > 0 {
		urls = p.key("urls")
	}
	u.DNS.check(col, p.key("dns"), urls)
	switch {
	case len(u.URLs) > 0:
		checkURLs(col, p.key("urls"), u.URLs)
	case u.DNS.On():
	case u.URL.URL == nil:
		col.addf(p.key("url"), "required, such as \"http://127.0.0.1:9000\"")
	default:
		checkURL(col, p.key("url"), u.URL)
	}
	u.HealthCheck.check(col, p.key("health_check"))
	u.Outlier.check(col, p.key("outlier"))
	checkPercent(col, p.key("panic_threshold"), u.PanicThreshold)
	checkPercent(col, p.key("retry_budget").key("percent"), u.RetryBudget.Percent)
	if u.RetryBudget.MinRetries < 0 {
		col.addf(p.key("retry_budget").key("min_retries"), "must not be negative, got %d", u.RetryBudget.MinRetries)
	}
	for _, name := range u.ServiceNames()[1:] {
		sp := p.key("services").key(name)
		if name == DefaultService {
			col.addf(sp, "%q is the service of upstream.url and upstream.urls; give this one another name", name)
			continue
		}
		if !isName(name) {
			col.addf(sp, "%q must be lower-case letters, digits and _", name)
		}
		s := u.Services[name]
		var urls path
		if len(s.URLs) > 0 {
			urls = sp.key("urls")
		}
		s.DNS.check(col, sp.key("dns"), urls)
		if len(s.URLs) == 0 && !s.DNS.On() {
			col.addf(sp.key("urls"), "required unless dns finds the instances: such as [\"http://10.0.0.1:9000\"]")
		}
		checkURLs(col, sp.key("urls"), s.URLs)
		s.HealthCheck.check(col, sp.key("health_check"))
		s.Outlier.check(col, sp.key("outlier"))
		checkPercent(col, sp.key("panic_threshold"), s.PanicThreshold)
		if s.TLS != nil {
			s.TLS.check(col, sp.key("tls"), s.DialsHTTPS())
		}
	}
	u.TLS.check(col, p.key("tls"), u.DialsHTTPS())
	checkHideHeaders(col, p.key("hide_headers"), u.HideHeaders)
	for i, h := range u.ForwardHosts {
		if h != "*" && !isHostName(h) {
			col.addf(p.key("forward_hosts").index(i),
				"want a host name such as \"api.exchange.example\" (no scheme, port or path), or \"*\"; got %q", h)
		}
	}
	col.positive(p.key("timeout"), u.Timeout)
	col.positive(p.key("dial_timeout"), u.DialTimeout)
	col.positive(p.key("idle_conn_timeout"), u.IdleConnTimeout)
	if u.MaxIdleConns < 0 {
		col.addf(p.key("max_idle_conns"), "must not be negative, got %d", u.MaxIdleConns)
	}
	if u.MaxConnsPerHost < 0 {
		col.addf(p.key("max_conns_per_host"), "must not be negative (0 means no cap), got %d", u.MaxConnsPerHost)
	}
}

// checkHideHeaders reports an entry of upstream.hide_headers that is not
// a field name, or names a field the answer cannot go without: one that
// frames or describes its body, Connection, or X-Request-ID, by which the
// answer is told to be its request's.
func checkHideHeaders(col *collector, p path, names []string) {
	for i, n := range names {
		c := textproto.CanonicalMIMEHeaderKey(n)
		switch {
		case !httpguts.ValidHeaderFieldName(n):
			col.addf(p.index(i), "want a header field name, such as \"Server\"; got %q", n)
		case strings.HasPrefix(c, "Content-") || c == "Transfer-Encoding" || c == "Trailer" || c == "Connection" || c == "X-Request-Id":
			col.addf(p.index(i), "%s cannot be hidden: the answer needs it", n)
		}
	}
}

// checkURL reports an instance URL that is not an absolute http or https
// URL.
func checkURL(col *collector, p path, u URL) {
	if u.URL == nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		col.addf(p, "want an absolute http or https URL, got %q", u.Redacted())
	}
}

// checkURLs checks a service's instance URLs, each once.
func checkURLs(col *collector, p path, urls []URL) {
	seen := make(map[string]int, len(urls))
	for i, u := range urls {
		if u.URL == nil {
			col.addf(p.index(i), "want an absolute http or https URL")
			continue
		}
		checkURL(col, p.index(i), u)
		if j, dup := seen[u.String()]; dup {
			col.addf(p.index(i), "%q is already %s", u.Redacted(), p.index(j))
		}
		seen[u.String()] = i
		// Instances of one service are interchangeable: one base path.
		if first := urls[0].URL; first != nil && strings.TrimSuffix(u.Path, "/") != strings.TrimSuffix(first.Path, "/") {
			col.addf(p.index(i), "path %q differs from %s's %q: the instances of a service serve one API, under one path", u.Path, p.index(0), first.Path)
		}
	}
}

func checkPercent(col *collector, p path, n int) {
	if n < 0 || n > 100 {
		col.addf(p, "want a percentage from 0 to 100, got %d", n)
	}
}

func (h *HealthCheck) check(col *collector, p path) {
	if h.Path != "" && (h.Path[0] != '/' || !isRequestTarget(h.Path)) {
		col.addf(p.key("path"), "want an absolute path such as \"/healthz\", got %q", h.Path)
	}
	col.positive(p.key("interval"), h.Interval)
	col.positive(p.key("timeout"), h.Timeout)
	if h.Timeout > h.Interval && h.Interval > 0 {
		col.addf(p.key("timeout"), "%s exceeds interval (%s): a check would still run when the next one starts", h.Timeout, h.Interval)
	}
	if h.HealthyThreshold < 1 {
		col.addf(p.key("healthy_threshold"), "want at least 1, got %d", h.HealthyThreshold)
	}
	if h.UnhealthyThreshold < 1 {
		col.addf(p.key("unhealthy_threshold"), "want at least 1, got %d", h.UnhealthyThreshold)
	}
}

// isRequestTarget reports whether s is made of the bytes a request
// target may hold unescaped (RFC 3986 pchar, "/" and "?").
func isRequestTarget(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '#' || c == '"' || c == '<' || c == '>' || c == '\\' {
			return false
		}
	}
	return true
}

func (o *Outlier) check(col *collector, p path) {
	if o.Consecutive5xx < 0 {
		col.addf(p.key("consecutive_5xx"), "must not be negative (0 turns it off), got %d", o.Consecutive5xx)
	}
	if o.ConsecutiveConnectFailures < 0 {
		col.addf(p.key("consecutive_connect_failures"), "must not be negative (0 turns it off), got %d", o.ConsecutiveConnectFailures)
	}
	col.positive(p.key("base_ejection_time"), o.BaseEjectionTime)
	col.positive(p.key("max_ejection_time"), o.MaxEjectionTime)
	if o.MaxEjectionTime < o.BaseEjectionTime && o.MaxEjectionTime > 0 {
		col.addf(p.key("max_ejection_time"), "%s is below base_ejection_time (%s)", o.MaxEjectionTime, o.BaseEjectionTime)
	}
	checkPercent(col, p.key("max_ejection_percent"), o.MaxEjectionPercent)
	checkPercent(col, p.key("failure_percentage_threshold"), o.FailurePercentageThreshold)
	if o.FailurePercentageRequestVolume < minFailureVolume {
		col.addf(p.key("failure_percentage_request_volume"), "want at least %d (a share of fewer requests is noise), got %d",
			minFailureVolume, o.FailurePercentageRequestVolume)
	}
}

// minFailureVolume is the fewest requests a failure share is judged over.
const minFailureVolume = 10

// DialsHTTPS reports whether an instance of a service that has no tls
// block of its own is dialled over TLS, which upstream.tls is then for:
// an https URL, or dns.scheme https.
func (u *Upstream) DialsHTTPS() bool {
	for _, name := range u.ServiceNames() {
		if s, _ := u.Service(name); s.TLS == nil && s.DialsHTTPS() {
			return true
		}
	}
	return false
}

// DialsHTTPS reports whether an instance of s is dialled over TLS: an
// https URL, or dns.scheme https.
func (s *Service) DialsHTTPS() bool {
	if s.DNS.On() && s.DNS.Scheme == "https" {
		return true
	}
	return slices.ContainsFunc(s.URLs, func(cu URL) bool { return cu.URL != nil && cu.Scheme == "https" })
}
