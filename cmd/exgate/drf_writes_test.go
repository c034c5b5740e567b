package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestDRFUncheckedWrites puts exgate's default route table in front of a
// Django REST framework backend with the writes real exchange backends
// have beside the order family, each recording what reaches it: a mass
// cancel (DELETE of the order list, ?symbol=), a cancel action (POST
// .../3/cancel/), an amend (PATCH, PUT of an order), a withdrawal, and a
// cancel view that also reads {"ids": [...]} from a DELETE's body, as DRF
// parses one. Sent directly, DRF runs each. Through exgate, on main, the
// catch-alls forwarded them unchecked, charged one read, and the cancel
// by id went with its body (a mass cancel charged one): now each write is
// refused with 405 method_not_allowed and an Allow header, the body with
// 400 unexpected_body, and none reaches DRF; a cancel without a body
// still does.
func TestDRFUncheckedWrites(t *testing.T) {
	drf := startDRF(t)
	bearer := []string{"Authorization", "Bearer " + drf.tokens[0], "Content-Type", "application/json"}
	tests := []struct {
		method, target, body string
		kind                 string // what DRF runs, sent directly ("" : not sent directly)
		status               int
		code, allow          string
	}{
		{"DELETE", "/api/v1/odr/orders/?symbol=BTC_USDT", "", "mass_cancel", 405, "method_not_allowed", "GET, HEAD, POST"},
		{"DELETE", "/api/v1/odr/orders.json?symbol=BTC_USDT", "", "mass_cancel", 405, "method_not_allowed", "GET, HEAD, POST"},
		{"POST", "/api/v1/odr/orders/3/cancel/", "", "cancel_action", 405, "method_not_allowed", "GET, HEAD"},
		{"POST", "/api/v1/odr/orders/3/cancel.json", "", "cancel_action", 405, "method_not_allowed", "GET, HEAD"},
		{"POST", "/API/v1//odr/./orders/3/Cancel/", "", "", 405, "method_not_allowed", "GET, HEAD"},
		{"PATCH", "/api/v1/odr/orders/3/", `{"price":"1"}`, "amend", 405, "method_not_allowed", "GET, HEAD, DELETE"},
		{"PUT", "/api/v1/odr/orders/3/", `{"price":"1"}`, "amend", 405, "method_not_allowed", "GET, HEAD, DELETE"},
		{"POST", "/api/v1/wlt/withdrawals/", `{"currency":"BTC","amount":"1"}`, "withdrawal", 405, "method_not_allowed", "GET, HEAD"},
		{"DELETE", "/api/v1/wlt/withdrawals/", "", "withdrawal", 405, "method_not_allowed", "GET, HEAD"},
		{"POST", "/api/v1/wlt", "", "", 405, "method_not_allowed", "GET, HEAD"},
		{"DELETE", "/api/v1/odr/orders/3/", `{"ids":[4,5,6]}`, "cancel_path", 400, "unexpected_body", ""},
	}
	for i, c := range tests {
		if c.kind == "" {
			continue
		}
		id := fmt.Sprintf("direct-%d", i)
		code, _, b := call(t, c.method, drf.url+c.target, c.body, append(bearer, "X-Request-Id", id)...)
		if r := drf.bulkReads(t)[id]; code != http.StatusOK || r.Kind != c.kind {
			t.Fatalf("DRF does not run %s %s directly (%d %s; read %+v): the test proves nothing", c.method, c.target, code, b, r)
		}
	}
	if r := drf.bulkReads(t)[fmt.Sprintf("direct-%d", len(tests)-1)]; strings.Join(r.IDs, ",") != "3,4,5,6" {
		t.Fatalf("DRF's cancel view did not read the DELETE's body (%q): the test proves nothing", r.IDs)
	}
	before := len(drf.bulkReads(t))

	gw, _ := drfGateway(t, drf, nil)
	for i, c := range tests {
		t.Run(c.method+" "+c.target, func(t *testing.T) {
			code, h, b := call(t, c.method, gw+c.target, c.body, append(bearer, "X-Request-Id", fmt.Sprintf("gw-%d", i))...)
			if code != c.status || errCode(t, b) != c.code || h.Get("Allow") != c.allow {
				t.Errorf("%d %s, Allow %q; want %d %s, Allow %q", code, b, h.Get("Allow"), c.status, c.code, c.allow)
			}
		})
	}
	if code, _, b := call(t, "DELETE", gw+"/api/v1/odr/orders/7/", "", append(bearer, "X-Request-Id", "gw-cancel")...); code != http.StatusOK {
		t.Fatalf("a cancel without a body: %d %s", code, b)
	}
	reads := drf.bulkReads(t)
	for id, r := range reads {
		if strings.HasPrefix(id, "gw-") && id != "gw-cancel" {
			t.Errorf("DRF ran %s %s (body %q, ids %q), a request exgate refused", r.Method, r.Kind, r.Body, r.IDs)
		}
	}
	if r := reads["gw-cancel"]; len(reads) != before+1 || r.Kind != "cancel_path" || strings.Join(r.IDs, ",") != "7" {
		t.Errorf("DRF read %d requests through exgate, want the one cancel of 7: %+v", len(reads)-before, r)
	}
}
