package proxy

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestLongMethodBounded: a method is a token of any length net/http
// reads (up to twice server.max_header_bytes in its request line), and
// on main a client's 12 KiB method went whole into the access log line,
// the span's http.request.method_original and the 405's detail, on
// every request. Now each carries its first maxMethodShown bytes and
// "…"; a method that long is refused as before (405, or 431 past the
// header limit), and a known one or a short unknown one is shown whole.
func TestLongMethodBounded(t *testing.T) {
	long := func(n int) string { return strings.Repeat("X", n) }
	tests := []struct {
		name, method string
		status       int
		shown        string // the method as the log, the span and the detail show it
	}{
		{"an unknown method", "PROPFIND", 405, "PROPFIND"},
		{"at the bound", long(maxMethodShown), 405, long(maxMethodShown)},
		{"one past it", long(maxMethodShown + 1), 405, long(maxMethodShown) + "…"},
		{"12 KiB", long(12 << 10), 405, long(maxMethodShown) + "…"},
		{"past the header limit", long(17 << 10), 431, long(maxMethodShown) + "…"},
	}
	// Over HTTP/2 a :method may be any field value, UTF-8 included: cut
	// between two characters, never inside one.
	for _, m := range []string{strings.Repeat("É", 20), "X" + strings.Repeat("É", 20), "XX" + strings.Repeat("€", 20)} {
		if got := MethodShown(m); !utf8.ValidString(got) || len(got) > maxMethodShown+len("…") || !strings.HasPrefix(m, strings.TrimSuffix(got, "…")) {
			t.Errorf("MethodShown(%q) = %q", m, got)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			e := startTraced(t, sp, nil)
			res := do(t, tt.method, e.url+"/api/v1/mkt/markets/", nil)
			er := assertError(t, res, tt.status, map[int]string{405: "method_not_allowed", 431: "request_header_too_large"}[tt.status])
			if want := fmt.Sprintf("Method %q not allowed.", tt.shown); tt.status == 405 && er.Detail != want {
				t.Errorf("detail %.80q, want %q", er.Detail, want)
			}
			if got := accessLine(t, e)["method"]; got != tt.shown {
				t.Errorf("access log method %.80q, want %q", got, tt.shown)
			}
			srv := server(t, sp.ended(t, 1))
			if got, _ := attr(srv.Attributes(), "http.request.method_original"); got != tt.shown {
				t.Errorf("span's http.request.method_original %.80q, want %q", got, tt.shown)
			}
			if e.backend.count() != 0 {
				t.Error("reached the backend")
			}
		})
	}
}

// TestLongPathBounded: a path is as long as net/http reads a request
// line (twice server.max_header_bytes), and on main a client's 12 KiB
// path went whole into its access log line, which a log pipeline with a
// bound of its own (Docker's json-file driver splits lines at 16 KiB)
// delivers in pieces none of which parses: a client hid its own requests
// from the log by padding their paths. The line now shows its first
// maxPathShown bytes and "…" (shown, as for the method); the request is
// answered as before.
func TestLongPathBounded(t *testing.T) {
	long := func(n int) string { return "/api/v1/mkt/markets/" + strings.Repeat("x", n-len("/api/v1/mkt/markets/")) }
	tests := []struct {
		name, path string
		shown      string // the path as the access log shows it
	}{
		{"a usual path", "/api/v1/mkt/markets/", "/api/v1/mkt/markets/"},
		{"at the bound", long(maxPathShown), long(maxPathShown)},
		{"one past it", long(maxPathShown + 1), long(maxPathShown) + "…"},
		{"12 KiB", long(12 << 10), long(maxPathShown) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			e := startTraced(t, sp, nil)
			res := do(t, "GET", e.url+tt.path, nil)
			res.Body.Close()
			if res.StatusCode == 431 || res.StatusCode == 400 {
				t.Fatalf("answered %d", res.StatusCode)
			}
			if got := accessLine(t, e)["path"]; got != tt.shown {
				t.Errorf("access log path %.80q (%d bytes), want %.80q (%d bytes)", got, len(fmt.Sprint(got)), tt.shown, len(tt.shown))
			}
		})
	}
	for _, p := range []string{strings.Repeat("É", maxPathShown), "X" + strings.Repeat("€", maxPathShown)} {
		if got := shown(p, maxPathShown); !utf8.ValidString(got) || len(got) > maxPathShown+len("…") || !strings.HasPrefix(p, strings.TrimSuffix(got, "…")) {
			t.Errorf("shown(%.20q…) = %.20q… (%d bytes)", p, got, len(got))
		}
	}
}

// TestClientStringsValidUTF8: a header value may hold any byte from 0x80
// on, which net/http's servers take, and a span attribute that is not
// valid UTF-8 fails the OTLP export of its whole batch (protobuf refuses
// to marshal it: opentelemetry-go#3021), dropping the spans of every
// other request in it. On main a User-Agent of Latin-1 bytes, or a long
// one whose 256th byte fell inside a character, went into the span's
// user_agent.original (and the access log) as sent or cut. It is now
// valid UTF-8 (U+FFFD for a stray byte), cut between characters with
// "…" past 256 bytes, as the method is (shown).
func TestClientStringsValidUTF8(t *testing.T) {
	tests := []struct{ name, ua, shown string }{
		{"ASCII", "curl/8.5.0", "curl/8.5.0"},
		{"Latin-1 bytes", "caf\xe9-client/1.0", "caf\uFFFD-client/1.0"},
		{"a cut inside a character", strings.Repeat("x", 255) + "é", strings.Repeat("x", 255) + "…"},
		{"UTF-8 within the bound", "клиент/1.0", "клиент/1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			e := startTraced(t, sp, nil)
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "User-Agent", tt.ua)
			res.Body.Close()
			if got := accessLine(t, e)["user_agent"]; got != tt.shown {
				t.Errorf("access log user_agent %q, want %q", got, tt.shown)
			}
			srv := server(t, sp.ended(t, 2)) // the server's span and the backend call's
			if got, _ := attr(srv.Attributes(), "user_agent.original"); got != tt.shown || !utf8.ValidString(got) {
				t.Errorf("span's user_agent.original %q, want %q", got, tt.shown)
			}
		})
	}
	for _, m := range []string{"\xff\xfe", "GET\x80", strings.Repeat("\xe9", 30)} {
		if got := MethodShown(m); !utf8.ValidString(got) {
			t.Errorf("MethodShown(%q) = %q, not UTF-8", m, got)
		}
	}
}
