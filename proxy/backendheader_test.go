package proxy

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"reflect"
	"testing"

	"github.com/exgate/exgate/config"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// clientFieldPool is what TestBackendHeaderAsCopied's clients send, a
// few fields at a time: end-to-end fields, hop-by-hop ones, what exgate
// replaces or removes, and Connection values naming some of them.
var clientFieldPool = []struct {
	name   string
	values []string
}{
	{"User-Agent", []string{"sdk/1.0"}},
	{"Accept", []string{"application/json", "text/plain"}},
	{"Accept-Encoding", []string{"gzip, deflate"}},
	{"Authorization", []string{"Bearer t0k3n"}},
	{"Content-Type", []string{"application/json"}},
	{"X-Custom", []string{"1"}},
	{"Connection", []string{"keep-alive"}},
	{"Connection", []string{"close", "X-Custom"}},
	{"Connection", []string{" te , x-idempotency-key"}},
	{"Connection", []string{"Traceparent,Keep-Alive"}},
	{"Connection", []string{"Upgrade, HTTP2-Settings"}},
	{"Keep-Alive", []string{"timeout=5"}},
	{"Proxy-Connection", []string{"keep-alive"}},
	{"Proxy-Authorization", []string{"Basic eA=="}},
	{"Te", []string{"trailers"}},
	{"Te", []string{"gzip", "deflate, Trailers"}},
	{"Te", []string{"gzip"}},
	{"Trailer", []string{"X-Checksum"}},
	{"Transfer-Encoding", []string{"chunked"}},
	{"Upgrade", []string{"websocket"}},
	{"Http2-Settings", []string{"AAMAAABkAAQAoAAAAAIAAAAA"}},
	{"Expect", []string{"100-continue"}},
	{"X-Real-Ip", []string{"203.0.113.9"}},
	{"X-Request-Id", []string{"client-id-1"}},
	{"Forwarded", []string{"for=203.0.113.9"}},
	{"X-Forwarded-For", []string{"203.0.113.9"}},
	{"X-Forwarded-Host", []string{"evil.example"}},
	{"X-Forwarded-Proto", []string{"https"}},
	{"Idempotency-Key", []string{"k1"}},
	{"X-Idempotency-Key", []string{"k2"}},
	{"Traceparent", []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	{"Tracestate", []string{"a=b"}},
	{"Baggage", []string{"k=v"}},
}

// TestBackendHeaderAsCopied checks that the header sent to the backend,
// made once from the client's fields (backendHeader, with the client's
// header hidden from ReverseProxy as forward hides it), is the one
// ReverseProxy's copy of the client's header gave, after the removals,
// renames and replacements rewrite made on it before backendHeader
// (oldRewrite): the same fields with the same values, for random sets of
// the fields of clientFieldPool, on safe and unsafe methods, with and
// without exgate's own id and address, with and without a held claim.
func TestBackendHeaderAsCopied(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
	g, err := newGateway(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		method string
		own    bool // exgate's X-Request-ID and X-Real-IP
		held   bool // a held claim
	}{
		{"GET", http.MethodGet, true, false},
		{"GET with the client's id, no address", http.MethodGet, false, false},
		{"POST", http.MethodPost, true, false},
		{"POST under a held claim", http.MethodPost, true, true},
		{"DELETE with the client's id", http.MethodDelete, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(36, uint64(len(tc.name))))
			for i := range 400 {
				h := randomClientHeader(rnd)
				if checkConnection(h) != nil {
					continue // refused before forward
				}
				newState := func() *requestState {
					st := &requestState{}
					if tc.own {
						st.idValue, st.realIP = []string{"exgate-id"}, []string{"198.51.100.7"}
					}
					if tc.held {
						st.claim.phase = claimHeld
					}
					return st
				}
				got := sentToBackend(t, g, tc.method, h, newState(), true)
				want := sentToBackend(t, g, tc.method, h, newState(), false)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("case %d, client header %v:\nsent %v\nwant %v", i, h, got, want)
				}
			}
		})
	}
}

// randomClientHeader is 1 to 8 fields of clientFieldPool.
func randomClientHeader(rnd *rand.Rand) http.Header {
	h := http.Header{}
	for range 1 + rnd.IntN(8) {
		f := clientFieldPool[rnd.IntN(len(clientFieldPool))]
		h[f.name] = append(h[f.name], f.values...)
	}
	return h
}

// sentToBackend is the header the backend receives for a request of
// method with the client's header h, through ReverseProxy: with rewrite
// and the header hidden as forward hides it (hidden), else with
// oldRewrite on ReverseProxy's copy of it and rewrite's X-Forwarded-*
// fields added. The client's header must be left as it was.
func sentToBackend(t *testing.T, g *Gateway, method string, h http.Header, st *requestState, hidden bool) http.Header {
	t.Helper()
	in := httptest.NewRequest(method, "/api/v1/odr/orders/", nil)
	in.Header = h.Clone()
	st.noDrops = !scanHeader(in).rewritten
	st.peer = g.peerOf(in)
	var sent http.Header
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header.Clone()
		return cannedTransport{}.RoundTrip(r)
	})
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { g.rewrite(st, pr) }, Transport: tr}
	if hidden {
		hideHeader(st, in)
		defer unhideHeader(st, in)
	} else {
		rp.Rewrite = func(pr *httputil.ProxyRequest) {
			oldRewrite(g, st, pr)
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := sentXForwarded(t, g, pr.In, st)[k]; v != nil {
					pr.Out.Header[k] = v
				}
			}
		}
	}
	rp.ServeHTTP(httptest.NewRecorder(), in)
	if hidden {
		unhideHeader(st, in)
	}
	if !reflect.DeepEqual(in.Header, h) {
		t.Fatalf("the client's header became %v, sent %v", in.Header, h)
	}
	return sent
}

// sentXForwarded is the X-Forwarded-* fields rewrite sends for in.
func sentXForwarded(t *testing.T, g *Gateway, in *http.Request, st *requestState) http.Header {
	t.Helper()
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	pr.Out.Header = http.Header{}
	inHeader := st.inHeader
	defer func() { st.inHeader = inHeader }()
	st.inHeader = nil
	g.rewrite(st, pr)
	return pr.Out.Header
}

// oldRewrite is what rewrite did to ReverseProxy's copy of the client's
// header before backendHeader, but for the X-Forwarded-* fields: dropped
// an offer to switch protocols and Expect, renamed replayHeaders on
// unsafe methods, set exgate's X-Request-ID and X-Real-IP (or removed the
// client's), dropped Accept-Encoding under a held claim and an
// untrusted client's trace context, and sent an empty User-Agent when
// the client sent none.
func oldRewrite(g *Gateway, st *requestState, pr *httputil.ProxyRequest) {
	h := pr.Out.Header
	if _, ok := h["Upgrade"]; ok {
		delete(h, "Upgrade")
		delete(h, "Connection")
	}
	delete(h, "Http2-Settings")
	delete(h, "Expect")
	if !safeMethod(pr.Out.Method) {
		for _, name := range replayHeaders {
			if v, ok := h[name[0]]; ok {
				delete(h, name[0])
				h[name[1]] = v
			}
		}
	}
	if st.idValue != nil {
		h["X-Request-Id"] = st.idValue
	}
	if st.realIP != nil {
		h["X-Real-Ip"] = st.realIP
	} else {
		delete(h, "X-Real-Ip")
	}
	if st.claim.phase == claimHeld {
		delete(h, "Accept-Encoding")
	}
	if g.tracer == nil && !g.trustsTraceOf(g.forwardedPeer(pr.In, st)) {
		for k := range h {
			if g.formats.Carries(k) {
				delete(h, k)
			}
		}
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = noUserAgent
	}
}

// TestBackendHeaderSize checks that the header sent to the backend is
// made at its final size: as many fields as the client's that go and
// exgate's, and that the request's own header is its client's again
// after forward.
func TestBackendHeaderSize(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
	cfg.Upstream.ForwardHosts = []string{"*"} // X-Forwarded-Host sent
	for _, tc := range []struct {
		name string
		h    http.Header
		want int
	}{
		{"none", http.Header{}, 6}, // X-Forwarded-For, -Host, -Proto, X-Real-Ip, X-Request-Id, User-Agent
		{"an SDK's", clientHeaders(), 11},
		{"hop-by-hop only", http.Header{"Connection": {"keep-alive"}, "Keep-Alive": {"timeout=5"}, "Te": {"trailers"}}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent http.Header
			tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent = r.Header.Clone()
				return cannedTransport{}.RoundTrip(r)
			})
			gw, err := newGateway(cfg, Options{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			req := onConnection(gw, httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil))
			req.Header = tc.h.Clone()
			w := &discardWriter{h: http.Header{}}
			gw.ServeHTTP(w, req)
			if w.code != 200 || len(sent) != tc.want {
				t.Fatalf("answer %s, %d fields sent (%v), want 200 and %d", w.answer(), len(sent), sent, tc.want)
			}
			if !reflect.DeepEqual(req.Header, tc.h) {
				t.Fatalf("the request's header became %v, its client sent %v", req.Header, tc.h)
			}
		})
	}
}

// roundTripFunc is a RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBackendHeaderOutlivesRequest checks that the header sent to the
// backend still reads as it was sent once the request has ended and its
// state has gone back to the pool: the header shares its values with the
// client's and exgate's, and net/http's HTTP/2 Transport may still be
// writing it after RoundTrip returned (a request cancelled while its
// stream waits to write its head), so no value of it may be one the
// pooled state holds and the next request writes.
func TestBackendHeaderOutlivesRequest(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
	for _, tc := range []struct {
		name   string
		traced bool
		h      http.Header
	}{
		{"an SDK's", false, clientHeaders()},
		{"an SDK's, traced", true, clientHeaders()},
		{"a client's trace context, traced", true, http.Header{"Traceparent": {clientTraceparent}, "Tracestate": {"vendor=abc"}}},
		{"none, traced", true, http.Header{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent, asSent http.Header
			tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent, asSent = r.Header, r.Header.Clone()
				return cannedTransport{}.RoundTrip(r)
			})
			opts := Options{Transport: tr}
			if tc.traced {
				opts.Tracer = newSpans(t, sdktrace.AlwaysSample()).tracer()
			}
			gw, err := newGateway(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			req := onConnection(gw, httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil))
			req.Header = tc.h.Clone()
			w := &discardWriter{h: http.Header{}}
			gw.ServeHTTP(w, req) // returns once the request's state is back in the pool
			if w.code != 200 {
				t.Fatalf("answer %s, want 200", w.answer())
			}
			if !reflect.DeepEqual(sent, asSent) {
				t.Fatalf("the backend's header became %v once the request ended, sent as %v", sent, asSent)
			}
		})
	}
}
