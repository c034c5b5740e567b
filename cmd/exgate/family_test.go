package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestAPIFamily sends every path × method of the API family through the
// gateway (the composition root start() builds, in front of the
// reference backend on a socket), with and without a token, and asserts
// the status, the error shape of exgate's own refusals and how many
// requests reached the backend: none for a refusal at the edge.
func TestAPIFamily(t *testing.T) {
	st := startStack(t, nil)
	token := authenticate(t, st.url)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000","base_amount":"0.001"}`
	if code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/", order, "Authorization", "Bearer "+token, "Content-Type", "application/json"); code != 201 {
		t.Fatalf("place: %d %s", code, b)
	}
	_, _, b := call(t, "GET", st.url+"/api/v1/odr/orders/?state=active", "", "Authorization", "Bearer "+token)
	var open []struct{ ID int64 }
	decodeJSON(t, b, &open)
	if len(open) != 1 {
		t.Fatalf("open orders: %s", b)
	}
	id := itoa(open[0].ID)
	bulk := "[" + order + "," + order + "]"
	badBulk := "[" + order + `,{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.001","base_amount":"0.001"}]`
	tests := []struct {
		method, path, body string
		token              bool
		status             int
		code               string // exgate's refusal code; "" when the backend answers
	}{
		{"GET", "/api/v1/odr/orders/?state=active", "", false, 401, "not_authenticated"},
		{"GET", "/api/v1/odr/orders/?state=active", "", true, 200, ""},
		{"GET", "/api/v1/odr/orders.json?state=active", "", true, 200, ""},
		{"GET", "/api/v1/odr/orders/" + id + "/", "", false, 401, "not_authenticated"},
		{"GET", "/api/v1/odr/orders/" + id + "/", "", true, 200, ""},
		{"GET", "/api/v1/odr/orders/" + id + ",999999/", "", true, 200, ""},
		{"GET", "/api/v1/odr/orders/" + id + ".json", "", true, 200, ""},
		{"POST", "/api/v1/odr/orders/", order, false, 401, "not_authenticated"},
		{"POST", "/api/v1/odr/orders.json", order, false, 401, "not_authenticated"},
		{"POST", "/api/v1/odr/orders/", `{"symbol":"BTC_USDT"}`, true, 400, "invalid_order"},
		{"POST", "/api/v1/odr/orders/bulk/", bulk, false, 401, "not_authenticated"},
		{"POST", "/api/v1/odr/orders/bulk/", badBulk, true, 400, "invalid_order"},
		{"POST", "/api/v1/odr/orders/bulk/", bulk, true, 201, ""},
		{"POST", "/api/v1/odr/orders/bulk.json", badBulk, true, 400, "invalid_order"},
		{"POST", "/api/v1/odr/orders/bulk/", `[999999]`, true, 200, ""},
		{"DELETE", "/api/v1/odr/orders/" + id + "/", "", false, 401, "not_authenticated"},
		{"DELETE", "/api/v1/odr/orders/999999/", "", true, 404, ""},
		{"DELETE", "/api/v1/odr/orders/" + id + "/", "", true, 200, ""},
		// A write no route checks is refused at the edge (orders_refused).
		{"PUT", "/api/v1/odr/orders/", order, false, 405, "method_not_allowed"},
		{"PUT", "/api/v1/odr/orders/", order, true, 405, "method_not_allowed"},
		{"DELETE", "/api/v1/odr/orders/?symbol=BTC_USDT", "", true, 405, "method_not_allowed"},
		{"POST", "/api/v1/odr/orders/" + id + "/cancel/", "", true, 405, "method_not_allowed"},
		{"PATCH", "/api/v1/odr/orders/" + id + "/", `{"price":"1"}`, true, 405, "method_not_allowed"},
		{"DELETE", "/api/v1/odr/orders/" + id + "/", `{"ids":[1]}`, true, 400, "unexpected_body"},
		{"GET", "/api/v1/odr/fills/", "", false, 401, "not_authenticated"},
		{"GET", "/api/v1/odr/fills/", "", true, 200, ""},
		{"GET", "/api/v1/odr/anything/", "", false, 401, "not_authenticated"},
		{"GET", "/api/v1/wlt/wallets/", "", false, 401, "not_authenticated"},
		{"GET", "/api/v1/wlt/wallets/", "", true, 200, ""},
		{"POST", "/api/v1/wlt/wallets/", "{}", false, 405, "method_not_allowed"},
		{"POST", "/api/v1/wlt/wallets/", "{}", true, 405, "method_not_allowed"},
		{"POST", "/api/v1/wlt/withdrawals/", "{}", true, 405, "method_not_allowed"},
		{"GET", "/api/v1/mkt/tickers/", "", false, 200, ""},
		{"GET", "/api/v1/mkt/tickers/", "", true, 200, ""},
		{"GET", "/api/v1/mth/orderbook/BTC_USDT/", "", false, 200, ""},
		{"GET", "/api/v1/mth/orderbook/NOPE_USDT/", "", false, 404, ""},
		{"GET", "/api/v1/mkt/markets/", "", false, 200, ""},
		{"POST", "/api/v1/mkt/markets/", "{}", false, 405, ""},
		{"GET", "/api/v1/mth/matches/BTC_USDT/", "", false, 200, ""},
		{"GET", "/api/v1/usr/authenticate/", "", false, 405, ""},
		{"OPTIONS", "/api/v1/odr/orders/", "", false, 405, "method_not_allowed"},
		{"PROPFIND", "/api/v1/odr/orders/", "", true, 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+map[bool]string{true: " with token", false: ""}[tt.token], func(t *testing.T) {
			h := []string{"Content-Type", "application/json"}
			if tt.token {
				h = append(h, "Authorization", "Bearer "+token)
			}
			before := st.backend.proxied.Load()
			code, hdr, body := call(t, tt.method, st.url+tt.path, tt.body, h...)
			reached := st.backend.proxied.Load() - before
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			if tt.code == "" {
				if reached != 1 {
					t.Fatalf("%d requests reached the backend, want 1", reached)
				}
				return
			}
			var e struct{ Detail, Code string }
			decodeJSON(t, body, &e)
			if e.Code != tt.code || e.Detail == "" || hdr.Get("Content-Type") != "application/json" || hdr.Get("X-Request-Id") == "" {
				t.Fatalf("refusal %d %s, want code %s in the error shape", code, body, tt.code)
			}
			if reached != 0 {
				t.Fatalf("an edge refusal reached the backend (%d requests)", reached)
			}
		})
	}
}

// TestBulkAndCancelLimits: through the whole gateway, a bulk of k orders
// charges k of the order allowance (the next order's remaining shows
// it), a bulk over what remains is refused whole, and cancels pass once
// the allowance is spent.
func TestBulkAndCancelLimits(t *testing.T) {
	st := startStack(t, func(c *config.Config) {
		c.Route("place_order").Limits[0].Rate = config.Rate{N: 5, Period: time.Hour}
		c.Route("place_order").Limits[0].Burst = 5
	})
	token := authenticate(t, st.url)
	h := []string{"Authorization", "Bearer " + token, "Content-Type", "application/json"}
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"60000","base_amount":"0.001"}`
	bulkOf := func(k int) string { return "[" + strings.TrimSuffix(strings.Repeat(order+",", k), ",") + "]" }
	remaining := func(hdr map[string][]string) string {
		v := ""
		if r := hdr["Ratelimit"]; len(r) > 0 {
			_, v, _ = strings.Cut(r[0], ";r=")
			v, _, _ = strings.Cut(v, ";")
		}
		return v
	}
	code, hdr, b := call(t, "POST", st.url+"/api/v1/odr/orders/bulk/", bulkOf(3), h...)
	if code != 201 || remaining(hdr) != "2" {
		t.Fatalf("bulk of 3: %d remaining %q %s", code, remaining(hdr), b)
	}
	code, hdr, _ = call(t, "POST", st.url+"/api/v1/odr/orders/", order, h...)
	if code != 201 || remaining(hdr) != "1" {
		t.Fatalf("next order: %d remaining %q, want 1", code, remaining(hdr))
	}
	before := st.backend.proxied.Load()
	code, _, b = call(t, "POST", st.url+"/api/v1/odr/orders/bulk/", bulkOf(2), h...)
	if code != 429 || st.backend.proxied.Load() != before {
		t.Fatalf("bulk of 2 with 1 left: %d %s (backend reached: %v)", code, b, st.backend.proxied.Load() != before)
	}
	if code, _, _ = call(t, "POST", st.url+"/api/v1/odr/orders/", order, h...); code != 201 {
		t.Fatalf("the last order of the allowance: %d (the refused bulk must charge nothing)", code)
	}
	if code, _, _ = call(t, "POST", st.url+"/api/v1/odr/orders/", order, h...); code != 429 {
		t.Fatalf("past the allowance: %d", code)
	}
	_, _, b = call(t, "GET", st.url+"/api/v1/odr/orders/?state=active", "", h...)
	var open []struct{ ID int64 }
	decodeJSON(t, b, &open)
	if len(open) != 5 {
		t.Fatalf("%d open orders, want 5", len(open))
	}
	if code, _, b = call(t, "DELETE", st.url+"/api/v1/odr/orders/"+itoa(open[0].ID)+"/", "", h...); code != 200 {
		t.Fatalf("cancel after the allowance is spent: %d %s", code, b)
	}
	ids := "[" + itoa(open[1].ID) + "," + itoa(open[2].ID) + "]"
	if code, _, b = call(t, "POST", st.url+"/api/v1/odr/orders/bulk/", ids, h...); code != 200 || !strings.Contains(string(b), `"canceled_orders":["`+itoa(open[1].ID)+`","`+itoa(open[2].ID)+`"]`) {
		t.Fatalf("bulk cancel after the allowance is spent: %d %s", code, b)
	}
	_, _, b = call(t, "GET", st.url+"/api/v1/odr/orders/?state=active", "", h...)
	decodeJSON(t, b, &open)
	if len(open) != 2 {
		t.Fatalf("%d open orders after three cancels, want 2", len(open))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
