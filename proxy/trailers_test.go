package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/exgate/exgate/config"
)

// trailerRecorder is a backend handler that reads each request's body to
// its end (when the backend in front of it has not) and records the
// request's trailers (the keys a Trailer header announced, and the values
// sent after the body), headers and body.
type trailerRecorder struct {
	mu   sync.Mutex
	seen []trailerSeen
}

type trailerSeen struct {
	header, trailer http.Header
	body            string
}

func (tr *trailerRecorder) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	tr.mu.Lock()
	tr.seen = append(tr.seen, trailerSeen{header: r.Header.Clone(), trailer: r.Trailer.Clone(), body: string(body)})
	tr.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":1,"state":"active"}`)
}

func (tr *trailerRecorder) last(t *testing.T) trailerSeen {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.seen) == 0 {
		t.Fatal("the backend received nothing")
	}
	return tr.seen[len(tr.seen)-1]
}

// smuggledTrailers are trailer fields naming headers exgate reads or
// sets, with values exgate never checked.
const smuggledTrailers = "Authorization: Bearer smuggled\r\nX-Forwarded-For: 203.0.113.9\r\nX-Real-Ip: 203.0.113.9\r\n" +
	"X-Request-Id: smuggled-id\r\nContent-Type: text/plain\r\nIdempotency-Key: smuggled\r\nX-Http-Method-Override: DELETE\r\n"

const smuggledNames = "Authorization, X-Forwarded-For, X-Real-IP, X-Request-ID, Content-Type, Idempotency-Key, X-HTTP-Method-Override"

// TestRequestTrailersNotForwarded sends chunked bodies whose trailers name
// Authorization, X-Forwarded-For, X-Request-ID, Content-Type and others,
// announced by a Trailer header or not, on a streamed route and on the
// validated order route: the backend receives the body whole, no trailer
// (no announcement, no value) and the headers exgate set.
func TestRequestTrailersNotForwarded(t *testing.T) {
	rec := &trailerRecorder{}
	e := startOrders(t, rec.handle)
	const order = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	chunked := func(body string) string {
		return fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, smuggledTrailers)
	}
	for _, tc := range []struct {
		name, target, header, body, wantBody string
	}{
		{"streamed route, announced", "/api/v1/usr/deposits/", "Trailer: " + smuggledNames + "\r\n", "abc", "abc"},
		{"streamed route, not announced", "/api/v1/usr/deposits/", "", "abc", "abc"},
		{"order route, announced", "/api/v1/odr/orders/", "Trailer: " + smuggledNames + "\r\n", order, order},
		{"order route, not announced", "/api/v1/odr/orders/", "", order, order},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := "POST " + tc.target + " HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer tok\r\n" +
				"Content-Type: application/json\r\nX-Request-Id: client-id\r\nTransfer-Encoding: chunked\r\n" +
				tc.header + "\r\n" + chunked(tc.body)
			res := rawRequest(t, e.addr, raw)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("status %d %s", res.StatusCode, b)
			}
			got := rec.last(t)
			if got.body = e.backend.last(t).Body; got.body != tc.wantBody {
				t.Errorf("backend body %q, want %q", got.body, tc.wantBody)
			}
			if len(got.trailer) != 0 {
				t.Errorf("backend received trailers %v", got.trailer)
			}
			checkHeadersExgateSet(t, got.header)
		})
	}
}

// TestRequestTrailersNotForwardedHTTP2 sends such trailers over HTTP/2,
// where a client announces them and sends them in a HEADERS frame after
// the body. (net/http's HTTP/2 server resets a stream whose trailers name
// a field RFC 9110 forbids there, such as Authorization or Content-Type;
// the others reach Request.Trailer.)
func TestRequestTrailersNotForwardedHTTP2(t *testing.T) {
	rec := &trailerRecorder{}
	bs := httptest.NewServer(http.HandlerFunc(rec.handle))
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	gw, err := newGateway(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(gw)
	front.EnableHTTP2 = true
	front.StartTLS()
	t.Cleanup(front.Close)
	req, err := http.NewRequest("POST", front.URL+"/api/v1/mkt/orders-export/", io.NopCloser(strings.NewReader("abc")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "client-id")
	req.Header.Set("Content-Type", "application/json")
	req.Trailer = http.Header{}
	for _, k := range []string{"X-Forwarded-For", "X-Real-Ip", "X-Request-Id", "Idempotency-Key", "X-Http-Method-Override"} {
		req.Trailer.Set(k, "smuggled")
	}
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusCreated {
		t.Fatalf("%s %d %s", res.Proto, res.StatusCode, b)
	}
	got := rec.last(t)
	if got.body != "abc" || len(got.trailer) != 0 {
		t.Errorf("backend received body %q and trailers %v", got.body, got.trailer)
	}
	if got.header.Get("Authorization") != "" {
		t.Errorf("backend received Authorization %q", got.header.Get("Authorization"))
	}
	checkHeadersExgateSet(t, got.header)
}

// checkHeadersExgateSet asserts that h, as the backend received it, holds
// the values exgate set, not those of the trailers.
func checkHeadersExgateSet(t *testing.T, h http.Header) {
	t.Helper()
	for k, want := range map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Real-Ip": "127.0.0.1"} {
		if got := h.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("backend %s = %q, want %q", k, got, want)
		}
	}
	// The client's id, made unique for the backend (upstreamValue).
	if got := h.Values("X-Request-Id"); len(got) != 1 || !strings.HasPrefix(got[0], "client-id.") {
		t.Errorf("backend X-Request-Id = %q, want the client's client-id made unique", got)
	}
	for _, k := range []string{"Idempotency-Key", "X-Http-Method-Override", "Trailer"} {
		if v := h.Values(k); v != nil {
			t.Errorf("backend received %s %q", k, v)
		}
	}
	if ct := h.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/json" {
		t.Errorf("backend Content-Type %q", ct)
	}
}

// TestResponseTrailersCannotReplaceHeaders: a backend's response trailers,
// announced or not, reach the client as trailers after the body; the
// header block keeps exgate's X-Request-ID and gains nothing from them.
func TestResponseTrailersCannotReplaceHeaders(t *testing.T) {
	e := startEnv(t, nil)
	e.backend.handler = func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "X-Request-Id, Ratelimit")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `[]`)
		w.(http.Flusher).Flush()
		w.Header().Set("X-Request-Id", "backend-trailer-id")
		w.Header().Set("Ratelimit", "limit=999999")
		w.Header().Set(http.TrailerPrefix+"Retry-After", "0")
	}
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Request-Id", "client-id")
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "[]" {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	if got := res.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "client-id" {
		t.Errorf("X-Request-Id header %q after the trailers, want exgate's", got)
	}
	if got := res.Header.Get("Ratelimit"); got != "" {
		t.Errorf("RateLimit header %q from a trailer", got)
	}
	if res.Header.Get("Retry-After") != "" {
		t.Errorf("Retry-After header %q from a trailer", res.Header.Get("Retry-After"))
	}
	if res.Trailer.Get("X-Request-Id") != "backend-trailer-id" {
		t.Errorf("trailers %v: the backend's trailer did not arrive as a trailer", res.Trailer)
	}
}
