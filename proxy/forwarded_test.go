package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestClientAddressHeadersFromClientsDropped: the headers other than
// X-Forwarded-For and X-Real-IP in which backends and their libraries look
// for the client's address (chi's RealIP and httprate's KeyByRealIP read
// True-Client-IP before X-Real-IP, npm's request-ip X-Client-IP before
// X-Forwarded-For, Rails and django-ipware Client-IP, gin's trusted
// platform CF-Connecting-IP) reach the backend from a trusted proxy only.
// From anyone else the backend would take the address the client wrote
// for the one exgate counted the client as, in its own limits and
// allow-lists.
func TestClientAddressHeadersFromClientsDropped(t *testing.T) {
	names := []string{"True-Client-IP", "X-Client-IP", "Client-IP", "CF-Connecting-IP", "CF-Connecting-IPv6",
		"CF-Pseudo-IPv4", "DO-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP", "X-Forwarded",
		"Forwarded-For", "X-Original-Forwarded-For", "X-Appengine-User-IP", "X-Originating-IP",
		"X-Remote-IP", "X-Remote-Addr", "x-client-ip"}
	sendHeaders(t, names, func(e *env, name string) *http.Request {
		req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
		req.Header[name] = []string{"203.0.113.9"}
		return req
	}, func(t *testing.T, got http.Header, name string, trusted bool) {
		want := ""
		if trusted {
			want = "203.0.113.9"
		}
		if g := got.Get(name); g != want {
			t.Errorf("%s: backend got %q, want %q", name, g, want)
		}
		if got.Get("X-Real-Ip") != "127.0.0.1" || got.Get("X-Forwarded-For") != "127.0.0.1" {
			t.Errorf("the client address headers: %v", got)
		}
	})
}

// sendHeaders sends, from an untrusted client and from a trusted proxy
// (each its own gateway), one request a name of names, built by req (the
// name's field set as written, not canonicalised by Go) with an X-Note
// field beside it, which must reach the backend; check judges the
// header the backend got.
func sendHeaders(t *testing.T, names []string, req func(e *env, name string) *http.Request,
	check func(t *testing.T, got http.Header, name string, trusted bool)) {
	t.Helper()
	for _, trusted := range []bool{false, true} {
		e := startEnv(t, func(c *config.Config) {
			if trusted {
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
			}
		})
		peer := map[bool]string{false: "untrusted client", true: "trusted proxy"}[trusted]
		for _, name := range names {
			t.Run(peer+"/"+name, func(t *testing.T) {
				r := req(e, name)
				r.Header.Set("X-Note", "kept") // no header of the kind: always forwarded
				res, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				got := e.backend.last(t).Header
				if got.Get("X-Note") != "kept" {
					t.Errorf("the other headers: %v", got)
				}
				check(t, got, name, trusted)
			})
		}
	}
}

// TestForwardedModeSendsTheChainItRead: with client_ip.header: forwarded
// the trusted proxies write Forwarded, which ReverseProxy does not forward,
// and pass a client's X-Forwarded-For through unread. The backend's
// X-Forwarded-For is then the chain exgate read in Forwarded, from the
// client it derived to its peer: never the client's own X-Forwarded-For,
// whose entries a backend reading right to left past exgate and the proxy
// (or the left-most entry) would take for the client's address, and in
// which the client exgate counted would appear nowhere.
func TestForwardedModeSendsTheChainItRead(t *testing.T) {
	e := startEnv(t, func(c *config.Config) {
		c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}, {Prefix: mustPrefix("10.0.0.0/8")}}
		c.ClientIP.Header = config.HeaderForwarded
	})
	for _, tc := range []struct {
		name, forwarded, xff, want, realIP string
	}{
		{"one hop", "for=198.51.100.7", "203.0.113.66", "198.51.100.7, 127.0.0.1", "198.51.100.7"},
		{"through a trusted proxy", "for=198.51.100.7, for=10.0.0.2", "203.0.113.66, 10.0.0.9", "198.51.100.7, 10.0.0.2, 127.0.0.1", "198.51.100.7"},
		{"client-chosen entries left of the client", "for=203.0.113.66;proto=https, for=198.51.100.7", "", "198.51.100.7, 127.0.0.1", "198.51.100.7"},
		{"two lines", "for=203.0.113.66\nfor=\"[2001:db8::1]:4711\"", "203.0.113.66", "2001:db8::1, 127.0.0.1", "2001:db8::1"},
		{"an element that cannot be read", "for=unknown, for=10.0.0.2", "203.0.113.66", "10.0.0.2, 127.0.0.1", "10.0.0.2"},
		{"no Forwarded", "", "203.0.113.66", "127.0.0.1", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
			for _, v := range strings.Split(tc.forwarded, "\n") {
				if v != "" {
					req.Header.Add("Forwarded", v)
				}
			}
			if tc.xff != "" {
				req.Header.Set("X-Forwarded-For", tc.xff)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got := e.backend.last(t).Header
			if xff := got.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != tc.want {
				t.Errorf("backend's X-Forwarded-For %q, want %q", xff, tc.want)
			}
			if r := got.Get("X-Real-Ip"); r != tc.realIP {
				t.Errorf("backend's X-Real-IP %q, want %q", r, tc.realIP)
			}
		})
	}
}

// TestEnvoyHeadersNeverForwarded: an Envoy between exgate and the backend
// (a service mesh's sidecar) takes x-envoy-retry-on, x-envoy-max-retries
// and the timeouts from a request it judges internal by its
// X-Forwarded-For, which exgate writes: a client on a private address
// could have it retry an order after a 5xx or a reset, placing it twice
// behind exgate's back. No client's X-Envoy-* header reaches the backend,
// a trusted proxy's neither (one that writes X-Forwarded-For passes the
// client's through).
func TestEnvoyHeadersNeverForwarded(t *testing.T) {
	names := []string{"X-Envoy-Retry-On", "X-Envoy-Max-Retries", "X-Envoy-Retry-Grpc-On",
		"X-Envoy-Hedge-On-Per-Try-Timeout", "X-Envoy-Upstream-Rq-Timeout-Ms", "X-Envoy-Upstream-Rq-Per-Try-Timeout-Ms",
		"X-Envoy-Internal", "x-envoy-retry-on"}
	sendHeaders(t, names, func(e *env, name string) *http.Request {
		req, _ := http.NewRequest("POST", e.url+"/api/v1/usr/payments/", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header[name] = []string{"5xx,reset"}
		return req
	}, func(t *testing.T, got http.Header, name string, _ bool) {
		if g := got.Get(name); g != "" {
			t.Errorf("%s reached the backend: %q", name, g)
		}
	})
}

// TestForwardedProtoFromTheTrustedHop: the scheme a trusted proxy reports
// is the one it wrote itself — the proto= of the last Forwarded element
// with client_ip.header: forwarded, else the last X-Forwarded-Proto entry
// (a proxy that appends one leaves the client's before it) — never one the
// client put before it, which the proxy passed through: the backend takes
// the answer for whether its client used TLS.
func TestForwardedProtoFromTheTrustedHop(t *testing.T) {
	for _, mode := range []string{config.HeaderXForwardedFor, config.HeaderForwarded} {
		e := startEnv(t, func(c *config.Config) {
			c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
			c.ClientIP.Header = mode
		})
		for _, tc := range []struct {
			name      string
			forwarded []string
			proto     []string
			want      string
		}{
			{"one value", nil, []string{"https"}, map[string]string{config.HeaderXForwardedFor: "https", config.HeaderForwarded: "http"}[mode]},
			{"appended line", nil, []string{"https", "http"}, "http"},
			{"appended entry", nil, []string{"https, http"}, "http"},
			{"not a scheme", nil, []string{"gopher"}, "http"},
			{"proxy's element", []string{"for=198.51.100.7;proto=https"}, []string{"http"},
				map[string]string{config.HeaderXForwardedFor: "http", config.HeaderForwarded: "https"}[mode]},
			{"client's element before the proxy's", []string{"for=203.0.113.66;proto=https, for=198.51.100.7"}, nil, "http"},
			{"client's proto beside the proxy's element", []string{"for=198.51.100.7;proto=http"}, []string{"https"},
				map[string]string{config.HeaderXForwardedFor: "https", config.HeaderForwarded: "http"}[mode]},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
				req.Header["Forwarded"] = tc.forwarded
				req.Header["X-Forwarded-Proto"] = tc.proto
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if got := e.backend.last(t).Header.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != tc.want {
					t.Errorf("backend's X-Forwarded-Proto %q, want %q", got, tc.want)
				}
			})
		}
	}
}
