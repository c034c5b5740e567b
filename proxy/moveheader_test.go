package proxy

import (
	"bufio"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestMoveHeader: the backend's fields the answer lacks move into it, as
// read, and leave res.Header; a field the answer has (exgate's own) and an
// event stream's Content-Type stay for ReverseProxy to add (and to read,
// to flush the stream), and so does a field without a value (which it
// leaves out); any other Content-Type moves; the moved value slices share
// no array, so that adding to one field changes no other.
func TestMoveHeader(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nDate: Sun, 29 Nov 2026 03:43:40 GMT\r\n" +
		"Set-Cookie: a=1\r\nX-Custom: x\r\nSet-Cookie: b=2\r\nCache-Control: no-store\r\nVary: Origin\r\nContent-Length: 0\r\n\r\n"
	backend := func(vary string) http.Header {
		return http.Header{"Date": {"Sun, 29 Nov 2026 03:43:40 GMT"}, "Set-Cookie": {"a=1", "b=2"}, "X-Custom": {"x"},
			"Cache-Control": {"no-store"}, "Vary": {vary}, "Content-Length": {"0"}}
	}
	withType := func(h http.Header, ct string) http.Header {
		h["Content-Type"] = []string{ct}
		return h
	}
	for _, tc := range []struct {
		name  string
		ctype string      // the backend's Content-Type
		ours  http.Header // the answer's header before the move
		want  http.Header // the answer's header after it
		stays []string    // the fields left in res.Header
	}{
		{"none of ours", "text/event-stream", http.Header{}, backend("Origin"), []string{"Content-Type", "X-Empty"}},
		{"one of ours", "text/event-stream", http.Header{"Vary": {"Accept"}}, backend("Accept"),
			[]string{"Content-Type", "Vary", "X-Empty"}},
		{"event stream as ReverseProxy parses it", "Text/Event-Stream ; charset=utf-8", http.Header{}, backend("Origin"),
			[]string{"Content-Type", "X-Empty"}},
		{"json moves", "application/json", http.Header{},
			withType(backend("Origin"), "application/json"), []string{"X-Empty"}},
		{"not quite an event stream moves", "text/event-streams", http.Header{},
			withType(backend("Origin"), "text/event-streams"), []string{"X-Empty"}},
		{"our own type stays ours", "application/json", http.Header{"Content-Type": {"text/plain"}},
			withType(backend("Origin"), "text/plain"), []string{"Content-Type", "X-Empty"}},
	} {
		raw := fmt.Sprintf(head, tc.ctype)
		t.Run(tc.name, func(t *testing.T) {
			res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Header["X-Empty"] = []string{}
			st := &requestState{}
			st.rw = respWriter{ResponseWriter: httptest.NewRecorder(), st: st}
			for k, v := range tc.ours {
				st.rw.Header()[k] = v
			}
			moveHeader(st.rw.Header(), res.Header, nil, nil)
			out := st.rw.Header()
			for k, v := range tc.want {
				if !slices.Equal(out[k], v) {
					t.Errorf("answer's %s %q, want %q", k, out[k], v)
				}
			}
			if got := slices.Sorted(func(yield func(string) bool) {
				for k := range res.Header {
					if !yield(k) {
						return
					}
				}
			}); !slices.Equal(got, tc.stays) {
				t.Errorf("res.Header keeps %q, want %q", got, tc.stays)
			}
			for k := range out {
				out[k] = append(out[k], "added")
			}
			for k, v := range tc.want {
				if got := out[k]; !slices.Equal(got[:len(got)-1], v) {
					t.Errorf("after appending to every field, %s %q, want %q and one added", k, got, v)
				}
			}
		})
	}
}

// TestBackendFieldsReachClient: every field of the backend's answer
// reaches the client once, in order, beside exgate's own (ietf RateLimit:
// exgate's entry, then the backend's), and an event stream of known
// length is still flushed as it comes.
func TestBackendFieldsReachClient(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		c.Limiter.Headers = config.HeadersIETF
		c.Route("list_matches").Limits = []config.Limit{{Key: config.KeyAddress, Rate: config.Rate{N: 100, Period: time.Hour}}}
	})
	release := make(chan struct{})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Set-Cookie"] = []string{"a=1", "b=2"}
		h["X-Custom"] = []string{"x"}
		h["Ratelimit"] = []string{`"backend";r=3;t=7`}
		h["Content-Type"] = []string{"text/event-stream"}
		h["Content-Length"] = []string{"10"}
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "\n")
	}
	res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
	defer res.Body.Close()
	got := make([]byte, 9)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(res.Body, got); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(got) != "data: 1\n\n" {
			t.Errorf("first event %q, %v", got, err)
		}
	case <-time.After(time.Minute): // only a hang reaches this
		t.Error("the event stream's first event was held back")
	}
	close(release)
	for k, want := range map[string][]string{
		"Set-Cookie": {"a=1", "b=2"}, "X-Custom": {"x"}, "Content-Type": {"text/event-stream"},
		"Ratelimit": {`"address";r=99;t=36`, `"backend";r=3;t=7`},
	} {
		if v := res.Header[k]; !slices.Equal(v, want) {
			t.Errorf("%s %q, want %q", k, v, want)
		}
	}
	if v := res.Header["X-Request-Id"]; len(v) != 1 || v[0] == "" {
		t.Errorf("X-Request-Id %q, want one", v)
	}
}

// TestIsEventStream: isEventStream agrees with ReverseProxy's own test,
// mime.ParseMediaType's media type being text/event-stream
// (ReverseProxy.flushInterval), for types it flushes and types it does not.
func TestIsEventStream(t *testing.T) {
	for _, ct := range []string{
		"text/event-stream", "TEXT/EVENT-STREAM", " text/event-stream ", "text/event-stream;charset=utf-8",
		"text/Event-Stream ; x=y", "text/event-stream; bad", "text/event-stream;;", "\ttext/event-stream\t",
		"", ";", "application/json", "text/event-streams", "text/event", "text/event-stream/x",
		"text /event-stream", "text/event-strea", "text/event-\u017ftream", "\u212aext/event-stream", "text/html; charset=utf-8",
	} {
		t.Run(ct, func(t *testing.T) {
			base, _, _ := mime.ParseMediaType(ct)
			if want := base == "text/event-stream"; isEventStream(ct) != want {
				t.Errorf("isEventStream(%q) = %v, ReverseProxy flushes it as it comes: %v", ct, !want, want)
			}
		})
	}
}
