package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

const pageOrigin = "https://app.example.com"

func preflight(t *testing.T, e *env, path, origin, method, headers string) *http.Response {
	t.Helper()
	h := []string{"Origin", origin, "Access-Control-Request-Method", method}
	if headers != "" {
		h = append(h, "Access-Control-Request-Headers", headers)
	}
	return do(t, "OPTIONS", e.url+path, nil, h...)
}

// TestPreflightPassesToBackendWithoutPolicy: with no cors policy a
// preflight is the backend's to answer, on the default route, even on a
// private path (a browser sends it without credentials).
func TestPreflightPassesToBackendWithoutPolicy(t *testing.T) {
	e := startEnv(t, nil)
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		w.WriteHeader(http.StatusNoContent)
	}
	for _, p := range []string{"/api/v1/odr/orders/", "/api/v1/odr/orders/bulk/", "/api/v1/wlt/wallets/", "/api/v1/mkt/markets/"} {
		res := preflight(t, e, p, pageOrigin, "POST", "authorization, content-type")
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != pageOrigin {
			t.Fatalf("%s: %d %v", p, res.StatusCode, res.Header)
		}
		if got := e.backend.last(t); got.Method != "OPTIONS" || got.Path != p {
			t.Fatalf("backend got %s %s", got.Method, got.Path)
		}
	}
	// A preflight with a body is no browser's: refused, not forwarded.
	n := e.backend.count()
	res := do(t, "OPTIONS", e.url+"/api/v1/odr/orders/", strings.NewReader(`{"symbol":"BTC_USDT"}`),
		"Origin", pageOrigin, "Access-Control-Request-Method", "POST")
	assertError(t, res, http.StatusBadRequest, "invalid_preflight")
	if e.backend.count() != n {
		t.Fatal("a preflight with a body reached the backend")
	}
	// An OPTIONS that is not a preflight still follows the table: under
	// /api/v1/odr/ a method no route names is refused.
	res = do(t, "OPTIONS", e.url+"/api/v1/odr/orders/", nil)
	if allow := res.Header.Get("Allow"); allow != "GET, HEAD, POST" {
		t.Errorf("Allow = %q", allow)
	}
	assertError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
}

// TestCORSPolicy: with a policy, exgate answers preflights itself (no
// backend call, no limit charged) and every answer to an allowed origin —
// its refusals included — carries the headers a page needs to read it.
func TestCORSPolicy(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		c.CORS.AllowedOrigins = []string{pageOrigin, "http://127.0.0.1:3000"}
		c.CORS.MaxAge = 5 * time.Minute
		c.Route("default").Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
		c.Route("default").Limits[0].Burst = 1
		c.Route("list_matches").Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
		c.Route("list_matches").Limits[0].Burst = 1
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "https://evil.example") // the policy's own win
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}
	t.Run("preflights at the edge", func(t *testing.T) {
		for range 3 { // more than the default route's 1/h: no limit is charged
			res := preflight(t, e, "/api/v1/odr/orders/", pageOrigin, "POST", "Authorization, Content-Type")
			res.Body.Close()
			h := res.Header
			if res.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != pageOrigin ||
				h.Get("Access-Control-Allow-Methods") != "GET, HEAD, POST, PUT, PATCH, DELETE" ||
				h.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, X-Request-ID" ||
				h.Get("Access-Control-Max-Age") != "300" || h.Get("RateLimit") != "" {
				t.Fatalf("preflight: %d %v", res.StatusCode, h)
			}
		}
		if n := e.backend.count(); n != 0 {
			t.Fatalf("%d preflights reached the backend", n)
		}
	})
	t.Run("refused preflights", func(t *testing.T) {
		for _, tt := range []struct{ origin, method, headers string }{
			{"https://evil.example", "POST", ""},
			{pageOrigin, "TRACE", ""},
			{pageOrigin, "POST", "Authorization, X-Secret"},
		} {
			er := preflight(t, e, "/api/v1/odr/orders/", tt.origin, tt.method, tt.headers)
			if er.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("a refused preflight allows the origin: %v", er.Header)
			}
			assertError(t, er, http.StatusForbidden, "cors_refused")
		}
		if n := e.backend.count(); n != 0 {
			t.Fatalf("%d preflights reached the backend", n)
		}
	})
	readable := func(t *testing.T, res *http.Response) {
		t.Helper()
		h := res.Header
		if h.Get("Access-Control-Allow-Origin") != pageOrigin || h.Get("Vary") == "" || h.Get("Access-Control-Expose-Headers") == "" {
			t.Fatalf("%d answer lacks CORS headers: %v", res.StatusCode, h)
		}
	}
	t.Run("refusals are readable", func(t *testing.T) {
		res := do(t, "POST", e.url+"/api/v1/odr/orders/", nil, "Origin", pageOrigin)
		readable(t, res)
		assertError(t, res, http.StatusUnauthorized, "not_authenticated")
		res = do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil, "Origin", pageOrigin)
		res.Body.Close()
		res = do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil, "Origin", pageOrigin)
		readable(t, res)
		assertError(t, res, http.StatusTooManyRequests, "throttled")
		res = do(t, "GET", e.url+"/api/v1/odr/orders/", nil, "Origin", pageOrigin, "X-HTTP-Method-Override", "POST")
		readable(t, res)
		assertError(t, res, http.StatusBadRequest, "method_override")
	})
	t.Run("backend answers carry the policy's headers only", func(t *testing.T) {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Origin", pageOrigin)
		res.Body.Close()
		readable(t, res)
		if v := res.Header.Values("Access-Control-Allow-Origin"); len(v) != 1 {
			t.Fatalf("Access-Control-Allow-Origin = %q, want exgate's only", v)
		}
	})
	t.Run("other origins get nothing", func(t *testing.T) {
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil, "Origin", "https://evil.example")
		res.Body.Close()
		if res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Vary") != "Origin" {
			t.Fatalf("headers %v", res.Header)
		}
	})
}
