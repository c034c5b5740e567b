package proxy

import (
	"net/http"
	"strconv"
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
