package admin

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/topk"
)

// adminServer serves the admin handler of a gateway on the defaults with
// o (a console and pprof added) until the test ends.
func adminServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	gw, err := newGateway(config.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Console = &ConsoleOptions{Top: topk.NewTracker(topk.TrackerOptions{})}
	o.Pprof = true
	o.Metrics = promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})
	srv := httptest.NewServer(Handler(gw, o))
	t.Cleanup(srv.Close)
	return srv
}

// adminAnswer is one answer of the admin listener: status, the JSON
// error's code ("" when the body is not one), Allow, the body.
type adminAnswer struct {
	status      int
	code, allow string
	body        string
	contentType string
}

func adminDo(t *testing.T, srv *httptest.Server, method, path, host string, header ...string) adminAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e struct{ Detail, Code string }
	_ = json.Unmarshal(b, &e)
	return adminAnswer{res.StatusCode, e.Code, res.Header.Get("Allow"), string(b), res.Header.Get("Content-Type")}
}

// TestAdminHostAllowList: a page on another site whose name resolves to
// the admin listener (DNS rebinding) sends its own name as Host; the
// console, its page, pprof, /readyz and /metrics refuse it, while
// addresses, localhost and the configured names are answered. /healthz
// (which holds nothing) answers any Host.
func TestAdminHostAllowList(t *testing.T) {
	srv := adminServer(t, Options{AllowedHosts: []string{"exgate-admin.internal"}})
	guarded := []string{"/admin/status", "/admin/top", "/admin/inspect?address=192.0.2.1", "/", "/console/console.js", "/debug/pprof/",
		"/readyz", "/metrics"}
	for _, host := range []string{"rebind.example", "rebind.example:9090", "127.0.0.1.rebind.example", "localhost.rebind.example",
		"exgate-admin.internal.rebind.example", "xn--localhost", "localhost:x"} {
		for _, path := range guarded {
			if a := adminDo(t, srv, "GET", path, host); a.status != 403 || a.code != "host_not_allowed" {
				t.Errorf("GET %s with Host %s: %d %s, want 403 host_not_allowed", path, host, a.status, a.body)
			}
		}
		if a := adminDo(t, srv, "GET", "/healthz", host); a.status != 200 {
			t.Errorf("GET /healthz with Host %s: %d, want 200 (it holds nothing)", host, a.status)
		}
	}
	for _, host := range []string{"127.0.0.1:9090", "10.0.3.7", "[::1]:9090", "[fe80::1%25eth0]:9090", "localhost", "LOCALHOST.:9090",
		"console.localhost:9090", "exgate-admin.internal:9090", "Exgate-Admin.Internal."} {
		for _, path := range guarded {
			if a := adminDo(t, srv, "GET", path, host); a.status == 403 || a.status >= 500 {
				t.Errorf("GET %s with Host %s: %d %s, want it answered", path, host, a.status, a.body)
			}
		}
	}

	// HTTP/1.0 without a Host header: no browser sends that.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /admin/status HTTP/1.0\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 200 {
		t.Errorf("HTTP/1.0 without Host: %v %v", res, err)
	}
}

// TestAdminToken: with a token, the console's API and pprof need it
// (compared whole: a prefix or a longer string is refused), the page and
// the probes do not. Without a token on a listener beyond loopback
// (RequireToken), the console's API and pprof are refused with a 403
// that says what to set; probes, metrics and the page are served.
func TestAdminToken(t *testing.T) {
	withToken := adminServer(t, Options{Token: "s3cret-admin-token"})
	closed := adminServer(t, Options{RequireToken: true, TokenEnv: "OPS_ADMIN_TOKEN"})
	host := "127.0.0.1"
	for _, tc := range []struct {
		name   string
		srv    *httptest.Server
		path   string
		auth   string
		status int
		code   string
	}{
		{"status with the token", withToken, "/admin/status", "Bearer s3cret-admin-token", 200, ""},
		{"status without", withToken, "/admin/status", "", 401, "not_authenticated"},
		{"status with a prefix of it", withToken, "/admin/status", "Bearer s3cret-admin", 401, "not_authenticated"},
		{"status with more than it", withToken, "/admin/status", "Bearer s3cret-admin-token-and-more", 401, "not_authenticated"},
		{"status with another scheme", withToken, "/admin/status", "Basic s3cret-admin-token", 401, "not_authenticated"},
		{"pprof without", withToken, "/debug/pprof/", "", 401, "not_authenticated"},
		{"pprof's profiles without", withToken, "/debug/pprof/cmdline", "", 401, "not_authenticated"},
		{"pprof with the token", withToken, "/debug/pprof/", "Bearer s3cret-admin-token", 200, ""},
		{"the page needs none", withToken, "/", "", 200, ""},
		{"healthz needs none", withToken, "/healthz", "", 200, ""},
		{"readyz needs none", withToken, "/readyz", "", 200, ""},
		{"metrics needs none", withToken, "/metrics", "", 200, ""},
		{"closed: status", closed, "/admin/status", "", 403, "admin_token_required"},
		{"closed: status with any token", closed, "/admin/status", "Bearer anything", 403, "admin_token_required"},
		{"closed: reset", closed, "/admin/reset?address=192.0.2.1", "", 405, "method_not_allowed"},
		{"closed: pprof", closed, "/debug/pprof/", "", 403, "admin_token_required"},
		{"closed: healthz", closed, "/healthz", "", 200, ""},
		{"closed: readyz", closed, "/readyz", "", 200, ""},
		{"closed: metrics", closed, "/metrics", "", 200, ""},
		{"closed: the page", closed, "/", "", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.auth != "" {
				h = []string{"Authorization", tc.auth}
			}
			a := adminDo(t, tc.srv, "GET", tc.path, host, h...)
			if a.status != tc.status || a.code != tc.code {
				t.Errorf("%d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
			if tc.code == "admin_token_required" && !strings.Contains(a.body, "OPS_ADMIN_TOKEN") {
				t.Errorf("the refusal does not name the variable to set: %s", a.body)
			}
		})
	}
	if a := adminDo(t, closed, "POST", "/admin/reset?address=192.0.2.1", host); a.status != 403 || a.code != "admin_token_required" {
		t.Errorf("closed: reset: %d %s", a.status, a.body)
	}
}

// TestAdminErrorsAreJSON: whatever answers an error on the admin listener
// — the mux (unknown path, wrong method), the page's file server, pprof
// — the answer is exgate's JSON error, with its status and Allow.
func TestAdminErrorsAreJSON(t *testing.T) {
	srv := adminServer(t, Options{})
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
		detail       string
	}{
		{"GET", "/nope", 404, "not_found", "", "Not found."},
		{"GET", "/admin/nope", 404, "not_found", "", "Not found."},
		{"GET", "/console/missing.js", 404, "not_found", "", "Not found."},
		{"GET", "/debug/pprof/no-such-profile", 404, "not_found", "", "Unknown profile"},
		{"POST", "/healthz", 405, "method_not_allowed", "GET, HEAD", `Method \"POST\" not allowed.`},
		{"DELETE", "/admin/status", 405, "method_not_allowed", "GET, HEAD", `Method \"DELETE\" not allowed.`},
		{"GET", "/admin/reset", 405, "method_not_allowed", "POST", `Method \"GET\" not allowed.`},
		{"GET", "/admin/inspect", 400, "invalid_subject", "", "Name exactly one"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			a := adminDo(t, srv, tc.method, tc.path, "")
			if a.status != tc.status || a.code != tc.code || a.allow != tc.allow || a.contentType != "application/json" ||
				!strings.Contains(a.body, tc.detail) {
				t.Errorf("%d %q Allow %q: %s; want %d %s Allow %q, detail %q", a.status, a.contentType, a.allow, a.body,
					tc.status, tc.code, tc.allow, tc.detail)
			}
		})
	}
	// What is not an error passes as it was: pprof's redirect, a profile.
	if a := adminDo(t, srv, "GET", "/debug/pprof/goroutine?debug=1", ""); a.status != 200 || !strings.Contains(a.body, "goroutine profile") {
		t.Errorf("a profile: %d %.80s", a.status, a.body)
	}
}

// TestAdminCrossSiteRefused: a page of another site open in an
// operator's browser can send GETs (an image, a no-cors fetch) and form
// POSTs to the admin listener by its address, which the Host check
// answers, and without a token on loopback nothing else stood in the
// way: on main each was served, so the page could start CPU profiles and
// execution traces, force collections (/debug/pprof/heap?gc=1) and
// stop-the-world goroutine dumps (?debug=2) on the gateway at will, the
// answers unread but their cost paid. The console's API and pprof now
// refuse a browser's request that did not come from their own origin
// (Sec-Fetch-Site other than same-origin or none; without it, an Origin
// naming another host), 403 cross_site_refused; the console's own page,
// an address typed in, and tools that send neither header are answered.
// The page itself (no data), probes and metrics answer any.
func TestAdminCrossSiteRefused(t *testing.T) {
	srv := adminServer(t, Options{})
	host := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name, method, path string
		header             []string
		status             int
		code               string
	}{
		{"a CPU profile from another site", "GET", "/debug/pprof/profile?seconds=1", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross_site_refused"},
		{"a forced collection from another site", "GET", "/debug/pprof/heap?gc=1", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross_site_refused"},
		{"a goroutine dump from the same site", "GET", "/debug/pprof/goroutine?debug=2", []string{"Sec-Fetch-Site", "same-site"}, 403, "cross_site_refused"},
		{"the status from another site", "GET", "/admin/status", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross_site_refused"},
		{"an inspect form from another site", "POST", "/admin/inspect?address=192.0.2.1", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}, 403, "cross_site_refused"},
		{"another origin without Sec-Fetch-Site", "GET", "/admin/status", []string{"Origin", "http://evil.example"}, 403, "cross_site_refused"},
		{"an opaque origin", "GET", "/admin/status", []string{"Origin", "null"}, 403, "cross_site_refused"},
		{"another port of the host", "GET", "/admin/status", []string{"Origin", "http://" + strings.Split(host, ":")[0] + ":1"}, 403, "cross_site_refused"},
		{"the console's page", "GET", "/admin/status", []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://" + host}, 200, ""},
		{"its own origin without Sec-Fetch-Site", "GET", "/admin/status", []string{"Origin", "http://" + host}, 200, ""},
		{"an address typed in", "GET", "/debug/pprof/", []string{"Sec-Fetch-Site", "none"}, 200, ""},
		{"a tool", "GET", "/debug/pprof/", nil, 200, ""},
		{"the page from a link", "GET", "/", []string{"Sec-Fetch-Site", "cross-site"}, 200, ""},
		{"metrics from another site", "GET", "/metrics", []string{"Sec-Fetch-Site", "cross-site"}, 200, ""},
		{"readyz from another site", "GET", "/readyz", []string{"Sec-Fetch-Site", "cross-site"}, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := adminDo(t, srv, tc.method, tc.path, "", tc.header...)
			if a.status != tc.status || a.code != tc.code {
				t.Errorf("%d %.200s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
		})
	}
}

// TestAdminRebindingReadsNoProbeOrMetrics: a page of another site whose
// name the attacker points at the admin listener (DNS rebinding) is
// same-origin to the browser, so the cross-site check lets its fetches
// through and it reads the answers. On main /readyz and /metrics answered
// any Host: such a page read every check's error (Redis's and the
// backend's internal addresses) and every metric (the routes, the
// fleet's instances, the traffic) from an operator's browser, past the
// firewall that is /metrics' boundary. They now answer the Hosts the
// console does; probes and scrapers, which name the listener by its
// address, send no Host or a listed name, are answered as before.
func TestAdminRebindingReadsNoProbeOrMetrics(t *testing.T) {
	srv := adminServer(t, Options{AllowedHosts: []string{"exgate-admin.internal"}})
	sameOrigin := []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}
	tests := []struct {
		name, path, host string
		header           []string
		status           int
		code             string
	}{
		{"metrics from a rebound page", "/metrics", "rebind.example:9090", sameOrigin, 403, "host_not_allowed"},
		{"readyz from a rebound page", "/readyz", "rebind.example:9090", sameOrigin, 403, "host_not_allowed"},
		{"metrics for a look-alike name", "/metrics", "exgate-admin.internal.rebind.example", nil, 403, "host_not_allowed"},
		{"healthz from a rebound page", "/healthz", "rebind.example:9090", sameOrigin, 200, ""},
		{"Prometheus by the pod's address", "/metrics", "10.0.3.7:9090", nil, 200, ""},
		{"the kubelet by the pod's address", "/readyz", "10.0.3.7:9090", nil, 200, ""},
		{"a balancer by an IPv6 address", "/readyz", "[2001:db8::7]:9090", nil, 200, ""},
		{"curl on the host", "/metrics", "localhost:9090", nil, 200, ""},
		{"Prometheus by a listed name", "/metrics", "Exgate-Admin.Internal:9090", nil, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := adminDo(t, srv, "GET", tc.path, tc.host, tc.header...)
			if a.status != tc.status || a.code != tc.code {
				t.Errorf("%d %.200s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
			if tc.status == 403 && !strings.Contains(a.contentType, "json") {
				t.Errorf("Content-Type %q, want the JSON error", a.contentType)
			}
		})
	}
}

// TestAdminLongMethodBounded: the admin listener's 405 repeated the
// method whole, where the gateway's shows its first 24 bytes (a method
// is any token net/http reads, up to twice the header limit): a 12 KiB
// method came back 12 KiB long in the detail. It now shows the method as
// the gateway does (proxy.MethodShown), on the mux's 405 and on one a
// handler writes.
func TestAdminLongMethodBounded(t *testing.T) {
	srv := adminServer(t, Options{})
	long := strings.Repeat("X", 12<<10)
	tests := []struct{ name, method, path, detail string }{
		{"a known method", "POST", "/healthz", `Method "POST" not allowed.`},
		{"12 KiB on a probe", long, "/healthz", `Method "` + long[:24] + `…" not allowed.`},
		{"12 KiB on metrics", long, "/metrics", `Method "` + long[:24] + `…" not allowed.`},
		{"12 KiB on the console's API", long, "/admin/status", `Method "` + long[:24] + `…" not allowed.`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := adminDo(t, srv, tc.method, tc.path, "127.0.0.1")
			var e struct{ Detail string }
			_ = json.Unmarshal([]byte(a.body), &e)
			if a.status != 405 || a.code != "method_not_allowed" || e.Detail != tc.detail {
				t.Errorf("%d %s %.100q (%d bytes), want 405 method_not_allowed %.100q", a.status, a.code, e.Detail, len(e.Detail), tc.detail)
			}
		})
	}
}
