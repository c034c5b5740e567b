package config

import (
	"errors"
	"slices"
	"testing"
)

// TestUpstreamHideHeadersConfig: upstream.hide_headers hides Server and
// X-Powered-By by default, [] none, and refuses a malformed name or a
// field the answer needs.
func TestUpstreamHideHeadersConfig(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "upstream.hide_headers hides Server and X-Powered-By by default", yaml: "{}\n",
			check: func(t *testing.T, c *Config) {
				if !slices.Equal(c.Upstream.HideHeaders, []string{"Server", "X-Powered-By"}) {
					t.Errorf("hide_headers %q", c.Upstream.HideHeaders)
				}
			}},
		{name: "upstream.hide_headers: [] hides none", yaml: "upstream: {hide_headers: []}\n",
			check: func(t *testing.T, c *Config) {
				if len(c.Upstream.HideHeaders) != 0 {
					t.Errorf("hide_headers %q", c.Upstream.HideHeaders)
				}
			}},
		{name: "upstream.hide_headers: not a field the answer needs, nor a malformed name",
			yaml:  "upstream: {hide_headers: [X-Runtime, content-type, Transfer-Encoding, X-Request-ID, Connection, 'Bad Name']}\n",
			paths: []string{"upstream.hide_headers[1]", "upstream.hide_headers[2]", "upstream.hide_headers[3]", "upstream.hide_headers[4]", "upstream.hide_headers[5]"}},
	})
}

// TestUpstreamForwardHostsConfig: upstream.forward_hosts forwards no
// client's Host by default; it takes host names, addresses and "*", and
// refuses a scheme, a port or a path.
func TestUpstreamForwardHostsConfig(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "upstream.forward_hosts is empty by default", yaml: "{}\n",
			check: func(t *testing.T, c *Config) {
				if len(c.Upstream.ForwardHosts) != 0 {
					t.Errorf("forward_hosts %q", c.Upstream.ForwardHosts)
				}
			}},
		{name: "upstream.forward_hosts takes names, addresses and *", yaml: "upstream: {forward_hosts: [api.exchange.example, API.Exchange.Example., 192.0.2.7, '::1', '*']}\n",
			check: func(t *testing.T, c *Config) {
				if len(c.Upstream.ForwardHosts) != 5 {
					t.Errorf("forward_hosts %q", c.Upstream.ForwardHosts)
				}
			}},
		{name: "upstream.forward_hosts: no scheme, port or path", yaml: "upstream: {forward_hosts: [ok.example, 'https://api.example', 'api.example:443', api.example/x, '*.example', '']}\n",
			paths: []string{"upstream.forward_hosts[1]", "upstream.forward_hosts[2]", "upstream.forward_hosts[3]", "upstream.forward_hosts[4]", "upstream.forward_hosts[5]"}},
	})
}

func TestUpstreamServicesConfig(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	tests := []parseCase{
		{name: "upstream.url is the default service's one instance", yaml: "upstream: {url: 'http://b:9000/base'}\n",
			check: func(t *testing.T, c *Config) {
				s, ok := c.Upstream.Service("")
				if !ok || len(s.URLs) != 1 || s.URLs[0].String() != "http://b:9000/base" || s.Outlier != DefaultOutlier() || s.PanicThreshold != 50 {
					t.Errorf("default service: %+v", s)
				}
			}},
		{name: "EXGATE_UPSTREAM_URLS lists the default service's instances", yaml: "{}\n",
			getenv: env(map[string]string{"EXGATE_UPSTREAM_URLS": "http://a:9000, http://b:9000,"}),
			check: func(t *testing.T, c *Config) {
				s, _ := c.Upstream.Service(DefaultService)
				if len(s.URLs) != 2 || s.URLs[0].String() != "http://a:9000" || s.URLs[1].String() != "http://b:9000" {
					t.Errorf("default service's urls: %v", s.URLs)
				}
			}},
		{name: "a named service starts from the defaults of its keys",
			yaml: "upstream:\n  outlier: {consecutive_5xx: 9}\n  services:\n    wallets:\n      urls: ['http://w1:80', 'https://w2']\n      outlier: {max_ejection_percent: 100}\n" +
				"routes:\n  - {name: wlt, match: 'GET /api/v1/wlt/', service: wallets}\n  - {name: rest, match: '*'}\n",
			check: func(t *testing.T, c *Config) {
				s, ok := c.Upstream.Service("wallets")
				want := DefaultOutlier()
				want.MaxEjectionPercent = 100
				if !ok || len(s.URLs) != 2 || s.Outlier != want || s.HealthCheck != DefaultHealthCheck() || s.PanicThreshold != 50 {
					t.Errorf("wallets: %+v", s)
				}
				if names := c.Upstream.ServiceNames(); !slices.Equal(names, []string{"default", "wallets"}) {
					t.Errorf("service names: %v", names)
				}
			}},
		{name: "every problem by its path",
			yaml: "upstream:\n  urls: ['http://a:1', 'ftp://b', 'http://a:1', 'http://c:1/v2']\n  panic_threshold: 101\n  retry_budget: {percent: -1, min_retries: -1}\n" +
				"  health_check: {path: 'healthz', interval: 1s, timeout: 2s, healthy_threshold: 0, unhealthy_threshold: 0}\n" +
				"  outlier: {consecutive_5xx: -1, consecutive_connect_failures: -1, base_ejection_time: 1m, max_ejection_time: 1s, max_ejection_percent: 200,\n" +
				"    failure_percentage_threshold: 101, failure_percentage_request_volume: 9}\n" +
				"  services:\n    default: {urls: ['http://x:1']}\n    Bad: {urls: ['http://y:1']}\n    empty: {}\n" +
				"routes:\n  - {name: r, match: '*', service: wallet}\n",
			paths: []string{"upstream.urls[1]", "upstream.urls[2]", "upstream.urls[3]", "upstream.panic_threshold", "upstream.retry_budget.percent",
				"upstream.retry_budget.min_retries", "upstream.health_check.path", "upstream.health_check.timeout",
				"upstream.health_check.healthy_threshold", "upstream.health_check.unhealthy_threshold",
				"upstream.outlier.consecutive_5xx", "upstream.outlier.consecutive_connect_failures", "upstream.outlier.max_ejection_time",
				"upstream.outlier.max_ejection_percent", "upstream.outlier.failure_percentage_threshold",
				"upstream.outlier.failure_percentage_request_volume", "upstream.services.default", "upstream.services.Bad",
				"upstream.services.empty.urls", "routes[0].service"}},
		{name: "a service's own tls starts from upstream.tls's defaults, not its values",
			yaml: "upstream:\n  url: 'https://core'\n  tls: {ca_file: core-ca.pem, server_name: core, http2: false}\n  services:\n" +
				"    wallets: {urls: ['https://w1'], tls: {ca_file: wallets-ca.pem}}\n    markets: {urls: ['https://m1']}\n",
			check: func(t *testing.T, c *Config) {
				w, where := c.Upstream.ServiceTLS("wallets")
				want := defaultBackendTLS()
				want.CAFile = "wallets-ca.pem"
				if w != want || where != "upstream.services.wallets.tls" {
					t.Errorf("wallets: %+v at %s, want %+v", w, where, want)
				}
				for _, name := range []string{"markets", DefaultService, ""} {
					if m, where := c.Upstream.ServiceTLS(name); m != c.Upstream.TLS || where != "upstream.tls" {
						t.Errorf("%q: %+v at %s, want upstream.tls", name, m, where)
					}
				}
				if s, _ := c.Upstream.Service("markets"); s.TLS != nil {
					t.Errorf("markets has a tls block of its own: %+v", s.TLS)
				}
			}},
		{name: "EXGATE_UPSTREAM_SERVICES_<NAME>_TLS_* make a service's tls block",
			yaml:   "upstream: {services: {wallets: {urls: ['https://w1']}, markets: {urls: ['https://m1']}}}\n",
			getenv: env(map[string]string{"EXGATE_UPSTREAM_SERVICES_WALLETS_TLS_SERVER_NAME": "wallets.internal"}),
			check: func(t *testing.T, c *Config) {
				w, _ := c.Upstream.ServiceTLS("wallets")
				if w.ServerName != "wallets.internal" || !w.HTTP2 || w.ReloadInterval != defaultBackendTLS().ReloadInterval {
					t.Errorf("wallets: %+v", w)
				}
				if s, _ := c.Upstream.Service("markets"); s.TLS != nil {
					t.Errorf("markets has a tls block of its own: %+v", s.TLS)
				}
			}},
		{name: "upstream.tls is checked only when a service without its own dials https",
			yaml: "upstream:\n  url: 'http://core'\n  tls: {server_name: core}\n  services:\n" +
				"    wallets: {urls: ['https://w1'], tls: {cert_file: c.pem, reload_interval: 10ms}}\n    markets: {urls: ['http://m1'], tls: {ca_file: m.pem}}\n",
			paths: []string{"upstream.services.markets.tls", "upstream.services.wallets.tls.key_file", "upstream.services.wallets.tls.reload_interval", "upstream.tls"}},
		{name: "unknown key in a service", yaml: "upstream: {services: {md: {urls: ['http://m:1'], url: 'http://m:1'}}}\n",
			paths: []string{"upstream.services.md.url"}},
	}
	runParseCases(t, tests)

	t.Run("a problem of a block the environment made names its variable", func(t *testing.T) {
		_, err := Parse("test.yaml", []byte("upstream: {services: {plain: {urls: ['http://p1']}}}\n"),
			env(map[string]string{"EXGATE_UPSTREAM_SERVICES_PLAIN_TLS_SERVER_NAME": "p", "EXGATE_UPSTREAM_SERVICES_PLAIN_TLS_HTTP2": "false"}))
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Path != "upstream.services.plain.tls" || errs[0].Env != "EXGATE_UPSTREAM_SERVICES_PLAIN_TLS_HTTP2" {
			t.Fatalf("err = %v, want one problem at upstream.services.plain.tls named by EXGATE_UPSTREAM_SERVICES_PLAIN_TLS_HTTP2", err)
		}
	})
}
