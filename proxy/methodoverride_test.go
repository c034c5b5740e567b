package proxy

import (
	"net/http"
	"testing"
)

// TestMethodOverrideHeadersRefused: a GET cannot become an unguarded POST
// behind exgate by asking the backend's framework to override its method.
func TestMethodOverrideHeadersRefused(t *testing.T) {
	e := startEnv(t, nil)
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "x-http-method-override"} {
		t.Run(h, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
			req.Header[h] = []string{"POST"} // as sent, not canonicalised by Go
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			assertError(t, res, http.StatusBadRequest, "method_override")
			if e.backend.count() != 0 {
				t.Fatal("reached the backend")
			}
		})
	}
}

// TestOrderRouteCannotBeBypassedByMethodOverride: no override header turns
// a request on another route into one the backend's order view runs.
func TestOrderRouteCannotBeBypassedByMethodOverride(t *testing.T) {
	e := startEnv(t, nil)
	for _, method := range []string{"GET", "PUT", "PATCH", "OPTIONS", "DELETE"} {
		for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
			for _, p := range []string{"/api/v1/odr/orders/", "/api/v1/odr/orders.json", "/api/v1/mkt/markets/"} {
				t.Run(method+" "+h+" "+p, func(t *testing.T) {
					raw := method + " " + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n" + h +
						": POST\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
					res := rawRequest(t, e.addr, raw)
					assertError(t, res, http.StatusBadRequest, "method_override")
					if e.backend.count() != 0 {
						t.Fatal("reached the backend")
					}
				})
			}
		}
	}
}
