package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strconv"
	"strings"
	"testing"
)

// TestOrderRouteQueryRefused: on the routes that check what they forward
// (place_order, bulk_orders and bulk_cancel their body, cancel_order and
// get_orders the ids of their path) any query string is refused with 400
// invalid_query before the backend or a limit sees it, whatever it names:
// a cancel of order 3 with ?ids=4,5,6 went to the backend charged one
// cancel; a bare "?" is dropped; a route without validate: forwards its
// query as it came.
func TestOrderRouteQueryRefused(t *testing.T) {
	e := startOrders(t, placed)
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	const bulk = `[` + order + `]`
	for _, tc := range []struct {
		name, method, target, body string
		status                     int
		forwarded                  string // the request URI the backend receives, when forwarded
	}{
		{"order field", "POST", "/api/v1/odr/orders/?price=1", order, 400, ""},
		{"symbol", "POST", "/api/v1/odr/orders/?symbol=ETH_USDT&quantity=100", order, 400, ""},
		{"DRF renderer", "POST", "/api/v1/odr/orders/?format=api", order, 400, ""},
		{"DRF json renderer", "POST", "/api/v1/odr/orders/?format=json", order, 400, ""},
		{"name only", "POST", "/api/v1/odr/orders/?x", order, 400, ""},
		{"separators only", "POST", "/api/v1/odr/orders/?&", order, 400, ""},
		{"encoded", "POST", "/api/v1/odr/orders/?%70rice=1", order, 400, ""},
		{"other spelling of the path", "POST", "//api/v1/odr/ORDERS.json?price=1", order, 400, ""},
		{"bulk", "POST", "/api/v1/odr/orders/bulk/?symbol=ETH_USDT", bulk, 400, ""},
		{"bulk cancel", "DELETE", "/api/v1/odr/orders/bulk/?ids=4", `[3]`, 400, ""},
		{"cancel with ids", "DELETE", "/api/v1/odr/orders/3/?ids=4,5,6", "", 400, ""},
		{"cancel with repeated ids", "DELETE", "/api/v1/odr/orders/3/?id=4&id=5", "", 400, ""},
		{"cancel with array ids", "DELETE", "/api/v1/odr/orders/3/?ids[]=4&ids[]=5", "", 400, ""},
		{"mass cancel", "DELETE", "/api/v1/odr/orders/3/?symbol=BTC_USDT&all=true", "", 400, ""},
		{"cancel list", "DELETE", "/api/v1/odr/orders/3,2/?ids=4", "", 400, ""},
		{"cancel DRF renderer", "DELETE", "/api/v1/odr/orders/3/?format=api", "", 400, ""},
		{"cancel semicolon", "DELETE", "/api/v1/odr/orders/3/?a=1;ids=4", "", 400, ""},
		{"cancel format suffix", "DELETE", "/api/v1/odr/orders/3.json?ids=4", "", 400, ""},
		{"status with ids", "GET", "/api/v1/odr/orders/3/?ids=4,5,6", "", 400, ""},
		{"status DRF renderer", "GET", "/api/v1/odr/orders/3,2/?format=json", "", 400, ""},
		{"bare question mark", "POST", "/api/v1/odr/orders/?", order, 201, "/api/v1/odr/orders/"},
		{"cancel, bare question mark", "DELETE", "/api/v1/odr/orders/3/?", "", 201, "/api/v1/odr/orders/3/"},
		{"cancel", "DELETE", "/api/v1/odr/orders/3/", "", 201, "/api/v1/odr/orders/3/"},
		{"status, bare question mark", "GET", "/api/v1/odr/orders/3,2/?", "", 201, "/api/v1/odr/orders/3,2/"},
		{"no query", "POST", "/api/v1/odr/orders/", order, 201, "/api/v1/odr/orders/"},
		{"list filter on a GET route", "GET", "/api/v1/odr/orders/?state=active&symbol=BTC_USDT", "", 201, "/api/v1/odr/orders/?state=active&symbol=BTC_USDT"},
		{"fills filter", "GET", "/api/v1/odr/fills/?symbol=BTC_USDT", "", 201, "/api/v1/odr/fills/?symbol=BTC_USDT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.backend.count()
			raw := tc.method + " " + tc.target + " HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer tok\r\n"
			if tc.body != "" {
				raw += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\n"
			}
			res := rawRequest(t, e.addr, raw+"\r\n"+tc.body)
			if tc.status == http.StatusBadRequest {
				assertError(t, res, http.StatusBadRequest, "invalid_query")
				if n := e.backend.count(); n != before {
					t.Fatalf("the backend received %d requests", n-before)
				}
				return
			}
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if got := e.backend.last(t).RequestURI; got != tc.forwarded {
				t.Errorf("backend request URI %q, want %q", got, tc.forwarded)
			}
		})
	}
}

// reverseProxyQuery returns the query an httputil.ReverseProxy with a
// Rewrite hook, as exgate's, sends its backend for the raw query q.
func reverseProxyQuery(q string) string {
	var got string
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "backend.example" },
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			got = r.URL.RawQuery
			return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		}),
	}
	req := httptest.NewRequest("GET", "/api/v1/mkt/tickers/", nil)
	req.URL.RawQuery = q
	rp.ServeHTTP(httptest.NewRecorder(), req)
	return got
}

// TestQueryAsSent holds queryAsSent to what httputil.ReverseProxy does: a
// query it reports as sent reaches the backend byte for byte, and any
// other is re-encoded, with parameters dropped, by the ReverseProxy.
func TestQueryAsSent(t *testing.T) {
	for _, tc := range []struct {
		name, q string
		sent    bool
	}{
		{"plain", "state=active&symbol=BTC_USDT", true},
		{"repeated", "symbol=BTC_USDT&symbol=ETH_USDT", true},
		{"plus and %20", "a=+b%20c", true},
		{"array form", "ids[]=1&ids[]=2", true},
		{"comma list", "ids=1,2", true},
		{"escapes", "%5Fx=%e2%82%AC&y=%c3%28", true},
		{"NUL escaped", "x=%00", true},
		{"empty parameters", "&&a=1&", true},
		{"10000 parameters", "a=1" + strings.Repeat("&", maxQueryParams-1), true},
		{"semicolon", "state=active;symbol=BTC_USDT", false},
		{"semicolon alone", ";", false},
		{"semicolon at the end", "symbol=BTC_USDT;", false},
		{"bad escape", "symbol=BTC_USDT&x=%zz", false},
		{"half escape", "a=%4", false},
		{"percent at the end", "a=%", false},
		{"percent in a name", "%=1", false},
		{"escape of a non-hex digit", "a=%4g", false},
		{"10001 parameters", "state=active" + strings.Repeat("&", maxQueryParams), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := queryAsSent(tc.q); got != tc.sent {
				t.Errorf("queryAsSent: %v, want %v", got, tc.sent)
			}
			if out := reverseProxyQuery(tc.q); (out == tc.q) != tc.sent {
				t.Errorf("httputil.ReverseProxy forwards %.80q as %.80q: the table is wrong", tc.q, out)
			}
		})
	}
}

// TestQueryNotForwardedAsSent: a query httputil.ReverseProxy would
// re-encode, dropping parameters (";", a malformed escape, more than 10000
// parameters), is refused with 400 invalid_query on every route before
// the backend sees it; on main ?state=active;symbol=BTC_USDT reached it as
// no query at all, the whole order list. Any other query reaches the
// backend byte for byte.
func TestQueryNotForwardedAsSent(t *testing.T) {
	e := startOrders(t, placed)
	for _, tc := range []struct {
		name, target string
		refused      bool
	}{
		{"semicolon", "/api/v1/odr/orders/?state=active;symbol=BTC_USDT", true},
		{"bad escape", "/api/v1/odr/fills/?symbol=BTC_USDT&x=%zz", true},
		{"half escape", "/api/v1/odr/fills/?symbol=BTC_USDT%5", true},
		{"too many parameters", "/api/v1/odr/orders/?state=active" + strings.Repeat("&", maxQueryParams), true},
		{"recent matches", "/api/v1/mth/matches/BTC_USDT/?limit=5;x", true},
		{"default route", "/other/?a=1;b=2", true},
		{"public read", "/api/v1/mkt/markets/?a=%", true},
		{"plain", "/api/v1/odr/orders/?state=active&symbol=BTC_USDT", false},
		{"repeated and escaped", "/api/v1/odr/fills/?symbol=BTC%5FUSDT&symbol=ETH_USDT&a=+b%20c&ids[]=1", false},
		{"10000 parameters", "/api/v1/odr/orders/?state=active" + strings.Repeat("&", maxQueryParams-1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.backend.count()
			res := rawRequest(t, e.addr, "GET "+tc.target+" HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer tok\r\n\r\n")
			if tc.refused {
				assertError(t, res, http.StatusBadRequest, "invalid_query")
				if n := e.backend.count(); n != before {
					t.Fatalf("the backend received %d requests", n-before)
				}
				return
			}
			res.Body.Close()
			if got := e.backend.last(t).RequestURI; got != tc.target {
				t.Errorf("backend request URI %.100q, want %.100q", got, tc.target)
			}
		})
	}
}

// TestQueryForwardedAsSentUnderGODEBUG: with GODEBUG urlmaxqueryparams
// set (to any value: the operator's bound on net/url's parameters),
// httputil.ReverseProxy re-encodes every query, sorted and escaped anew,
// and drops the whole query past that bound; exgate still forwards the
// query it checked byte for byte.
func TestQueryForwardedAsSentUnderGODEBUG(t *testing.T) {
	for _, tc := range []struct{ name, godebug, target string }{
		{"default bound named, keys unsorted", "urlmaxqueryparams=10000", "/api/v1/odr/orders/?symbol=BTC_USDT&state=active"},
		{"default bound named, escapes", "urlmaxqueryparams=10000", "/api/v1/odr/fills/?symbol=BTC%5FUSDT&a=+b%20c&ids[]=1&flag"},
		{"lower bound, more parameters", "urlmaxqueryparams=2", "/api/v1/odr/orders/?state=active&symbol=BTC_USDT&limit=5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GODEBUG", tc.godebug)
			e := startOrders(t, placed)
			res := rawRequest(t, e.addr, "GET "+tc.target+" HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer tok\r\n\r\n")
			res.Body.Close()
			if got := e.backend.last(t).RequestURI; got != tc.target {
				t.Errorf("backend request URI %q, want %q", got, tc.target)
			}
		})
	}
}
