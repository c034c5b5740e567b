package traceheader

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// clientTraceparent is a client's trace context (proxy's tests send it).
const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestSendTraceContextIsThePropagators: what exgate writes for a span
// context is what propagation.TraceContext writes, whatever its flags
// and tracestate, and replaces a client's.
func TestSendTraceContextIsThePropagators(t *testing.T) {
	ts, _ := trace.ParseTraceState("a=1,b=2")
	for _, sc := range []trace.SpanContextConfig{
		{TraceID: trace.TraceID{0xff, 0x0a}, SpanID: trace.SpanID{0x01}},
		{TraceID: trace.TraceID{15: 1}, SpanID: trace.SpanID{7: 0xab}, TraceFlags: trace.FlagsSampled},
		{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: 0xff, TraceState: ts},
	} {
		want := http.Header{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(sc)), propagation.HeaderCarrier(want))
		got := http.Header{"Traceparent": {clientTraceparent}, "Tracestate": {"vendor=abc"}}
		sendTraceContext(got, new([1]string), trace.NewSpanContext(sc))
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%+v: sent %q, the propagator's %q", sc, got, want)
		}
	}
}

// FuzzTraceFormats: whatever trace context a client sends, in any
// format, reading it never fails, and the backend gets exgate's own
// context in every listed format: never a value of an untrusted
// client's, whose baggage (in every format) is removed; a trusted
// client's baggage is carried as it parsed, entries that do not parse
// left out.
func FuzzTraceFormats(f *testing.F) {
	f.Add(clientTraceparent, "vendor=abc", "tenant=a", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "0af7651916cd43dd8448eb211c80319c:b7ad6b7169203331:0:1", "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1", true)
	f.Add("00-zz", "", "k=%zz", "x", "", ":::", "Root=", false)
	f.Add("", "", "a=1;p=2,b=2", "", "", "", "", true)
	formats, err := New([]string{"tracecontext", "baggage", "b3multi", "jaeger", "xray", "ottrace"})
	if err != nil {
		f.Fatal(err)
	}
	own := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xee, 1, 15: 3}, SpanID: trace.SpanID{0xee, 2}, TraceFlags: trace.FlagsSampled})
	f.Fuzz(func(t *testing.T, traceparent, tracestate, bag, b3Trace, b3Span, uber, amzn string, trusted bool) {
		h := http.Header{}
		for k, v := range map[string]string{"Traceparent": traceparent, "Tracestate": tracestate, "Baggage": bag,
			"X-B3-Traceid": b3Trace, "X-B3-Spanid": b3Span, "Uber-Trace-Id": uber, "X-Amzn-Trace-Id": amzn,
			"Uberctx-Tenant": bag, "Ot-Baggage-Tenant": bag} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		ctx := context.Background()
		if formats.Carried(h) {
			in := formats.Read(ctx, h)
			if trusted {
				ctx = in
			}
		}
		formats.Write(new([1]string), h, ctx, own)
		for _, name := range []string{"tracecontext", "b3multi", "jaeger", "xray", "ottrace"} {
			p, _ := autoprop.TextMapPropagator(name)
			sc := trace.SpanContextFromContext(p.Extract(context.Background(), propagation.HeaderCarrier(h)))
			tid, want := sc.TraceID(), own.TraceID()
			if name == "ottrace" { // 64-bit trace ids: the low half
				tid, want = trace.TraceID(append(make([]byte, 8), tid[8:]...)), trace.TraceID(append(make([]byte, 8), want[8:]...))
			}
			if tid != want || sc.SpanID() != own.SpanID() {
				t.Errorf("the backend's %s context %v, want exgate's %v: %q", name, sc, own, h)
			}
		}
		for k := range h {
			if !trusted && (strings.HasPrefix(k, "Uberctx-") || strings.HasPrefix(k, "Ot-Baggage-")) {
				t.Errorf("an untrusted client's %s reached the backend: %q", k, h[k])
			}
		}
		b := h["Baggage"]
		switch {
		case !trusted && len(b) > 0:
			t.Errorf("an untrusted client's baggage reached the backend: %q", b)
		case len(b) > 1:
			t.Errorf("baggage sent %d times: %q", len(b), b)
		case len(b) == 1:
			if parsed, err := baggage.Parse(b[0]); err != nil || parsed.Len() != baggage.FromContext(ctx).Len() {
				t.Errorf("baggage %q is not the client's, parsed (%v)", b[0], err)
			}
		}
	})
}
