package proxy

import (
	"io"
	"net/http"
	"testing"
)

// TestConnectionNamingEndToEndHeaderRefused: a Connection header that
// would make the reverse proxy drop a header exgate read or set is
// answered 400 before any limit is charged and never reaches the backend;
// ordinary connection options pass.
func TestConnectionNamingEndToEndHeaderRefused(t *testing.T) {
	e := startLimited(t, nil, smallMatches)
	const matches = "/api/v1/mth/matches/BTC_USDT/"
	refused := [][]string{
		{"Authorization"},
		{"authorization"},
		{"keep-alive, Authorization"},
		{"keep-alive", "AUTHORIZATION"},
		{" \tX-Real-Ip\t "},
		{"x-real-ip"},
		{"X-Forwarded-For"},
		{"X-Forwarded-Proto"},
		{"x-forwarded-host"},
		{"X-Forwarded-Port"},
		{"Forwarded"},
		{"X-Request-Id"},
		{"Content-Type"},
		{"Content-Length"},
		{"Content-Encoding"},
		{"Transfer-Encoding"},
		{"Host"},
		{"Cookie"},
		{"Idempotency-Key"},
		{"close,,cookie"},
	}
	for _, conn := range refused {
		t.Run("refused "+conn[0], func(t *testing.T) {
			before := e.backend.count()
			h := []string{"Authorization", "Bearer tok-1"}
			for _, c := range conn {
				h = append(h, "Connection", c)
			}
			res := do(t, "GET", e.url+matches, nil, h...)
			assertError(t, res, http.StatusBadRequest, "invalid_header")
			if res.Header.Get("RateLimit") != "" {
				t.Error("limits were decided for a refused request")
			}
			if e.backend.count() != before {
				t.Error("the request reached the backend")
			}
		})
	}
	// Nothing above was charged: the 3/min allowance is whole.
	allowed := [][]string{nil, {"keep-alive"}, {"Upgrade, X-Custom-Option"}}
	for _, conn := range allowed {
		var h []string
		for _, c := range conn {
			h = append(h, "Connection", c)
		}
		res := do(t, "GET", e.url+matches, nil, h...)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("Connection %q: %d, want 200 (refused requests must not be charged)", conn, res.StatusCode)
		}
	}
}

func TestNamesEndToEnd(t *testing.T) {
	tests := []struct {
		opt  string
		want bool
	}{
		{"authorization", true},
		{"AuThOrIzAtIoN", true},
		{"x-forwarded-anything", true},
		{"x-forwarded-", false},
		{"keep-alive", false},
		{"close", false},
		{"upgrade", false},
		{"te", false},
		{"x-custom", false},
		{"authorizatio", false},
		{"\u212aeep-alive", false},
		{"cooKie", true},
	}
	for _, tt := range tests {
		t.Run(tt.opt, func(t *testing.T) {
			if got := namesEndToEnd(tt.opt); got != tt.want {
				t.Errorf("namesEndToEnd(%q) = %v, want %v", tt.opt, got, tt.want)
			}
		})
	}
}
