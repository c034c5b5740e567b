package proxy

import (
	"net/http"
	"testing"
)

func TestCheckHeaderNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  http.Header
		refused bool
	}{
		{"none", http.Header{}, false},
		{"dashes", http.Header{"X-Forwarded-For": {"1.2.3.4"}, "X-Request-Id": {"a_b"}}, false},
		{"underscore in a value only", http.Header{"X-Note": {"a_b"}}, false},
		{"X_Forwarded_For", http.Header{"X_Forwarded_For": {"1.2.3.4"}}, true},
		{"lower case, as HTTP/2 sends it", http.Header{"x_real_ip": {"1.2.3.4"}}, true},
		{"trailing", http.Header{"Authorization_": {"Bearer x"}}, true},
		{"alone", http.Header{"_": {"x"}}, true},
		{"among others", http.Header{"Accept": {"*/*"}, "X-A": {"1"}, "X_b": {"2"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := checkHeaderNames(tc.header)
			if (e != nil) != tc.refused {
				t.Fatalf("refused %v, want %v", e != nil, tc.refused)
			}
			if e != nil && (e.Status != http.StatusBadRequest || e.Code != "invalid_header") {
				t.Fatalf("%d %s, want 400 invalid_header", e.Status, e.Code)
			}
		})
	}
}
