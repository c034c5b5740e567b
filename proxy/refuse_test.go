package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestUncheckedWritesRefused: under the default table, a write under
// /api/v1/odr/ or /api/v1/wlt/ that no route names (a mass cancel, a
// cancel action, an amend, a withdrawal) meets a refusing route, in every
// spelling that canonicalisation or a format suffix leads there: 405
// method_not_allowed with the methods the path serves, token or not,
// never forwarded nor charged. On main the catch-alls orders_other and
// wallets_other forwarded them, charged one read, on the read lane.
func TestUncheckedWritesRefused(t *testing.T) {
	e := startOrders(t, nil)
	auth := []string{"Authorization", "Bearer tok", "Content-Type", "application/json"}
	tests := []struct {
		name, method, target, body, allow string
	}{
		{"mass cancel", "DELETE", "/api/v1/odr/orders/?symbol=BTC_USDT", "", "GET, HEAD, POST"},
		{"mass cancel, no query", "DELETE", "/api/v1/odr/orders/", "", "GET, HEAD, POST"},
		{"mass cancel, no slash", "DELETE", "/api/v1/odr/orders", "", "GET, HEAD, POST"},
		{"mass cancel, format suffix", "DELETE", "/api/v1/odr/orders.json", "", "GET, HEAD, POST"},
		{"cancel action", "POST", "/api/v1/odr/orders/3/cancel/", "", "GET, HEAD"},
		{"cancel action, odd spelling", "POST", "//API/v1/odr/./fills/../%6Frders/3/CANCEL.json", "", "GET, HEAD"},
		{"amend by PATCH", "PATCH", "/api/v1/odr/orders/3/", `{"price":"1"}`, "GET, HEAD, DELETE"},
		{"amend by PUT", "PUT", "/api/v1/odr/orders/3/", `{"price":"1"}`, "GET, HEAD, DELETE"},
		{"amend of a list", "PATCH", "/api/v1/odr/orders/3,2/", `{"price":"1"}`, "GET, HEAD, DELETE"},
		{"PUT on the bulk path", "PUT", "/api/v1/odr/orders/bulk/", `[3]`, "GET, HEAD, POST, DELETE"},
		{"write to fills", "POST", "/api/v1/odr/fills/", `{}`, "GET, HEAD"},
		{"the namespace itself", "POST", "/api/v1/odr", `{}`, "GET, HEAD"},
		{"the namespace with a slash", "DELETE", "/api/v1/odr/", "", "GET, HEAD"},
		{"OPTIONS, not a preflight", "OPTIONS", "/api/v1/odr/orders/", "", "GET, HEAD, POST"},
		{"withdrawal", "POST", "/api/v1/wlt/withdrawals/", `{"currency":"BTC","amount":"1"}`, "GET, HEAD"},
		{"write to wallets", "PUT", "/api/v1/wlt/wallets/", `{}`, "GET, HEAD"},
		{"wallet namespace, no slash", "DELETE", "/api/v1/wlt", "", "GET, HEAD"},
		{"wallet, odd spelling", "POST", "/api/v1/mkt/../WLT/withdrawals.api/", `{}`, "GET, HEAD"},
	}
	for _, tt := range tests {
		for _, hdr := range [][]string{auth, auth[2:]} {
			t.Run(tt.name+map[bool]string{true: "", false: " without a token"}[len(hdr) == 4], func(t *testing.T) {
				n := e.backend.count()
				var body io.Reader
				if tt.body != "" {
					body = strings.NewReader(tt.body)
				}
				res := do(t, tt.method, e.url+tt.target, body, hdr...)
				allow := res.Header.Get("Allow")
				assertError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
				if allow != tt.allow {
					t.Errorf("Allow = %q, want %q", allow, tt.allow)
				}
				if e.backend.count() != n {
					t.Errorf("the backend received %+v", e.backend.last(t))
				}
			})
		}
	}
	// Reads still go, with a token; nothing above was charged.
	res := do(t, "GET", e.url+"/api/v1/odr/orders/3/cancel/", nil, auth...)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || remaining(t, res) != "599" {
		t.Fatalf("a read under /odr/: %d, remaining %s, want 200 and 599", res.StatusCode, remaining(t, res))
	}
	for _, target := range []string{"/api/v1/wlt/withdrawals/", "/api/v1/odr"} {
		res = do(t, "HEAD", e.url+target, nil, auth...)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || e.backend.last(t).Method != "HEAD" {
			t.Fatalf("HEAD %s: %d", target, res.StatusCode)
		}
	}
	assertError(t, do(t, "GET", e.url+"/api/v1/wlt/withdrawals/", nil), http.StatusUnauthorized, "not_authenticated")
}

// TestRefusingRouteKeepsOwnWrites: a write route the operator puts above
// the refusing route serves its writes, with its own limits; a refusing
// route of one method refuses that method only, the rest falling through
// to later routes, and its Allow names what the rest of the table serves
// at the path, the default route included.
func TestRefusingRouteKeepsOwnWrites(t *testing.T) {
	e := startOrdersConfig(t, nil, nil, func(c *config.Config) {
		action := config.Route{
			Name: "cancel_action", Match: config.Match{Method: "POST", Path: "/api/v1/odr/orders/{id}/cancel/"}, Auth: config.AuthRequired,
			Limits: []config.Limit{{Key: config.KeyToken, Rate: config.Rate{N: 5, Period: time.Hour}}},
		}
		c.Routes = append([]config.Route{action}, c.Routes...)
		// Deletes only, under /mkt/: other methods there go on to default.
		c.Routes = append(c.Routes[:len(c.Routes)-1], config.Route{
			Name: "market_deletes", Match: config.Match{Method: "DELETE", Path: "/api/v1/mkt/{rest...}"}, Refuse: true,
		}, c.Routes[len(c.Routes)-1])
	})
	auth := []string{"Authorization", "Bearer tok"}
	res := do(t, "POST", e.url+"/api/v1/odr/orders/3/cancel/", nil, auth...)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || remaining(t, res) != "4" || e.backend.last(t).Path != "/api/v1/odr/orders/3/cancel/" {
		t.Fatalf("the operator's write route: %d, remaining %s", res.StatusCode, remaining(t, res))
	}
	res = do(t, "DELETE", e.url+"/api/v1/mkt/markets/", nil)
	if allow := res.Header.Get("Allow"); allow != "GET, HEAD, POST, PUT, PATCH, OPTIONS" {
		t.Errorf("Allow = %q", allow)
	}
	assertError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
	n := e.backend.count()
	res = do(t, "PUT", e.url+"/api/v1/mkt/markets/", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || e.backend.count() != n+1 {
		t.Fatalf("PUT under /mkt/ (default route): %d", res.StatusCode)
	}
}

// TestOrderIDsRouteRefusesBody: a status read or a cancel by id carries
// no body. Django REST framework parses a DELETE's body as a POST's: {"ids":
// [4,5,6]} beside the path's one id would be a mass cancel charged one.
// Refused with 400 unexpected_body before any limit, with a length or
// chunked; an empty body (Content-Length: 0) goes.
func TestOrderIDsRouteRefusesBody(t *testing.T) {
	e := startOrdersConfig(t, nil, nil, func(c *config.Config) { perHour(c, "cancel_order", 10) })
	auth := []string{"Authorization", "Bearer tok"}
	n := e.backend.count()
	tests := []struct {
		name, method string
		body         io.Reader
	}{
		{"cancel with ids", "DELETE", strings.NewReader(`{"ids":[4,5,6]}`)},
		{"cancel, chunked", "DELETE", io.MultiReader(strings.NewReader(`{"ids":[4,5,6]}`))},
		{"status read with a body", "GET", strings.NewReader(`{"ids":[4]}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			er := assertError(t, do(t, tt.method, e.url+"/api/v1/odr/orders/3/", tt.body, auth...), http.StatusBadRequest, "unexpected_body")
			if !strings.Contains(er.Detail, "path") {
				t.Errorf("detail %q", er.Detail)
			}
		})
	}
	if e.backend.count() != n {
		t.Fatal("a body on an order id route reached the backend")
	}
	req, _ := http.NewRequest("DELETE", e.url+"/api/v1/odr/orders/3/", http.NoBody)
	req.Header.Set("Authorization", "Bearer tok")
	req.ContentLength = 0
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || remaining(t, res) != "9" {
		t.Fatalf("cancel without a body: %d, remaining %s; want 200, 9 (the refusals charged nothing)", res.StatusCode, remaining(t, res))
	}
	emptyBodiesOfUnknownLength(t, e)
}

// emptyBodiesOfUnknownLength: a cancel whose body has no length and ends
// before its first byte (HTTP/1.1's empty last chunk; HTTP/2 headers
// without END_STREAM, then an empty DATA frame that ends the stream, as
// a client that leaves a DELETE's stream open sends) carries no body: it
// is forwarded, without one.
func emptyBodiesOfUnknownLength(t *testing.T, e *env) {
	t.Run("HTTP/1.1 empty chunked", func(t *testing.T) {
		res := rawRequest(t, e.addr, "DELETE /api/v1/odr/orders/3/ HTTP/1.1\r\nHost: api.example\r\n"+
			"Authorization: Bearer tok\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", res.StatusCode)
		}
	})
	t.Run("HTTP/2 stream ended by an empty DATA frame", func(t *testing.T) {
		h2 := bothProtocols(t, e)[1]
		req, _ := http.NewRequest("DELETE", h2.url+"/api/v1/odr/orders/3/", io.NopCloser(strings.NewReader("")))
		req.Header.Set("Authorization", "Bearer tok")
		res, err := h2.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
			t.Fatalf("status %d over HTTP/%d, want 200 over HTTP/2", res.StatusCode, res.ProtoMajor)
		}
	})
	if got := e.backend.last(t); got.ContentLength != 0 || len(got.TransferEncoding) > 0 {
		t.Errorf("the backend got Content-Length %d, Transfer-Encoding %q: want no body", got.ContentLength, got.TransferEncoding)
	}
}

// forwardWrites makes the default table's refusing route name forward
// every method instead, as the catch-alls did before it (a token
// required, one unit of the reads' limit): an operator's table with
// writes it forwards unchecked, for tests of what exgate does to such a
// request on its way (its headers, body, trailers, retries).
func forwardWrites(c *config.Config, name string) {
	r := c.Route(name)
	r.Refuse, r.Auth, r.Priority = false, config.AuthRequired, config.PriorityPrivateRead
	r.Limits = []config.Limit{{Key: config.KeyToken, Rate: config.Rate{N: 600, Period: time.Minute}}}
}
