package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestOrderIDsInPath: a route with validate: order_ids (the default
// get_orders and cancel_order) forwards a list of ids joined by commas as
// it came, charged one unit per id, and refuses a list exgate and a
// backend could read differently, naming the element as a bulk cancel's,
// before anything is charged or forwarded.
func TestOrderIDsInPath(t *testing.T) {
	e := startOrdersConfig(t, placedBulk, nil, func(c *config.Config) {
		perHour(c, "get_orders", 20)
		perHour(c, "cancel_order", 4)
		c.Validation.Bulk.MaxOrders = 5
	})
	auth := []string{"Authorization", "Bearer tok"}
	res := do(t, "GET", e.url+"/api/v1/odr/orders/3,2/", nil, auth...)
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "18" {
		t.Fatalf("status of two orders: %d, remaining %s; want 18 (one unit per id)", res.StatusCode, remaining(t, res))
	}
	if got := e.backend.last(t); got.RequestURI != "/api/v1/odr/orders/3,2/" {
		t.Fatalf("backend got %s", got.RequestURI)
	}
	res = do(t, "GET", e.url+"/api/v1/odr/orders/7/", nil, auth...)
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "17" {
		t.Fatalf("status of one order: %d, remaining %s", res.StatusCode, remaining(t, res))
	}
	n := e.backend.count()
	for _, tt := range []struct{ list, field string }{
		{"3,,2", "ids[1]"},
		{"3,", "ids[1]"},
		{"03", "ids[0]"},
		{"-3", "ids[0]"},
		{"3,3", "ids[1]"},
		{"bulk", "ids[0]"},
		{"%7B3,2%7D", "ids[0]"},
		{"1,2,3,4,5,6", "non_field_errors"},
	} {
		er := assertError(t, do(t, "GET", e.url+"/api/v1/odr/orders/"+tt.list+"/", nil, auth...), http.StatusBadRequest, "invalid_order")
		if er.Fields[tt.field] == nil || !strings.HasPrefix(er.Detail, "Invalid order ids: ") {
			t.Errorf("%s: %+v, want %s named", tt.list, er, tt.field)
		}
	}
	if e.backend.count() != n {
		t.Fatal("a refused id list reached the backend")
	}
	res = do(t, "GET", e.url+"/api/v1/odr/orders/8/", nil, auth...)
	res.Body.Close()
	if remaining(t, res) != "16" {
		t.Fatalf("refused lists were charged: remaining %s, want 16", remaining(t, res))
	}
	// A cancel of a list is charged per id; a list larger than the burst
	// could never pass: 413 with the size that can.
	res = do(t, "DELETE", e.url+"/api/v1/odr/orders/4,5,6/", nil, auth...)
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "1" {
		t.Fatalf("cancel of three: %d, remaining %s; want 1", res.StatusCode, remaining(t, res))
	}
	assertError(t, do(t, "DELETE", e.url+"/api/v1/odr/orders/1,2/", nil, auth...), http.StatusTooManyRequests, "throttled")
	er := assertError(t, do(t, "DELETE", e.url+"/api/v1/odr/orders/1,2,3,4,5/", nil, auth...), http.StatusRequestEntityTooLarge, CodeBulkExceedsLimit)
	if !strings.Contains(er.Detail, "at most 4 order ids") {
		t.Fatalf("detail %q", er.Detail)
	}
}

// TestBulkCancelByDelete: DELETE /api/v1/odr/orders/bulk/ is the bulk
// cancel route, never cancel_order's order "bulk": ids in either shape
// are checked, charged per id against cancel_order's limit and forwarded
// in canonical form with the DELETE; an array of orders is refused whole
// and never reaches the backend.
func TestBulkCancelByDelete(t *testing.T) {
	e := startOrdersConfig(t, placedBulk, nil, func(c *config.Config) {
		perHour(c, "cancel_order", 5)
	})
	h := []string{"Authorization", "Bearer tok", "Content-Type", "application/json"}
	del := func(body string) *http.Response {
		return do(t, "DELETE", e.url+"/api/v1/odr/orders/bulk/", strings.NewReader(body), h...)
	}
	for _, c := range []struct{ body, forwarded, remaining string }{
		{` {"ids": ["2", 3]} `, `{"ids":["2","3"]}`, "3"},
		{`[4]`, `["4"]`, "2"},
	} {
		res := del(c.body)
		res.Body.Close()
		if res.StatusCode != 201 || remaining(t, res) != c.remaining {
			t.Fatalf("%s: %d, remaining %s; want %s", c.body, res.StatusCode, remaining(t, res), c.remaining)
		}
		if got := e.backend.last(t); got.Method != "DELETE" || got.Path != "/api/v1/odr/orders/bulk/" || got.Body != c.forwarded {
			t.Fatalf("backend got %s %s %q, want DELETE %q", got.Method, got.Path, got.Body, c.forwarded)
		}
	}
	n := e.backend.count()
	er := assertError(t, del(bulkOf(1, "")), http.StatusBadRequest, "invalid_order")
	if len(er.Fields["non_field_errors"]) != 1 || !strings.Contains(er.Detail, "only cancels") {
		t.Fatalf("orders on DELETE: %+v", er)
	}
	assertError(t, del(`{"ids":[5,"x"]}`), http.StatusBadRequest, "invalid_order")
	assertError(t, del(""), http.StatusBadRequest, "parse_error")
	assertError(t, del(`[5,6,7]`), http.StatusTooManyRequests, "throttled")
	if e.backend.count() != n {
		t.Fatal("a refused bulk cancel reached the backend")
	}
}
