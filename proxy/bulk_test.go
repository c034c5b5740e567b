package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
)

// bulkOrder is the i-th valid order of a test bulk, with an identifier
// when id is not empty.
func bulkOrder(i int, id string) string {
	o := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"%d.00","base_amount":"0.001"`, 60000+i)
	if id != "" {
		o += `,"identifier":"` + id + `"`
	}
	return o + "}"
}

// bulkOf is a bulk of k valid orders; ids prefixes their identifiers.
func bulkOf(k int, ids string) string {
	var parts []string
	for i := range k {
		id := ""
		if ids != "" {
			id = fmt.Sprintf("%s-%d", ids, i)
		}
		parts = append(parts, bulkOrder(i, id))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func postBulk(t *testing.T, e *env, body string, header ...string) *http.Response {
	t.Helper()
	h := append([]string{"Authorization", "Bearer tok", "Content-Type", "application/json"}, header...)
	return do(t, "POST", e.url+"/api/v1/odr/orders/bulk/", strings.NewReader(body), h...)
}

func placedBulk(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `[{"id":1}]`)
}

// perHour sets the first limit of route to n an hour, n at once.
func perHour(c *config.Config, route string, n int) {
	l := &c.Route(route).Limits[0]
	l.Rate, l.Burst = config.Rate{N: int64(n), Period: time.Hour}, n
}

// remaining is the order allowance's remaining count after a request, from
// its RateLimit header ("token";r=N;t=…).
func remaining(t *testing.T, res *http.Response) string {
	t.Helper()
	h := res.Header.Get("RateLimit")
	_, r, ok := strings.Cut(h, ";r=")
	if !ok {
		t.Fatalf("no RateLimit header: %q", h)
	}
	r, _, _ = strings.Cut(r, ";")
	return r
}

// TestBulkGuardedLikeOrders: a bulk placement meets every guard of a
// single order, and a refused one never reaches the backend.
func TestBulkGuardedLikeOrders(t *testing.T) {
	e := startOrdersConfig(t, placedBulk, nil, func(c *config.Config) {
		c.Validation.Bulk.MaxOrders = 5
	})
	tests := []struct {
		name, body string
		header     []string
		status     int
		code       string
		field      string // a field the answer must name
	}{
		{"no token", bulkOf(2, ""), []string{"Authorization", ""}, 401, "not_authenticated", ""},
		{"one bad element", "[" + bulkOrder(0, "") + "," + bulkOrder(1, "") + `,{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.005","base_amount":"0.001"}]`,
			nil, 400, "invalid_order", "orders[2].price"},
		{"an unknown market", `[{"symbol":"DOGE_USDT","type":"market","side":"buy","base_amount":"1"}]`, nil, 400, "invalid_order", "orders[0].symbol"},
		{"repeated identifier inside", "[" + bulkOrder(0, "a") + "," + bulkOrder(1, "a") + "]", nil, 400, "invalid_order", "orders[1].identifier"},
		{"too many orders", bulkOf(6, ""), nil, 400, "invalid_order", "non_field_errors"},
		{"not JSON", "[{", nil, 400, "parse_error", ""},
		{"not JSON media type", bulkOf(1, ""), []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", ""},
		{"an object", bulkOrder(0, ""), nil, 400, "invalid_order", "non_field_errors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := postBulk(t, e, tt.body, tt.header...)
			if tt.header != nil && tt.header[0] == "Authorization" {
				res = do(t, "POST", e.url+"/api/v1/odr/orders/bulk/", strings.NewReader(tt.body), "Content-Type", "application/json")
			}
			er := assertError(t, res, tt.status, tt.code)
			if tt.field != "" {
				if _, ok := er.Fields[tt.field]; !ok {
					t.Errorf("fields %v do not name %s", er.Fields, tt.field)
				}
				if tt.field != "non_field_errors" && !strings.Contains(er.Detail, tt.field) {
					t.Errorf("detail %q does not name %s", er.Detail, tt.field)
				}
			}
			if n := e.backend.count(); n != 0 {
				t.Fatalf("a refused bulk reached the backend (%d requests)", n)
			}
		})
	}
}

// TestBulkForwardedCanonically: the backend receives the array of the
// canonical orders; a bulk cancel the canonical ids, as JSON strings, in
// the shape the client sent (an array, or {"ids": [...]}).
func TestBulkForwardedCanonically(t *testing.T) {
	e := startOrders(t, placedBulk)
	res := postBulk(t, e, ` [ {"base_amount":1e-3,"side":"buy","symbol":"BTC_USDT","type":"limit","price":6.5E4} ,
		{"symbol":"BTC_USDT","type":"market","side":"sell","base_amount":"0.5","price":null} ] `)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("status %d", res.StatusCode)
	}
	want := `[{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001","price":"65000"},{"symbol":"BTC_USDT","type":"market","side":"sell","base_amount":"0.5"}]`
	if got := e.backend.last(t); got.Body != want || got.Path != "/api/v1/odr/orders/bulk/" {
		t.Fatalf("backend got %s %q, want %q", got.Path, got.Body, want)
	}
	for body, want := range map[string]string{
		`[7, "8"]`:               `["7","8"]`,
		` {"ids": [ "2", 3 ] } `: `{"ids":["2","3"]}`,
	} {
		res = postBulk(t, e, body)
		res.Body.Close()
		if got := e.backend.last(t); got.Body != want {
			t.Fatalf("backend got cancel %q for %s, want %q", got.Body, body, want)
		}
	}
}

// TestBulkChargedPerOrder: a bulk of k orders costs k of the order
// allowance (the next order's remaining shows it), a bulk larger than
// what remains is refused whole and charges nothing, and a bulk cancel
// is charged against the cancel limit, so it passes when the order
// allowance is spent.
func TestBulkChargedPerOrder(t *testing.T) {
	e := startOrdersConfig(t, placedBulk, nil, func(c *config.Config) {
		perHour(c, "place_order", 10)
		perHour(c, "cancel_order", 3)
	})
	res := postBulk(t, e, bulkOf(4, ""))
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "6" {
		t.Fatalf("bulk of 4: %d, remaining %s; want 201 and 6", res.StatusCode, remaining(t, res))
	}
	res = postOrder(t, e, bulkOrder(9, ""))
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "5" {
		t.Fatalf("next order: %d, remaining %s; want 5 (the bulk cost 4)", res.StatusCode, remaining(t, res))
	}
	n := e.backend.count()
	res = postBulk(t, e, bulkOf(6, ""))
	assertError(t, res, http.StatusTooManyRequests, "throttled")
	if e.backend.count() != n {
		t.Fatal("a bulk over the remaining allowance reached the backend")
	}
	res = postBulk(t, e, bulkOf(5, ""))
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "0" {
		t.Fatalf("bulk of exactly the remaining 5: %d, remaining %s (the refused bulk must charge nothing)", res.StatusCode, remaining(t, res))
	}
	assertError(t, postOrder(t, e, bulkOrder(1, "")), http.StatusTooManyRequests, "throttled")
	// Cancels still pass, single and bulk, against their own limit.
	res = do(t, "DELETE", e.url+"/api/v1/odr/orders/17/", nil, "Authorization", "Bearer tok")
	res.Body.Close()
	if res.StatusCode != 201 { // what the test backend answers
		t.Fatalf("cancel after the order allowance is spent: %d", res.StatusCode)
	}
	res = postBulk(t, e, `{"ids": ["18", 19]}`)
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "0" {
		t.Fatalf("bulk cancel of 2 with 2 cancels left: %d, remaining %s", res.StatusCode, remaining(t, res))
	}
	assertError(t, postBulk(t, e, `[20]`), http.StatusTooManyRequests, "throttled")
}

// TestBulkIdentifiers: every identifier of a bulk is claimed. The same
// bulk again is answered from the record; a bulk that reuses an identifier
// of another order is refused whole, naming the element, and places
// nothing; the identifiers it claimed before the refusal are free again.
func TestBulkIdentifiers(t *testing.T) {
	e := startOrders(t, placedBulk)
	first := bulkOf(3, "b1")
	res := postBulk(t, e, first)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("status %d", res.StatusCode)
	}
	n := e.backend.count()
	res = postBulk(t, e, first)
	again, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 || res.Header.Get(idempotency.ReplayedHeader) != "true" || string(again) != string(body) {
		t.Fatalf("same bulk again: %d replayed=%q %s", res.StatusCode, res.Header.Get(idempotency.ReplayedHeader), again)
	}
	if e.backend.count() != n {
		t.Fatal("the same bulk was placed twice")
	}
	// An order that reuses one of the bulk's identifiers.
	assertError(t, postOrder(t, e, bulkOrder(5, "b1-1")), http.StatusConflict, "duplicate_identifier")
	// A bulk whose third order reuses a single order's identifier.
	res = postOrder(t, e, bulkOrder(7, "single"))
	res.Body.Close()
	n = e.backend.count()
	er := assertError(t, postBulk(t, e, "["+bulkOrder(0, "n-0")+","+bulkOrder(1, "n-1")+","+bulkOrder(2, "single")+"]"),
		http.StatusConflict, "duplicate_identifier")
	if _, ok := er.Fields["orders[2].identifier"]; !ok || !strings.Contains(er.Detail, "orders[2].identifier") {
		t.Fatalf("refusal does not name the element: %+v", er)
	}
	if e.backend.count() != n {
		t.Fatal("a refused bulk reached the backend")
	}
	// Its first two identifiers were released: a bulk with them passes.
	res = postBulk(t, e, "["+bulkOrder(0, "n-0")+","+bulkOrder(1, "n-1")+"]")
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("identifiers of a refused bulk stay claimed: %d", res.StatusCode)
	}
}
