package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/tracing"
)

// spans is an in-memory span recorder with the sampler the test names.
type spans struct {
	rec *tracetest.SpanRecorder
	tr  *tracing.Tracer
}

func newSpans(t *testing.T, sampler sdktrace.Sampler) *spans {
	rec := tracetest.NewSpanRecorder()
	tp, tr := tracing.NewTracerProvider(sampler, "test", sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return &spans{rec: rec, tr: tr}
}

func (s *spans) tracer() *tracing.Tracer { return s.tr }

// traced gives a gateway's options the tracer of s.
func (s *spans) traced(o *Options) { o.Tracer = s.tracer() }

// memoryClaims is duplicate protection in memory.
func memoryClaims(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) }

// ended returns the ended spans; a server span ends after its answer is
// written, so it waits until want spans have ended.
func (s *spans) ended(t *testing.T, want int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.rec.Ended()
		if len(got) >= want || time.Now().After(deadline) {
			if len(got) != want {
				t.Fatalf("%d spans ended, want %d: %v", len(got), want, names(got))
			}
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// server returns the one server span of ss.
func server(t *testing.T, ss []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range ss {
		if s.SpanKind() == trace.SpanKindServer {
			return s
		}
	}
	t.Fatalf("no server span among %v", names(ss))
	return nil
}

// kind returns the span of ss of kind k, or nil.
func kind(ss []sdktrace.ReadOnlySpan, k trace.SpanKind) sdktrace.ReadOnlySpan {
	for _, s := range ss {
		if s.SpanKind() == k {
			return s
		}
	}
	return nil
}

func names(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}

// attr returns the value of attribute k of attrs, as a string, and
// whether it is set.
func attr(attrs []attribute.KeyValue, k string) (string, bool) {
	for _, a := range attrs {
		if string(a.Key) == k {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// event returns the event named name of s, or fails.
func event(t *testing.T, s sdktrace.ReadOnlySpan, name string) sdktrace.Event {
	t.Helper()
	for _, e := range s.Events() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("span %q has no event %q: %v", s.Name(), name, s.Events())
	return sdktrace.Event{}
}

const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestTraceParentage: a trusted client's context is the server span's
// parent, the server span the backend call's, and the backend receives
// the backend call's span as its parent, with the client's tracestate.
func TestTraceParentage(t *testing.T) {
	sp := newSpans(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Tracing.TrustIncoming = config.TraceTrustAlways
	e := serve(t, cfg, be, Options{Tracer: sp.tracer()})

	res := do(t, "GET", e.url+"/api/v1/mth/orderbook/BTC_USDT/", nil,
		"Traceparent", clientTraceparent, "Tracestate", "vendor=abc")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	ss := sp.ended(t, 2)
	srv, cli := server(t, ss), kind(ss, trace.SpanKindClient)
	if cli == nil {
		t.Fatal("no client span of the backend call")
	}
	in, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	if srv.SpanContext().TraceID() != in || srv.Parent().SpanID().String() != "b7ad6b7169203331" || !srv.Parent().IsRemote() {
		t.Errorf("server span %v has parent %v, want the client's span", srv.SpanContext(), srv.Parent())
	}
	if cli.Parent().SpanID() != srv.SpanContext().SpanID() || cli.SpanContext().TraceID() != in {
		t.Errorf("client span's parent %v, want the server span %v", cli.Parent().SpanID(), srv.SpanContext().SpanID())
	}
	got := propagation.TraceContext{}.Extract(t.Context(), propagation.HeaderCarrier(e.backend.last(t).Header))
	sc := trace.SpanContextFromContext(got)
	if sc.TraceID() != in || sc.SpanID() != cli.SpanContext().SpanID() || !sc.IsSampled() {
		t.Errorf("backend's traceparent %q, want exgate's client span %v sampled", e.backend.last(t).Header.Get("Traceparent"), cli.SpanContext().SpanID())
	}
	if ts := e.backend.last(t).Header.Get("Tracestate"); ts != "vendor=abc" {
		t.Errorf("backend's tracestate %q, want the trusted client's vendor=abc", ts)
	}
	if srv.Name() != "GET /api/v1/mth/orderbook/{symbol}/" || cli.Name() != srv.Name() {
		t.Errorf("span names %q and %q, want GET and the route's pattern", srv.Name(), cli.Name())
	}
	want := map[string]string{"http.request.method": "GET", "http.route": "/api/v1/mth/orderbook/{symbol}/",
		"http.response.status_code": "200", "exgate.route": "order_book", "url.scheme": "http",
		"network.protocol.version": "1.1", "client.address": "127.0.0.1", "exgate.trace.incoming_trusted": "true",
		"network.peer.address": "127.0.0.1", "server.address": "127.0.0.1", "server.port": e.url[strings.LastIndexByte(e.url, ':')+1:]}
	for k, v := range want {
		if got, _ := attr(srv.Attributes(), k); got != v {
			t.Errorf("server span %s = %q, want %q", k, got, v)
		}
	}
	if port, _ := attr(srv.Attributes(), "network.peer.port"); port == "" || port == "0" {
		t.Errorf("server span network.peer.port %q, want the client connection's port", port)
	}
	if got, _ := attr(cli.Attributes(), "http.response.status_code"); got != "200" {
		t.Errorf("client span status %q, want 200", got)
	}
	if got, _ := attr(cli.Attributes(), "server.address"); got != "127.0.0.1" {
		t.Errorf("client span server.address %q, want the backend's 127.0.0.1", got)
	}
	if srv.Status().Code != codes.Unset {
		t.Errorf("server span status %v, want unset for a 200", srv.Status())
	}
}

// TestTraceUntrustedClient: a client's trace context from a peer
// trust_incoming does not trust starts no trace of the client's choosing:
// exgate's span is a root (linked to the client's), sampled by exgate's
// sampler alone, and the backend gets exgate's context, without the
// client's tracestate.
func TestTraceUntrustedClient(t *testing.T) {
	for _, tc := range []struct {
		name, trust string
		proxies     []string
		trusted     bool
	}{
		{"never", config.TraceTrustNever, nil, false},
		{"trusted_proxies, peer not one", config.TraceTrustProxies, []string{"10.0.0.0/8"}, false},
		{"trusted_proxies, peer one", config.TraceTrustProxies, []string{"127.0.0.1/32"}, true},
		{"always", config.TraceTrustAlways, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Exgate's own sampler samples nothing: a trace recorded is
			// one the client chose.
			sp := newSpans(t, sdktrace.ParentBased(sdktrace.NeverSample()))
			be := &backend{}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Tracing.TrustIncoming = tc.trust
			for _, p := range tc.proxies {
				cfg.ClientIP.TrustedProxies = append(cfg.ClientIP.TrustedProxies, config.Prefix{Prefix: mustPrefix(p)})
			}
			e := serve(t, cfg, be, Options{Tracer: sp.tracer()})
			res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil, "Traceparent", clientTraceparent, "Tracestate", "vendor=abc")
			res.Body.Close()
			up := e.backend.last(t).Header
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), propagation.HeaderCarrier(up)))
			if !tc.trusted {
				if sc.TraceID().String() == "0af7651916cd43dd8448eb211c80319c" || sc.IsSampled() || !sc.IsValid() {
					t.Errorf("backend got traceparent %q, want exgate's own trace, not sampled", up.Get("Traceparent"))
				}
				if up.Get("Tracestate") != "" {
					t.Errorf("backend got the untrusted client's tracestate %q", up.Get("Tracestate"))
				}
				if n := len(sp.rec.Ended()); n != 0 {
					t.Errorf("%d spans recorded: an untrusted client chose to be sampled", n)
				}
				return
			}
			if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsSampled() {
				t.Errorf("backend got traceparent %q, want the trusted client's trace, sampled", up.Get("Traceparent"))
			}
			sp.ended(t, 2)
		})
	}
	t.Run("untrusted and sampled by exgate: linked", func(t *testing.T) {
		sp := newSpans(t, sdktrace.AlwaysSample())
		e := startTraced(t, sp, nil)
		res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil, "Traceparent", clientTraceparent)
		res.Body.Close()
		srv := server(t, sp.ended(t, 2))
		if srv.Parent().IsValid() || len(srv.Links()) != 1 || srv.Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("server span parent %v links %v, want a root linked to the client's context", srv.Parent(), srv.Links())
		}
	})
}

// startTraced is startEnv with the tracer of sp.
func startTraced(t *testing.T, sp *spans, mut func(*config.Config)) *env {
	t.Helper()
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	if mut != nil {
		mut(cfg)
	}
	return serve(t, cfg, be, Options{Tracer: sp.tracer()})
}

// TestClientTraceContextTrust: a client's traceparent, tracestate and
// baggage reach the backend only from a client tracing.trust_incoming
// trusts, tracing on or off. Off, an untrusted client's are removed (a
// traced backend would otherwise sample by its flag and read its
// baggage); on, exgate's own trace context replaces them. A format not
// in tracing.propagators is not exgate's and passes as sent.
func TestClientTraceContextTrust(t *testing.T) {
	const (
		sent      = "the client's"
		gone      = "none"
		own       = "exgate's own trace"
		continued = "the client's trace, exgate's span"
	)
	sent3 := map[string]string{"Traceparent": sent, "Tracestate": sent, "Baggage": sent}
	for _, tc := range []struct {
		name, trust string
		tracing     bool
		proxies     []string
		propagators []string
		want        map[string]string
	}{
		{"off, never", config.TraceTrustNever, false, nil, nil, map[string]string{"Traceparent": gone, "Tracestate": gone, "Baggage": gone}},
		{"off, trusted_proxies, peer not one", config.TraceTrustProxies, false, []string{"10.0.0.0/8"}, nil, map[string]string{"Traceparent": gone, "Tracestate": gone, "Baggage": gone}},
		{"off, trusted_proxies, peer one", config.TraceTrustProxies, false, []string{"127.0.0.1/32"}, nil, sent3},
		{"off, always", config.TraceTrustAlways, false, nil, nil, sent3},
		{"off, never, propagators none", config.TraceTrustNever, false, nil, []string{config.TracePropagatorNone}, sent3},
		{"off, never, baggage not listed", config.TraceTrustNever, false, nil, []string{config.TracePropagatorTraceContext}, map[string]string{"Traceparent": gone, "Tracestate": gone, "Baggage": sent}},
		{"on, never", config.TraceTrustNever, true, nil, nil, map[string]string{"Traceparent": own, "Tracestate": gone, "Baggage": gone}},
		{"on, trusted_proxies, peer not one", config.TraceTrustProxies, true, []string{"10.0.0.0/8"}, nil, map[string]string{"Traceparent": own, "Tracestate": gone, "Baggage": gone}},
		{"on, trusted_proxies, peer one", config.TraceTrustProxies, true, []string{"127.0.0.1/32"}, nil, map[string]string{"Traceparent": continued, "Tracestate": sent, "Baggage": sent}},
		{"on, always", config.TraceTrustAlways, true, nil, nil, map[string]string{"Traceparent": continued, "Tracestate": sent, "Baggage": sent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &backend{}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Tracing.TrustIncoming = tc.trust
			if tc.propagators != nil {
				cfg.Tracing.Propagators = tc.propagators
			}
			for _, p := range tc.proxies {
				cfg.ClientIP.TrustedProxies = append(cfg.ClientIP.TrustedProxies, config.Prefix{Prefix: mustPrefix(p)})
			}
			var opts Options
			if tc.tracing {
				opts.Tracer = newSpans(t, sdktrace.ParentBased(sdktrace.NeverSample())).tracer()
			}
			e := serve(t, cfg, be, opts)
			in := map[string]string{"Traceparent": clientTraceparent, "Tracestate": "vendor=abc", "Baggage": "tenant=vip"}
			res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil,
				"Traceparent", in["Traceparent"], "Tracestate", in["Tracestate"], "Baggage", in["Baggage"])
			res.Body.Close()
			up := e.backend.last(t).Header
			for _, h := range []string{"Traceparent", "Tracestate", "Baggage"} {
				t.Run(h, func(t *testing.T) {
					got := up.Get(h)
					var is string
					switch tid := strings.Split(got, "-"); {
					case got == "":
						is = gone
					case got == in[h]:
						is = sent
					case h == "Traceparent" && len(tid) == 4 && tid[1] == "0af7651916cd43dd8448eb211c80319c":
						is = continued
					case h == "Traceparent" && len(tid) == 4:
						is = own
					default:
						is = fmt.Sprintf("%q", got)
					}
					if is != tc.want[h] {
						t.Errorf("backend got %s %s (%q), want %s", h, is, up.Get(h), tc.want[h])
					}
				})
			}
			if tc.tracing {
				return
			}
			for _, le := range e.logs.FilterMessage("request").All() {
				if _, ok := le.ContextMap()["trace_id"]; ok {
					t.Errorf("access log line has a trace_id with tracing off: %v", le.ContextMap())
				}
			}
		})
	}
}

// TestTraceNotSampled: a request exgate does not sample records no span
// but still sends the backend a trace id, marked not sampled, which its
// access log line names so that the two logs join.
func TestTraceNotSampled(t *testing.T) {
	sp := newSpans(t, sdktrace.NeverSample())
	e := startTraced(t, sp, nil)
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	res.Body.Close()
	up := e.backend.last(t).Header.Get("Traceparent")
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), propagation.HeaderCarrier(e.backend.last(t).Header)))
	if !sc.IsValid() || sc.IsSampled() {
		t.Fatalf("backend's traceparent %q, want a valid context not sampled", up)
	}
	line := accessLine(t, e)
	if line["trace_id"] != sc.TraceID().String() || line["span_id"] != sc.SpanID().String() {
		t.Errorf("access log trace_id %v span_id %v, want the backend's %s", line["trace_id"], line["span_id"], up)
	}
	if _, ok := line["trace_sampled"]; ok {
		t.Error("trace_sampled on a request not sampled")
	}
	if n := len(sp.rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded, want none", n)
	}
}

// TestTraceContextSent: with tracing on, the backend always gets a
// traceparent naming exgate's span — the server span of a request not
// sampled (flags 00), the backend call's of a sampled one — in the
// trusted client's trace or a fresh one, with the trusted client's
// tracestate and never an untrusted one's, byte for byte as
// propagation.TraceContext writes them; a parent-based sampler follows a
// trusted sampled parent.
func TestTraceContextSent(t *testing.T) {
	const unsampledParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	client, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	for _, tc := range []struct {
		name, sampler, trust, traceparent, tracestate string
		wantClient, wantSampled                       bool
		wantState                                     string
	}{
		{"no traceparent, not sampled", "parentbased_always_off", config.TraceTrustAlways, "", "", false, false, ""},
		{"trusted unsampled parent", "parentbased_always_on", config.TraceTrustAlways, unsampledParent, "vendor=abc , other=x", true, false, "vendor=abc,other=x"},
		{"untrusted sampled parent", "parentbased_always_off", config.TraceTrustNever, clientTraceparent, "vendor=abc", false, false, ""},
		{"untrusted unsampled parent, sampled by exgate", "always_on", config.TraceTrustNever, unsampledParent, "vendor=abc", false, true, ""},
		{"trusted sampled parent, 0% of roots", "parentbased_traceidratio", config.TraceTrustAlways, clientTraceparent, "vendor=abc", true, true, "vendor=abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSpans(t, tracing.Sampler(tc.sampler, 0))
			e := startTraced(t, sp, func(c *config.Config) { c.Tracing.TrustIncoming = tc.trust })
			var hdr []string
			if tc.traceparent != "" {
				hdr = append(hdr, "Traceparent", tc.traceparent, "Tracestate", tc.tracestate)
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil, hdr...)
			res.Body.Close()
			got := e.backend.last(t).Header
			line := accessLine(t, e)
			tid, _ := trace.TraceIDFromHex(fmt.Sprint(line["trace_id"]))
			sid, _ := trace.SpanIDFromHex(fmt.Sprint(line["span_id"]))
			if (tid == client) != tc.wantClient {
				t.Errorf("trace id %s, want the client's: %v", tid, tc.wantClient)
			}
			want := trace.SpanContextConfig{TraceID: tid, SpanID: sid}
			if tc.wantSampled {
				want.TraceFlags = trace.FlagsSampled
				want.SpanID = kind(sp.ended(t, 2), trace.SpanKindClient).SpanContext().SpanID()
			} else if n := len(sp.rec.Ended()); n != 0 {
				t.Errorf("%d spans recorded of a request not sampled", n)
			}
			if tc.wantState != "" {
				want.TraceState, _ = trace.ParseTraceState(tc.wantState)
			}
			sent := http.Header{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(want)), propagation.HeaderCarrier(sent))
			if !want.TraceID.IsValid() || !slices.Equal(got["Traceparent"], sent["Traceparent"]) || !slices.Equal(got["Tracestate"], sent["Tracestate"]) {
				t.Errorf("backend got traceparent %q tracestate %q, want %q %q", got["Traceparent"], got["Tracestate"], sent["Traceparent"], sent["Tracestate"])
			}
		})
	}
}

// accessLine waits for the one access log line of e and returns its
// fields.
func accessLine(t *testing.T, e *env) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.logs.FilterMessage("request").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	lines := e.logs.FilterMessage("request").All()
	if len(lines) != 1 {
		t.Fatalf("%d access log lines, want 1", len(lines))
	}
	return lines[0].ContextMap()
}

// TestTraceAndLogNameOneLimit: an order placed with an identifier (its
// limits and its allowance of duplicate answers decided in one round)
// has its access log line, its rate_limit span and its RateLimit header
// name the one limit that decided it, not the allowance its claim left
// uncharged: the log said duplicate_answers where the trace said token.
func TestTraceAndLogNameOneLimit(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	e := startOrdersWith(t, placed, nil, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, memoryClaims, sp.traced)
	res := postOrder(t, e, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1","base_amount":"1","identifier":"one-limit"}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("order answered %d", res.StatusCode)
	}
	var spanLimit string
	for _, s := range sp.ended(t, 3) {
		if s.Name() == "rate_limit" {
			spanLimit, _ = attr(s.Attributes(), "exgate.rate_limit.limit")
		}
	}
	line := accessLine(t, e)
	header := res.Header.Get("Ratelimit")
	if spanLimit == "" || line["limit"] != spanLimit || !strings.HasPrefix(header, `"`+spanLimit+`";`) {
		t.Errorf("the span names limit %q, the access log %q, the RateLimit header %q: want one limit", spanLimit, line["limit"], header)
	}
}

// TestTraceReplayGivenBack: an order replayed is charged only its
// allowance of duplicate answers, and its server span says its limits'
// charge was given back, whether its claim was a call of its own or rode
// in the limits' round trip (Redis).
func TestTraceReplayGivenBack(t *testing.T) {
	for _, m := range claimModes(t) {
		t.Run(m.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			e := startOrdersWith(t, placed, nil, m.lim, nil, m.idem, sp.traced)
			order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1","base_amount":"1","identifier":"given-back-` + m.name + `"}`
			for i, want := range []bool{false, true} { // placed: server, rate_limit, client spans; replayed: no client span
				sp.rec.Reset()
				res := postOrder(t, e, order)
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 201 {
					t.Fatalf("order %d answered %d", i, res.StatusCode)
				}
				srv := server(t, sp.ended(t, 3-i))
				if g, _ := attr(srv.Attributes(), "exgate.rate_limit.given_back"); (g == "true") != want {
					t.Errorf("order %d: exgate.rate_limit.given_back %q, want %v", i, g, want)
				}
			}
		})
	}
}

// TestTraceDenyCacheRefusal: a throttled client's order that the deny
// cache refuses before its body is read, with no store round trip, is
// traced with a rate_limit event (exgate.rate_limit.deny_cache) in place
// of the round trip's span, and its refusal code.
func TestTraceDenyCacheRefusal(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	e := startOrdersWith(t, placed, func(c *config.Config) {
		c.Route("place_order").Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
		c.Route("place_order").Limits[0].Burst = 1
	}, ratelimit.NewDenyCache(ratelimit.NewMemory(ratelimit.MemoryOptions{}), 100, nil), nil, memoryClaims, sp.traced)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1","base_amount":"1"}`
	for i, want := range []int{201, 429, 429} { // placed; refused by the store; refused by its deny cache
		sp.rec.Reset()
		res := postOrder(t, e, order)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("order %d answered %d, want %d", i, res.StatusCode, want)
		}
	}
	ss := sp.ended(t, 1) // the server span alone: no round trip, no backend call
	srv := server(t, ss)
	ev := event(t, srv, "rate_limit")
	for k, v := range map[string]string{"exgate.rate_limit.deny_cache": "true", "exgate.rate_limit.decision": "limited",
		"exgate.rate_limit.limit": "token"} {
		if got, _ := attr(ev.Attributes, k); got != v {
			t.Errorf("rate_limit event %s = %q, want %q", k, got, v)
		}
	}
	if code, _ := attr(srv.Attributes(), "exgate.refusal.code"); code != "throttled" {
		t.Errorf("refusal code %q, want throttled", code)
	}
}

// TestTraceAccessLogAndExemplars: a sampled request's access log line
// names its server span, and its durations carry its trace id as an
// exemplar.
func TestTraceAccessLogAndExemplars(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	e := serve(t, cfg, be, Options{Tracer: sp.tracer(), Metrics: m})
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	res.Body.Close()
	srv := server(t, sp.ended(t, 2))
	line := accessLine(t, e)
	if line["trace_id"] != srv.SpanContext().TraceID().String() || line["span_id"] != srv.SpanContext().SpanID().String() ||
		line["trace_sampled"] != true {
		t.Errorf("access log %v, want the server span %v", line, srv.SpanContext())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			for _, b := range mm.GetHistogram().GetBucket() {
				if ex := b.GetExemplar(); ex != nil {
					for _, lp := range ex.GetLabel() {
						if lp.GetName() == "trace_id" && lp.GetValue() == srv.SpanContext().TraceID().String() {
							found[mf.GetName()] = true
						}
					}
				}
			}
		}
	}
	for _, n := range []string{"exgate_request_duration_seconds", "exgate_upstream_duration_seconds"} {
		if !found[n] {
			t.Errorf("%s has no exemplar with the trace id", n)
		}
	}
}

// traceRefusalCase is a request TestTraceRefusals sends, its answer, the
// number of spans it ends, and a check of its spans beyond its status and
// refusal code.
type traceRefusalCase struct {
	name   string
	send   func() *http.Response
	status int
	code   string
	spans  int
	check  func(t *testing.T, srv sdktrace.ReadOnlySpan, all []sdktrace.ReadOnlySpan)
}

// TestTraceRefusals: a request exgate refuses is traced with its
// refusal code and the step that decided it; a 5xx is the server span's
// error, a 4xx is not.
func TestTraceRefusals(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	var hold sync.WaitGroup
	release := make(chan struct{})
	e := startOrdersWith(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/odr/fills/":
			hold.Done()
			<-release
		case "/api/v1/odr/orders/":
			placed(w, r)
		}
	}, func(c *config.Config) {
		c.Route("list_fills").MaxInFlight = 1
		c.Overload.ShedDelay = 0
		c.Route("list_matches").Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
		c.Route("list_matches").Limits[0].Burst = 0
	}, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, memoryClaims, sp.traced)

	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1","base_amount":"1","identifier":"id-1"}`
	cases := []traceRefusalCase{
		{"no token", func() *http.Response {
			return do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(order), "Content-Type", "application/json")
		}, 401, "not_authenticated", 1, traceNoToken},
		{"invalid order", func() *http.Response {
			return postOrder(t, e, `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"-1","base_amount":"1","zz":1}`)
		}, 400, "invalid_order", 2, traceInvalidOrder},
		{"placed", func() *http.Response { return postOrder(t, e, order) }, 201, "", 3, tracePlaced},
		{"replayed", func() *http.Response { return postOrder(t, e, order) }, 201, "", 2, traceReplayed},
		{"identifier conflict", func() *http.Response {
			return postOrder(t, e, strings.Replace(order, `"1","identifier"`, `"2","identifier"`, 1))
		}, 409, "duplicate_identifier", 2, traceIdentifierConflict},
		{"throttled (first)", func() *http.Response { return do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil) }, 200, "", 3, nil},
		{"throttled", func() *http.Response { return do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil) }, 429, "throttled", 2, traceThrottled},
		{"no route", func() *http.Response { return do(t, "GET", e.url+"/nowhere", nil) }, 200, "", 3, traceNoRoute},
		{"shed", func() *http.Response {
			hold.Add(1)
			go func() {
				res := do(t, "GET", e.url+"/api/v1/odr/fills/", nil, "Authorization", "Bearer tok")
				res.Body.Close()
			}()
			hold.Wait()
			return do(t, "GET", e.url+"/api/v1/odr/fills/", nil, "Authorization", "Bearer tok")
		}, 503, "overloaded", 3, traceShed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkTraceRefusal(t, sp, tc) })
	}
	close(release)
}

// checkTraceRefusal sends tc's request and checks its answer and the
// status, refusal code and error of its server span.
func checkTraceRefusal(t *testing.T, sp *spans, tc traceRefusalCase) {
	sp.rec.Reset()
	res := tc.send()
	if tc.code != "" {
		assertError(t, res, tc.status, tc.code)
	} else {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
		}
	}
	all := sp.ended(t, tc.spans)
	srv := server(t, all)
	if got, _ := attr(srv.Attributes(), "http.response.status_code"); got != itoa(tc.status) {
		t.Errorf("status attribute %q, want %d", got, tc.status)
	}
	code, ok := attr(srv.Attributes(), "exgate.refusal.code")
	if code != tc.code || ok != (tc.code != "") {
		t.Errorf("refusal code %q, want %q", code, tc.code)
	}
	if tc.status < 500 && srv.Status().Code == codes.Error {
		t.Errorf("a %d is an error of the server span", tc.status)
	}
	if tc.check != nil {
		tc.check(t, srv, all)
	}
}

// traceNoToken checks that a request without a token is refused by
// authentication, for want of credentials.
func traceNoToken(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	ev := event(t, srv, "authentication")
	if r, _ := attr(ev.Attributes, "exgate.auth.result"); r != "refused" {
		t.Errorf("auth result %q, want refused", r)
	}
	if r, _ := attr(ev.Attributes, "exgate.auth.reason"); r != "no_credentials" {
		t.Errorf("auth reason %q, want no_credentials", r)
	}
	// Refused before its client address is derived, the request still
	// says where it came from.
	if p, _ := attr(srv.Attributes(), "network.peer.address"); p != "127.0.0.1" {
		t.Errorf("network.peer.address %q, want the peer 127.0.0.1", p)
	}
}

// traceInvalidOrder checks that an invalid order's refusal names its bad
// fields, an unknown field unnamed.
func traceInvalidOrder(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	ev := event(t, srv, "refused")
	if f, _ := attr(ev.Attributes, "exgate.refusal.fields"); f != `["(unknown field)","price"]` {
		t.Errorf("refused fields %s, want price and an unknown field unnamed", f)
	}
}

// tracePlaced checks the events and the rate_limit child span of an order
// placed.
func tracePlaced(t *testing.T, srv sdktrace.ReadOnlySpan, all []sdktrace.ReadOnlySpan) {
	ev := event(t, srv, "identifier_claim")
	if o, _ := attr(ev.Attributes, "exgate.identifier.outcome"); o != "claimed" {
		t.Errorf("claim outcome %q, want claimed", o)
	}
	if a, _ := attr(event(t, srv, "authentication").Attributes, "exgate.auth.result"); a != "authenticated" {
		t.Errorf("auth result %q, want authenticated", a)
	}
	var rl sdktrace.ReadOnlySpan
	for _, s := range all {
		if s.Name() == "rate_limit" {
			rl = s
		}
	}
	if rl == nil || rl.Parent().SpanID() != srv.SpanContext().SpanID() {
		t.Fatalf("no rate_limit child span: %v", names(all))
	}
	for k, v := range map[string]string{"exgate.rate_limit.decision": "allowed", "exgate.rate_limit.limit": "token",
		"exgate.rate_limit.remaining": "5398", "exgate.rate_limit.cost": "1"} {
		if got, _ := attr(rl.Attributes(), k); got != v {
			t.Errorf("rate_limit %s = %q, want %q", k, got, v)
		}
	}
	if a, _ := attr(event(t, srv, "overload_admission").Attributes, "exgate.overload.result"); a != "admitted" {
		t.Errorf("overload result %q, want admitted", a)
	}
	if g, ok := attr(srv.Attributes(), "exgate.rate_limit.given_back"); ok {
		t.Errorf("exgate.rate_limit.given_back %q on an order placed, want none", g)
	}
}

// traceReplayed checks that an order sent again is marked as a replayed answer.
func traceReplayed(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	if o, _ := attr(event(t, srv, "identifier_claim").Attributes, "exgate.identifier.outcome"); o != "replayed" {
		t.Errorf("claim outcome %q, want replayed", o)
	}
	if r, _ := attr(srv.Attributes(), "exgate.identifier.replayed"); r != "true" {
		t.Error("replayed answer not marked")
	}
	// Its limits' charge moved to its allowance of duplicate answers.
	if g, _ := attr(srv.Attributes(), "exgate.rate_limit.given_back"); g != "true" {
		t.Errorf("exgate.rate_limit.given_back %q on a replay, want true", g)
	}
}

// traceIdentifierConflict checks the claim outcome of an identifier reused
// for another order.
func traceIdentifierConflict(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	if o, _ := attr(event(t, srv, "identifier_claim").Attributes, "exgate.identifier.outcome"); o != "conflict" {
		t.Errorf("claim outcome %q, want conflict", o)
	}
}

// traceThrottled checks that the rate_limit span of a throttled request is
// an error that says limited.
func traceThrottled(t *testing.T, srv sdktrace.ReadOnlySpan, all []sdktrace.ReadOnlySpan) {
	for _, s := range all {
		if s.Name() == "rate_limit" {
			if d, _ := attr(s.Attributes(), "exgate.rate_limit.decision"); d != "limited" || s.Status().Code != codes.Error {
				t.Errorf("rate_limit decision %q status %v, want limited, an error", d, s.Status())
			}
			return
		}
	}
	t.Error("no rate_limit span")
}

// traceNoRoute checks that a request only the default route matched has no
// http.route.
func traceNoRoute(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	if _, ok := attr(srv.Attributes(), "http.route"); ok || srv.Name() != "GET" {
		t.Errorf("span %q with an http.route for a request only the default route matched", srv.Name())
	}
	if r, _ := attr(srv.Attributes(), "exgate.route"); r != "default" {
		t.Errorf("exgate.route %q, want default", r)
	}
}

// traceShed checks that a request shed for its route's slots is an error of
// the server span, overloaded.
func traceShed(t *testing.T, srv sdktrace.ReadOnlySpan, _ []sdktrace.ReadOnlySpan) {
	if a, _ := attr(event(t, srv, "overload_admission").Attributes, "exgate.overload.result"); a != "shed_route_full" {
		t.Errorf("overload result %q, want shed_route_full", a)
	}
	if srv.Status().Code != codes.Error || srv.Status().Description != "overloaded" {
		t.Errorf("server span status %v, want an error, overloaded", srv.Status())
	}
	if et, _ := attr(srv.Attributes(), "error.type"); et != "overloaded" {
		t.Errorf("error.type %q, want overloaded", et)
	}
	if g, _ := attr(srv.Attributes(), "exgate.rate_limit.given_back"); g != "true" {
		t.Errorf("exgate.rate_limit.given_back %q on a request shed, want true (its charge refunded)", g)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestTraceBackendFailures: a backend that answers 5xx, and one that
// cannot be reached, are errors of the backend call's client span (its
// status, or the failure's kind as exgate_upstream_errors_total names it)
// and of the server span (the status, or exgate's refusal code).
func TestTraceBackendFailures(t *testing.T) {
	for _, tc := range []struct {
		name, upstream, clientErr string
	}{
		{"answers 500", "", "500"},
		{"unreachable", "http://" + unreachable.Refused(t), "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			be := &backend{handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			if tc.upstream != "" {
				cfg.Upstream.URL = config.MustURL(tc.upstream)
			}
			e := serve(t, cfg, be, Options{Tracer: sp.tracer()})
			res := do(t, "GET", e.url+"/api/v1/mth/orderbook/BTC_USDT/", nil)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			ss := sp.ended(t, 2) // no limits: no rate_limit span
			srv, cli := server(t, ss), kind(ss, trace.SpanKindClient)
			if cli == nil {
				t.Fatalf("no client span among %v", names(ss))
			}
			if got, _ := attr(srv.Attributes(), "http.response.status_code"); res.StatusCode < 500 || got != itoa(res.StatusCode) {
				t.Errorf("answered %d, server span status %s", res.StatusCode, got)
			}
			if et, _ := attr(srv.Attributes(), "error.type"); srv.Status().Code != codes.Error || et == "" {
				t.Errorf("server span error.type %q status %v, want an error", et, srv.Status())
			}
			if et, _ := attr(cli.Attributes(), "error.type"); cli.Status().Code != codes.Error || et != tc.clientErr {
				t.Errorf("client span error.type %q status %v, want an error, %s", et, cli.Status(), tc.clientErr)
			}
		})
	}
}

// TestTraceHoldsNoSecret sends requests with a token, an account's JWT
// and order ids in the path, and asserts on every attribute of every
// span, event and link that none carries the token, its id, the account,
// or an order id.
func TestTraceHoldsNoSecret(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	e := startOrdersWith(t, placed, nil, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, memoryClaims, sp.traced)
	const token = "sEcReTt0kenValue-9f8e7d6c5b4a"
	tokenID := e.gw.limits.TokenID(token)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1","base_amount":"1","identifier":"ident-77"}`
	auth := []string{"Authorization", "Bearer " + token, "User-Agent", "bot/1.0 " + token}
	post := func(body string, h ...string) *http.Response {
		return do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body), append(h, "Content-Type", "application/json")...)
	}
	for _, req := range []func() *http.Response{
		func() *http.Response { return post(order, auth...) },
		func() *http.Response { return post(`{"price":"x"}`, auth...) },
		func() *http.Response {
			return post(order, "Authorization", "Bearer x", "Authorization", "Bearer "+token, "User-Agent", token)
		},
		func() *http.Response { return do(t, "DELETE", e.url+"/api/v1/odr/orders/918273645/", nil, auth...) },
		func() *http.Response {
			return do(t, "GET", e.url+"/api/v1/odr/orders/918273645,55443322/", nil, auth...)
		},
		func() *http.Response {
			return do(t, "GET", e.url+"/api/v1/odr/orders/918273645/", nil, "Authorization", "Basic "+token)
		},
		func() *http.Response {
			return do(t, "GET", e.url+"/api/v1/wlt/wallets/", nil, "Authorization", "Bearer a.b.c"+token)
		},
	} {
		res := req()
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	ss := sp.endedAtLeast(t, 7)
	assertSpansHoldNone(t, ss, token, tokenID, tokenID[:12], "918273645", "55443322")
	if ua, _ := attr(server(t, ss).Attributes(), "user_agent.original"); ua != "bot/1.0 [token]" && !slices.ContainsFunc(ss, func(s sdktrace.ReadOnlySpan) bool {
		v, _ := attr(s.Attributes(), "user_agent.original")
		return v == "bot/1.0 [token]"
	}) {
		t.Errorf("user agent %q, want the token replaced", ua)
	}
}

// endedAtLeast waits until at least n spans have ended and returns them.
func (s *spans) endedAtLeast(t *testing.T, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.rec.Ended()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ss := s.rec.Ended()
	if len(ss) < n {
		t.Fatalf("only %d spans ended, want %d", len(ss), n)
	}
	return ss
}

// assertSpansHoldNone fails when a name, attribute (key or value), event
// or link of ss, or their resource, holds one of forbidden.
func assertSpansHoldNone(t *testing.T, ss []sdktrace.ReadOnlySpan, forbidden ...string) {
	t.Helper()
	checked := 0
	look := func(where string, attrs []attribute.KeyValue) {
		for _, a := range attrs {
			checked++
			v := a.Value.Emit()
			for _, f := range forbidden {
				if strings.Contains(v, f) || strings.Contains(string(a.Key), f) {
					t.Errorf("%s: attribute %s = %q holds %q", where, a.Key, v, f)
				}
			}
		}
	}
	for _, s := range ss {
		look(s.Name(), s.Attributes())
		look(s.Name()+" resource", s.Resource().Attributes())
		for _, ev := range s.Events() {
			look(s.Name()+" event "+ev.Name, ev.Attributes)
		}
		for _, l := range s.Links() {
			look(s.Name()+" link", l.Attributes)
		}
		for _, f := range forbidden {
			if strings.Contains(s.Name(), f) {
				t.Errorf("span name %q holds %q", s.Name(), f)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d attributes checked", checked)
	}
}

// TestTraceHoldsNoAccount: with tokens verified as accounts' JWTs, no
// span holds the token, the account's user id or its key (whole or the
// prefix the access log shows), an order's identifier or its body, on an
// order placed, replayed, refused for its body, and refused for its
// identifier.
func TestTraceHoldsNoAccount(t *testing.T) {
	const secret, user = "trace-jwt-secret-0123456789abcdef", "8675309"
	sp := newSpans(t, sdktrace.AlwaysSample())
	var cfg *config.Config
	verifying := func(c *config.Config) {
		c.Identity.Verify, cfg = true, c
		for i := range c.Routes {
			for j := range c.Routes[i].Limits {
				if l := &c.Routes[i].Limits[j]; l.Key == config.KeyToken {
					l.Key = config.KeyAccount
				}
			}
		}
	}
	e := startOrdersWith(t, placed, verifying,
		ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil, memoryClaims, sp.traced, func(o *Options) {
			v, err := identity.New(cfg.Identity.JWT, identity.Options{
				Getenv: func(string) (string, bool) { return secret, true }, AccountKey: o.Limits.AccountID})
			if err != nil {
				t.Fatal(err)
			}
			o.Verifier = v
		})
	token := signedToken(t, secret, user, "access")
	account := e.gw.limits.AccountID(user)
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"31415.92","base_amount":"2.71828","identifier":"my-ident-4242"}`
	auth := []string{"Authorization", "Bearer " + token}
	for i, body := range []string{order, order, `{"symbol":"BTC_USDT","price":"31415.92","identifier":"my-ident-4242"}`,
		strings.Replace(order, "2.71828", "1.41421", 1)} {
		res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body), append(auth, "Content-Type", "application/json")...)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if want := []int{201, 201, 400, 409}[i]; res.StatusCode != want {
			t.Fatalf("order %d answered %d, want %d", i, res.StatusCode, want)
		}
	}
	ss := sp.endedAtLeast(t, 4)
	if v, _ := attr(server(t, ss).Attributes(), "exgate.auth.verified"); v != "true" {
		t.Fatalf("exgate.auth.verified %q: the token was not verified as an account's", v)
	}
	assertSpansHoldNone(t, ss, token, user, account, account[:12], "my-ident-4242", "31415.92", "2.71828", "1.41421")
}

// TestRecentRefusalsListsSampledRefusals: the refusals the console's
// /admin/refusals lists are exgate's refusals of sampled requests with
// their trace ids, newest first.
func TestRecentRefusalsListsSampledRefusals(t *testing.T) {
	sp := newSpans(t, sdktrace.AlwaysSample())
	e := startTraced(t, sp, nil)
	for _, p := range []string{"/api/%2Fv1/", "/api/v1/odr/orders/"} {
		res := do(t, "GET", e.url+p, nil)
		res.Body.Close()
	}
	ss := sp.ended(t, 2)
	tracing, refusals := e.gw.RecentRefusals()
	if !tracing || len(refusals) != 2 {
		t.Fatalf("refusals %+v (tracing %v), want 2 with tracing on", refusals, tracing)
	}
	first := refusals[0]
	if first.Code != "not_authenticated" || first.Route != "list_orders" || first.Status != 401 || first.Method != "GET" {
		t.Errorf("newest refusal %+v, want list_orders' 401", first)
	}
	ids := []string{ss[0].SpanContext().TraceID().String(), ss[1].SpanContext().TraceID().String()}
	if !slices.Contains(ids, first.TraceID) || !slices.Contains(ids, refusals[1].TraceID) || first.TraceID == refusals[1].TraceID {
		t.Errorf("trace ids %s %s, want those of the spans %v", first.TraceID, refusals[1].TraceID, ids)
	}
}

// discard is a span exporter that keeps nothing: what exporting costs
// beyond the SDK's batching is the collector's network, not measured here.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkGatewayTraced is BenchmarkGatewayGET/inprocess and
// BenchmarkGatewayOrder/order/memory with tracing off, on with 1% of
// requests sampled, and on with every request sampled, through the SDK's
// batch processor: the off rows must allocate what those benchmarks do
// (tracing off costs nothing), the 1% rows show what an unsampled
// request's trace context and traceparent cost. Overload admission is
// off: the benchmark's 32 parallel requests come from one client
// address, whose share of the backend's slots would shed them.
func BenchmarkGatewayTraced(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"off", nil},
		{"ratio-0.01", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))},
		{"always", sdktrace.AlwaysSample()},
	} {
		traced := func(b *testing.B, o *Options) {
			if tc.sampler == nil {
				return
			}
			tp, tr := tracing.NewTracerProvider(tc.sampler, "bench", sdktrace.WithBatcher(discard{}))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			o.Tracer = tr
		}
		b.Run("get/"+tc.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
			cfg.Log.Access = false
			cfg.Overload.Enabled = false
			opts := Options{Transport: cannedTransport{}}
			traced(b, &opts)
			gw, err := newGateway(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkMarkets(b, gw)
		})
		b.Run("order/"+tc.name, func(b *testing.B) {
			cfg := benchOrderConfig(b, true)
			cfg.Overload.Enabled = false
			k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
			enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
			opts := Options{Transport: orderTransport{}, Limits: enf, Validator: oneMarketValidator(b, cfg),
				Idempotency: idempotency.NewMemory(idempotency.OptionsFrom(cfg.Idempotency))}
			traced(b, &opts)
			gw, err := newGateway(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkOrders(b, gw, benchOrder)
		})
	}
}

// TestTraceContextSentConcurrently: requests sampled and not, many at
// once, each send the backend the trace context of their own server span
// (the one their access log line names), though each request's
// traceparent value is held in its pooled state, which the next request
// takes. Run it under -race.
func TestTraceContextSentConcurrently(t *testing.T) {
	sp := newSpans(t, tracing.Sampler("traceidratio", 0.5))
	e := startTraced(t, sp, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				res, err := http.Get(e.url + "/api/v1/mkt/tickers/")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	logged := map[string]map[string]any{} // request id → its access log line
	for deadline := time.Now().Add(time.Minute); e.logs.FilterMessage("request").Len() < 200; {
		if time.Now().After(deadline) {
			t.Fatalf("%d access log lines, want 200", e.logs.FilterMessage("request").Len())
		}
		time.Sleep(time.Millisecond)
	}
	for _, l := range e.logs.FilterMessage("request").All() {
		m := l.ContextMap()
		logged[fmt.Sprint(m["request_id"])] = m
	}
	sampled := 0
	for _, r := range e.backend.all() {
		id := r.Header.Get("X-Request-Id")
		line, ok := logged[id]
		if !ok {
			t.Fatalf("the backend got request id %q, which no access log line names", id)
		}
		tp := r.Header.Get("Traceparent")
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != line["trace_id"] {
			t.Errorf("request %s: backend got traceparent %q, its trace is %v", id, tp, line["trace_id"])
			continue
		}
		if parts[3] == "01" {
			sampled++
		} else if parts[2] != line["span_id"] {
			t.Errorf("request %s not sampled: backend got span %s, its server span is %v", id, parts[2], line["span_id"])
		}
	}
	t.Logf("%d of %d requests sampled", sampled, len(e.backend.all()))
}

// TestTracePropagators: exgate reads a trusted client's trace context in
// each format of tracing.propagators and writes its own context to the
// backend in each, replacing what the client sent in it (an untrusted
// client's baggage removed); a format not listed reaches the backend as
// the client sent it, and none reads and writes nothing.
func TestTracePropagators(t *testing.T) {
	const clientTrace = "0af7651916cd43dd8448eb211c80319c"
	b3multi := []string{"X-B3-Traceid", clientTrace, "X-B3-Spanid", "b7ad6b7169203331", "X-B3-Sampled", "1"}
	for _, tc := range []struct {
		name        string
		propagators []string
		trust       string
		sent        []string
		read        string   // the format the backend's context is read in: a propagator's name
		continued   bool     // exgate's trace is the client's
		want        []string // fields the backend gets as written, "" for absent
	}{
		{"default, trusted baggage carried", nil, config.TraceTrustAlways,
			[]string{"Traceparent", clientTraceparent, "Baggage", "tenant=a,  k=v"}, "tracecontext", true,
			[]string{"Baggage", "tenant=a,k=v"}},
		{"default, untrusted baggage removed", nil, config.TraceTrustNever,
			[]string{"Traceparent", clientTraceparent, "Baggage", "tenant=a"}, "tracecontext", false,
			[]string{"Baggage", ""}},
		{"tracecontext alone, baggage untouched", []string{"tracecontext"}, config.TraceTrustNever,
			[]string{"Traceparent", clientTraceparent, "Baggage", "tenant=a"}, "tracecontext", false,
			[]string{"Baggage", "tenant=a"}},
		{"b3multi, trusted", []string{"b3multi"}, config.TraceTrustAlways,
			append([]string{"Traceparent", clientTraceparent}, b3multi...), "b3multi", true,
			[]string{"Traceparent", clientTraceparent, "B3", ""}},
		{"b3multi, untrusted", []string{"b3multi"}, config.TraceTrustNever,
			b3multi, "b3multi", false, []string{"Traceparent", ""}},
		{"b3 single header after tracecontext", []string{"tracecontext", "b3"}, config.TraceTrustAlways,
			[]string{"B3", clientTrace + "-b7ad6b7169203331-1"}, "b3", true, nil},
		{"jaeger", []string{"jaeger"}, config.TraceTrustAlways,
			[]string{"Uber-Trace-Id", clientTrace + ":b7ad6b7169203331:0:1"}, "jaeger", true, nil},
		{"xray, untrusted", []string{"xray"}, config.TraceTrustNever,
			[]string{"X-Amzn-Trace-Id", "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1"}, "xray", false, nil},
		{"none", []string{"none"}, config.TraceTrustAlways,
			[]string{"Traceparent", clientTraceparent, "Baggage", "tenant=a"}, "", false,
			[]string{"Traceparent", clientTraceparent, "Baggage", "tenant=a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSpans(t, sdktrace.AlwaysSample())
			e := startTraced(t, sp, func(c *config.Config) {
				c.Tracing.TrustIncoming = tc.trust
				if tc.propagators != nil {
					c.Tracing.Propagators = tc.propagators
				}
			})
			res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil, tc.sent...)
			res.Body.Close()
			srv := server(t, sp.ended(t, 2))
			if continued := srv.SpanContext().TraceID().String() == clientTrace; continued != tc.continued {
				t.Errorf("server span in trace %s, want the client's trace: %v", srv.SpanContext().TraceID(), tc.continued)
			}
			up := e.backend.last(t).Header
			if tc.read != "" {
				p, err := autoprop.TextMapPropagator(tc.read)
				if err != nil {
					t.Fatal(err)
				}
				sc := trace.SpanContextFromContext(p.Extract(t.Context(), propagation.HeaderCarrier(up)))
				if sc.TraceID() != srv.SpanContext().TraceID() || !sc.IsSampled() {
					t.Errorf("backend's %s context %v, want exgate's trace %s, sampled: %q", tc.read, sc, srv.SpanContext().TraceID(), up)
				}
			}
			for i := 0; i+1 < len(tc.want); i += 2 {
				name := tc.want[i]
				if got := strings.Join(up[name], ","); fieldMembers(name, got) != fieldMembers(name, tc.want[i+1]) {
					t.Errorf("backend's %s %q, want %q", name, got, tc.want[i+1])
				}
			}
		})
	}
}

// fieldMembers returns a trace field's value for comparing: Baggage's
// members sorted (W3C baggage has no order, and OpenTelemetry writes its
// members in no set one), any other field as it is.
func fieldMembers(name, v string) string {
	if name != "Baggage" {
		return v
	}
	members := strings.Split(v, ",")
	for i := range members {
		members[i] = strings.TrimSpace(members[i])
	}
	slices.Sort(members)
	return strings.Join(members, ",")
}

// TestTraceServerAddress: the server span names the host the client
// asked for, and its port when it is not the scheme's; a Host exgate
// refuses, none.
func TestTraceServerAddress(t *testing.T) {
	for _, tc := range []struct {
		host, addr, port string
		tls              bool
	}{
		{"api.exchange.example", "api.exchange.example", "", false},
		{"api.exchange.example:8443", "api.exchange.example", "8443", true},
		{"api.exchange.example:443", "api.exchange.example", "", true},
		{"api.exchange.example:80", "api.exchange.example", "", false},
		{"api.exchange.example:443", "api.exchange.example", "443", false},
		{"[2001:db8::1]:8080", "2001:db8::1", "8080", false},
		{"[2001:db8::1]", "2001:db8::1", "", false},
		{"api.exchange.example:x", "api.exchange.example", "", false},
		{"", "", "", false},
		{strings.Repeat("a", 256), "", "", false},
		// An HTTP/2 :authority net/http takes and exgate refuses (400
		// invalid_header): on main its span carried it, and protobuf
		// refuses to marshal a string that is not UTF-8, which failed
		// the OTLP export of the span's whole batch.
		{"caf\xe9.example", "", "", false},
		{"api.exchange.example:\xff", "", "", false},
		{"api example", "", "", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.Host = tc.host
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			attrs := appendServerAddress(nil, r)
			if addr, _ := attr(attrs, "server.address"); addr != tc.addr {
				t.Errorf("server.address %q, want %q", addr, tc.addr)
			}
			if port, _ := attr(attrs, "server.port"); port != tc.port {
				t.Errorf("server.port %q, want %q", port, tc.port)
			}
		})
	}
}

// TestTracePropagatorsAllocations: W3C baggage, in the default
// propagators, costs a request that carries none no allocation over
// trace context alone, sampled or not.
func TestTracePropagatorsAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("-race makes pooled state anew at random, which moves the counts")
	}
	for _, sampler := range []sdktrace.Sampler{sdktrace.NeverSample(), sdktrace.AlwaysSample()} {
		t.Run(sampler.Description(), func(t *testing.T) {
			allocs := func(propagators ...string) float64 {
				sp := newSpans(t, sampler)
				cfg := config.Default()
				cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
				cfg.Log.Access = false
				cfg.Tracing.Propagators = propagators
				gw, err := newGateway(cfg, Options{Transport: cannedTransport{}, Tracer: sp.tracer()})
				if err != nil {
					t.Fatal(err)
				}
				req := onConnection(gw, httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil))
				w := &discardWriter{h: http.Header{}}
				return testing.AllocsPerRun(200, func() {
					clear(w.h)
					delete(req.Header, "X-Request-Id")
					delete(req.Header, "Traceparent")
					req.URL.Path = "/api/v1/mkt/markets/"
					gw.ServeHTTP(w, req)
					if w.code != 200 {
						t.Fatal(w.answer())
					}
				})
			}
			alone, both := allocs("tracecontext"), allocs("tracecontext", "baggage")
			if both > alone {
				t.Errorf("%v allocations per GET with baggage, %v with trace context alone", both, alone)
			}
		})
	}
}
