package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/config"
)

// connSeqKey is the context key of a backend connection's request counter.
type connSeqKey struct{}

// droppingBackend answers GETs and, for any other method, reads the
// request whole and closes its connection without an answer: a backend
// worker that dies (or is recycled) once the request has reached it. It
// counts each such request by method and path, keeps the idempotency
// headers it carried, and notes
// whether one arrived on a connection that had already carried a request.
type droppingBackend struct {
	mu     sync.Mutex
	got    map[string]int      // dropped requests by method and path
	keys   map[string][]string // the idempotency headers' values they carried, by name
	reused atomic.Bool         // a dropped request came on a kept-alive connection
}

func (b *droppingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq := r.Context().Value(connSeqKey{}).(*atomic.Int64).Add(1)
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
		return
	}
	if seq > 1 {
		b.reused.Store(true)
	}
	b.mu.Lock()
	b.got[r.Method+" "+r.URL.Path]++
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		b.keys[name] = append(b.keys[name], r.Header.Values(name)...)
	}
	b.mu.Unlock()
	if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
		c.Close()
	}
}

func (b *droppingBackend) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got[key]
}

// TestIdempotencyHeaderNeverReplays sends requests that are not safe to
// repeat, carrying a client's Idempotency-Key or X-Idempotency-Key, over a
// kept-alive backend connection that the backend closes once it has read
// the request. net/http's Transport takes either header as leave to send
// such a request again on a new connection (Request.isReplayable) when a
// reused connection fails before the answer: the backend would then
// cancel twice, or run a bodyless POST twice. exgate sends each once and
// answers 502, the header still reaching the backend.
func TestIdempotencyHeaderNeverReplays(t *testing.T) {
	cases := []struct {
		name, method, path, body, header string
	}{
		{"cancel with Idempotency-Key", http.MethodDelete, "/api/v1/odr/orders/7/", "", "Idempotency-Key"},
		{"cancel with X-Idempotency-Key", http.MethodDelete, "/api/v1/odr/orders/8/", "", "X-Idempotency-Key"},
		{"bodyless POST with Idempotency-Key", http.MethodPost, "/api/v1/odr/orders/9/cancel/", "", "Idempotency-Key"},
		{"default route DELETE with Idempotency-Key", http.MethodDelete, "/api/v1/other/", "", "Idempotency-Key"},
		{"cancel without a header", http.MethodDelete, "/api/v1/odr/orders/10/", "", ""},
		{"POST with a body and Idempotency-Key", http.MethodPost, "/api/v1/odr/orders/11/amend/", `{"price":"1"}`, "Idempotency-Key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be := &droppingBackend{got: map[string]int{}, keys: map[string][]string{}}
			bs := httptest.NewUnstartedServer(be)
			bs.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
				return context.WithValue(ctx, connSeqKey{}, new(atomic.Int64))
			}
			bs.Start()
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Upstream.Outlier.Consecutive5xx = 0
			forwardWrites(cfg, "orders_refused") // the bodyless POST and the amend: an operator's writes
			cfg.Overload.Enabled = false
			e := serve(t, cfg, &backend{}, Options{})

			// A GET leaves a kept-alive connection to the backend, which
			// the next request reuses.
			res := do(t, http.MethodGet, e.url+"/api/v1/mkt/markets/", nil)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("warm-up GET: %d", res.StatusCode)
			}
			hdr := []string{"Authorization", "Bearer tok-" + strings.ReplaceAll(tc.name, " ", "-"), "Content-Type", "application/json"}
			if tc.header != "" {
				hdr = append(hdr, tc.header, "key-1")
			}
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			res = do(t, tc.method, e.url+tc.path, body, hdr...)
			assertError(t, res, http.StatusBadGateway, "bad_gateway")
			if !be.reused.Load() {
				t.Fatal("the request did not come on a kept-alive connection: the test proves nothing")
			}
			if got := be.count(tc.method + " " + tc.path); got != 1 {
				t.Errorf("the backend got %s %s %d times, want once", tc.method, tc.path, got)
			}
			if tc.header != "" && !slices.Equal(be.keys[tc.header], []string{"key-1"}) {
				t.Errorf("the backend read %s: %q, want the client's one value", tc.header, be.keys[tc.header])
			}
		})
	}
}
