package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
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

// TestMethodParameterRefused: Laravel (and Symfony with its parameter
// override on) reads a POST's method from a _method parameter of its
// query, form or JSON body, Spring's HiddenHttpMethodFilter from its
// query or form, Rails' Rack::MethodOverride from its form: a POST that
// exgate routes as a POST would run as a DELETE, past the checks and
// limits of the route exgate would have given the DELETE (a cancel of an
// id list charged one unit of a route that does not count ids). The parameter is found under
// the names the backend decodes to _method (escapes, PHP's "." and "["
// for "_"); a request that names it is refused, and one that merely
// mentions it is forwarded.
func TestMethodParameterRefused(t *testing.T) {
	// The default table refuses a POST to an order's path (405); an
	// operator's table may forward it.
	e := startEnv(t, func(c *config.Config) { forwardWrites(c, "orders_refused") })
	const form, js = "application/x-www-form-urlencoded", "application/json"
	multipart := func(name string) (string, string) {
		return "multipart/form-data; boundary=XyZ", "--XyZ\r\nContent-Disposition: form-data; name=\"" + name +
			"\"\r\n\r\nDELETE\r\n--XyZ--\r\n"
	}
	mpType, mpBody := multipart("_method")
	_, mpOther := multipart("method")
	for _, tc := range []struct {
		name, query, contentType, body string
		refused                        bool
	}{
		{"query", "_method=DELETE", "", "", true},
		{"query among others", "state=active&_method=DELETE", "", "", true},
		{"query after a semicolon", "state=active;_method=DELETE", "", "", true},
		{"query escaped", "%5Fmethod=DELETE", "", "", true},
		{"query escaped letters", "_%6d%65thod=DELETE", "", "", true},
		{"query dot for PHP", ".method=DELETE", "", "", true},
		{"query bracket for PHP", "[method=DELETE", "", "", true},
		{"query leading space for PHP", "+_method=DELETE", "", "", true},
		{"query without a value", "_method", "", "", true},
		{"form", "", form, "_method=DELETE", true},
		{"form escaped", "", form, "ids=5%2C6&%5fmethod=DELETE", true},
		{"form with a charset", "", form + "; charset=utf-8", "_method=PUT", true},
		{"JSON", "", js, `{"_method":"DELETE"}`, true},
		{"JSON escaped", "", js, `{"ids":[5,6],"_\u006dethod":"DELETE"}`, true},
		{"JSON suffix", "", "application/vnd.api+json", `{"_method":"DELETE"}`, true},
		{"multipart", "", mpType, mpBody, true},
		{"query mentions it", "q=_method&methods=2&_methods=1", "", "", false},
		{"form mentions it", "", form, "note=_method", false},
		{"JSON nested or a value", "", js, `{"a":{"_method":"DELETE"},"b":"_method"}`, false},
		{"JSON array", "", js, `["_method"]`, false},
		{"multipart other field", "", mpType, mpOther, false},
		{"text", "", "text/plain", "_method=DELETE", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.backend.count()
			u := e.url + "/api/v1/odr/orders/5,6/"
			if tc.query != "" {
				u += "?" + tc.query
			}
			req, _ := http.NewRequest("POST", u, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer tok")
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refused {
				assertError(t, res, http.StatusBadRequest, "method_override")
				if e.backend.count() != before {
					t.Fatal("reached the backend")
				}
				return
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || e.backend.count() != before+1 {
				t.Fatalf("status %d, backend requests %d: want it forwarded", res.StatusCode, e.backend.count()-before)
			}
		})
	}
}
