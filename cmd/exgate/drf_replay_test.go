package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/exgate/exgate/idempotency"
)

// TestDRFReplayNegotiation: through exgate, a real Django REST framework
// backend (its default renderers, the browsable API's HTML included, and
// AcceptHeaderVersioning) places an order once, whatever its retries
// ask for. A retry whose Accept asks for the representation the order
// got (the same Accept, or one that takes its type with the same
// version) gets the recorded answer with its Location; one that asks for
// another (JSON after an HTML 201, another API version) gets 406
// not_acceptable saying the order was placed, never the other
// representation and never a second order.
func TestDRFReplayNegotiation(t *testing.T) {
	drf := startDRF(t)
	gw, _ := drfGateway(t, drf, nil)
	bearer := "Bearer " + drf.tokens[0]
	type try struct {
		accept   string
		status   int
		contains string // in the body
	}
	cases := []struct {
		name    string
		accept  string // the order's
		ctype   string // its answer's Content-Type
		retries []try
	}{
		{name: "HTML", accept: "text/html", ctype: "text/html; charset=utf-8", retries: []try{
			{"application/json", http.StatusNotAcceptable, `text/html; charset=utf-8`},
			{"text/html", http.StatusCreated, "<html"},
			{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", http.StatusCreated, "<html"},
		}},
		{name: "version 2.0", accept: "application/json; version=2.0", ctype: "application/json", retries: []try{
			{"application/json; version=1.0", http.StatusNotAcceptable, "application/json"},
			{"application/json", http.StatusNotAcceptable, "application/json"},
			{"application/json; version=2.0", http.StatusCreated, `"version":"2.0"`},
		}},
		{name: "JSON", accept: "application/json", ctype: "application/json", retries: []try{
			{"text/html", http.StatusNotAcceptable, "application/json"},
			{"*/*", http.StatusCreated, `"state":"active"`},
			{"", http.StatusCreated, `"state":"active"`},
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			order := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"neg-%d"}`, i)
			before := len(drf.placed(t))
			code, h, b := call(t, "POST", gw+"/api/v1/odr/orders/", order, "Authorization", bearer,
				"Content-Type", "application/json", "Accept", tc.accept)
			location := h.Get("Location")
			if code != http.StatusCreated || h.Get("Content-Type") != tc.ctype || !strings.HasPrefix(location, "/api/v1/odr/orders/") {
				t.Fatalf("order: %d %q Location %q: %.200s", code, h.Get("Content-Type"), location, b)
			}
			for _, r := range tc.retries {
				hdr := []string{"Authorization", bearer, "Content-Type", "application/json"}
				if r.accept != "" {
					hdr = append(hdr, "Accept", r.accept)
				}
				code, h, again := call(t, "POST", gw+"/api/v1/odr/orders/", order, hdr...)
				replayed := h.Get(idempotency.ReplayedHeader) == "true"
				if code != r.status || !bytes.Contains(again, []byte(r.contains)) || replayed != (code == http.StatusCreated) {
					t.Errorf("retry with Accept %q: %d replayed %v %.300s; want %d with %q", r.accept, code, replayed, again, r.status, r.contains)
					continue
				}
				switch code {
				case http.StatusCreated:
					if !bytes.Equal(again, b) || h.Get("Content-Type") != tc.ctype || h.Get("Location") != location {
						t.Errorf("retry with Accept %q: %q Location %q, want the recorded %q answer, Location %q",
							r.accept, h.Get("Content-Type"), h.Get("Location"), tc.ctype, location)
					}
				default:
					if !bytes.Contains(again, []byte(`"code":"not_acceptable"`)) || !bytes.Contains(again, []byte("already placed")) {
						t.Errorf("retry with Accept %q: %s, want not_acceptable saying the order was placed", r.accept, again)
					}
				}
			}
			if n := len(drf.placed(t)) - before; n != 1 {
				t.Errorf("DRF placed %d orders, want 1", n)
			}
		})
	}
}
