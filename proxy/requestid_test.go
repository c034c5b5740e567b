package proxy

import (
	"strings"
	"testing"
)

func TestRequestID(t *testing.T) {
	e := startEnv(t, nil)
	tests := []struct {
		name, sent string
		kept       bool
	}{
		{"absent", "", false},
		{"valid", "abc-123_x.y:z", true},
		{"too long", strings.Repeat("a", 129), false},
		{"bad chars", "abc def", false},
		{"log injection", "a\"}{\"x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.sent != "" {
				h = []string{"X-Request-Id", tt.sent}
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, h...)
			res.Body.Close()
			id := res.Header.Get("X-Request-Id")
			if back := e.backend.last(t).Header.Get("X-Request-Id"); back != id {
				t.Fatalf("backend saw %q, client %q", back, id)
			}
			if tt.kept != (id == tt.sent) || !validRequestID(id) {
				t.Fatalf("id = %q (sent %q)", id, tt.sent)
			}
		})
	}
}
