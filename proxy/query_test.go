package proxy

import (
	"net/http"
	"strconv"
	"testing"
)

// TestOrderRouteQueryRefused: on the routes that validate their body
// (place_order, bulk_orders) any query string is refused with 400
// invalid_query before the backend or a limit sees it, whatever it names;
// a bare "?" is dropped; a route without validate: forwards its query as
// it came.
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
		{"bare question mark", "POST", "/api/v1/odr/orders/?", order, 201, "/api/v1/odr/orders/"},
		{"no query", "POST", "/api/v1/odr/orders/", order, 201, "/api/v1/odr/orders/"},
		{"list filter on a GET route", "GET", "/api/v1/odr/orders/?state=active&symbol=BTC_USDT", "", 201, "/api/v1/odr/orders/?state=active&symbol=BTC_USDT"},
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
