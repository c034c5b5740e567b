package apierror

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestBody(t *testing.T) {
	fields := New(http.StatusBadRequest, "invalid_order", "Invalid order: price is required.")
	fields.Fields = map[string][]string{"price": {"required"}}
	for _, tt := range []struct {
		name   string
		e      *Error
		status int
		body   string
		header string // Retry-After
	}{
		{"static", Static(http.StatusServiceUnavailable, "server_busy", "Busy.", "Retry-After", "1"),
			503, `{"detail":"Busy.","code":"server_busy"}` + "\n", "1"},
		{"new", New(http.StatusNotFound, "not_found", "Not found."),
			404, `{"detail":"Not found.","code":"not_found"}` + "\n", ""},
		{"fields", fields,
			400, `{"detail":"Invalid order: price is required.","code":"invalid_order","fields":{"price":["required"]}}` + "\n", ""},
		{"internal", Internal(),
			500, `{"detail":"Internal error.","code":"internal_error"}` + "\n", ""},
		{"too large", TooLarge(8192),
			413, `{"detail":"Request body is larger than 8192 bytes.","code":"request_too_large"}` + "\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.e.Status != tt.status || string(tt.e.Body()) != tt.body || tt.e.Header.Get("Retry-After") != tt.header {
				t.Fatalf("%d %q %v, want %d %q Retry-After %q", tt.e.Status, tt.e.Body(), tt.e.Header, tt.status, tt.body, tt.header)
			}
			if tt.e.Error() != tt.e.Detail {
				t.Fatalf("Error() = %q", tt.e.Error())
			}
			var back Error
			if err := json.Unmarshal(tt.e.Body(), &back); err != nil || back.Code != tt.e.Code || back.Detail != tt.e.Detail {
				t.Fatalf("body does not decode to the answer: %v %+v", err, back)
			}
		})
	}
}

// TestStaticEncodedOnce checks that a static answer's body is built once
// and shared, while an answer from New is encoded as it stands when
// written.
func TestStaticEncodedOnce(t *testing.T) {
	s := Static(http.StatusConflict, "duplicate_identifier", "Used.")
	if &s.Body()[0] != &s.Body()[0] {
		t.Fatal("a static answer's body is encoded per call")
	}
	n := New(http.StatusConflict, "duplicate_identifier", "Used.")
	n.Detail = "Changed."
	if got := string(n.Body()); got != `{"detail":"Changed.","code":"duplicate_identifier"}`+"\n" {
		t.Fatalf("New answer body %q", got)
	}
}
