package proxy

import (
	"net/http"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestPathOverrideHeadersRefused: a header that names another path than
// the request's (Symfony before 3.4.14, Zend Framework and IIS's URL
// Rewrite module route by X-Original-URL or X-Rewrite-URL) would run a
// request exgate checked as an anonymous market-data read as an order.
func TestPathOverrideHeadersRefused(t *testing.T) {
	e := startEnv(t, nil)
	for _, h := range []string{"X-Original-URL", "X-Rewrite-URL", "x-original-url", "X-ORIGINAL-URL"} {
		t.Run(h, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
			req.Header[h] = []string{"/api/v1/odr/orders/"} // as sent, not canonicalised by Go
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			assertError(t, res, http.StatusBadRequest, "path_override")
			if e.backend.count() != 0 {
				t.Fatal("reached the backend")
			}
		})
	}
}

// TestForwardedFamilyFromClientsDropped: of the X-Forwarded-* headers a
// backend may believe from the proxy in front of it (Werkzeug's ProxyFix
// and Django read -Port and -Prefix, Spring -Prefix, -Ssl and -Scheme), a
// client's reach the backend only through a trusted proxy; from anyone
// else only those exgate sets itself (-For, -Host, -Proto) arrive.
func TestForwardedFamilyFromClientsDropped(t *testing.T) {
	sent := map[string]string{
		"X-Forwarded-Port":   "8443",
		"X-Forwarded-Prefix": "/admin",
		"X-Forwarded-Ssl":    "on",
		"X-Forwarded-Scheme": "https",
		"x-forwarded-server": "lb",
		"X-Forwarded-Uri":    "/api/v1/odr/orders/",
	}
	for _, tc := range []struct {
		name    string
		trusted bool
	}{{"untrusted client", false}, {"trusted proxy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) {
				if tc.trusted {
					c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				}
			})
			req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
			for k, v := range sent {
				req.Header[k] = []string{v}
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got := e.backend.last(t).Header
			for k, v := range sent {
				want := ""
				if tc.trusted {
					want = v
				}
				if g := got.Get(k); g != want {
					t.Errorf("%s: backend got %q, want %q", k, g, want)
				}
			}
			if got.Get("X-Forwarded-For") != "127.0.0.1" || got.Get("X-Forwarded-Proto") != "http" {
				t.Errorf("exgate's own X-Forwarded-For/-Proto: %v", got)
			}
		})
	}
}
