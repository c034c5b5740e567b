// Package traceheader reads a request's trace context from its header,
// and writes the backend's, in the formats tracing.propagators names
// (docs/operations.md, "Tracing"): W3C trace context and baggage by hand,
// which allocates nothing on a request that carries neither, the others
// (B3, Jaeger, X-Ray, OpenTracing) by OpenTelemetry's contrib
// propagators. It knows header fields and span contexts, not requests,
// spans or whose context is trusted: the gateway decides those (proxy's
// trace.go).
package traceheader

import (
	"context"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/exgate/exgate/config"
)

// Formats reads and writes the trace context formats of
// tracing.propagators (docs/operations.md, "Tracing"). Each is read from
// a client's request through its OpenTelemetry propagator (autoprop
// builds them by OTEL_PROPAGATORS' names) and written to the backend in
// place of what the client sent in it: W3C trace context and baggage by
// hand, which allocates nothing on a request that carries neither, the
// other formats by their propagators. The zero Formats (none)
// reads and writes no format, and leaves every header as it came.
type Formats struct {
	// read extracts every format, in the configured order: a later
	// format's context replaces an earlier one's, as a composite
	// propagator's does.
	read propagation.TextMapPropagator
	// fields are the header names of every format, canonical: a request
	// carrying none of them starts a trace of exgate's own.
	fields       []string
	traceContext bool // traceparent and tracestate written by sendTraceContext
	baggage      bool // a trusted client's baggage carried, an untrusted one's removed
	// others writes the formats other than W3C's, nil without any; it
	// first removes otherFields and the fields that begin with
	// otherPrefixes (Jaeger's and OpenTracing's baggage), the client's.
	others        propagation.TextMapPropagator
	otherFields   []string
	otherPrefixes []string
}

// baggagePrefixes are the canonical prefixes of the fields in which a
// format carries baggage, one field an entry: its propagator's Fields
// cannot list them.
var baggagePrefixes = map[string]string{"jaeger": "Uberctx-", "ottrace": "Ot-Baggage-"}

// New builds the formats named, which config has checked.
func New(names []string) (Formats, error) {
	if len(names) == 0 || slices.Contains(names, config.TracePropagatorNone) {
		return Formats{}, nil
	}
	read, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return Formats{}, err
	}
	f := Formats{read: read, fields: canonicalFields(read)}
	var rest []string
	for _, n := range names {
		switch n {
		case config.TracePropagatorTraceContext:
			f.traceContext = true
		case config.TracePropagatorBaggage:
			f.baggage = true
		default:
			rest = append(rest, n)
			if p, ok := baggagePrefixes[n]; ok {
				f.otherPrefixes = append(f.otherPrefixes, p)
			}
		}
	}
	if len(rest) > 0 {
		if f.others, err = autoprop.TextMapPropagator(rest...); err != nil {
			return Formats{}, err
		}
		f.otherFields = canonicalFields(f.others)
	}
	return f, nil
}

func canonicalFields(p propagation.TextMapPropagator) []string {
	var out []string
	for _, k := range p.Fields() {
		if k = canonicalKey(k); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Carried reports whether h carries trace context in any format.
func (f *Formats) Carried(h http.Header) bool {
	for _, k := range f.fields {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// Carries reports whether k, a canonical field name, is a field of the
// formats, or one that carries their baggage: what forwarding leaves out
// of a client's trace context it does not trust while tracing is off
// (proxy's Gateway.rewrite, sentAs).
func (f *Formats) Carries(k string) bool {
	if slices.Contains(f.fields, k) {
		return true
	}
	for _, p := range f.otherPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// Write sets h's trace context in every format to sc, with the baggage
// of ctx (a trusted client's, none otherwise), replacing the client's;
// tp holds the traceparent (sendTraceContext).
func (f *Formats) Write(tp *[1]string, h http.Header, ctx context.Context, sc trace.SpanContext) {
	if f.traceContext {
		sendTraceContext(h, tp, sc)
	}
	if f.baggage {
		delete(h, "Baggage")
		if b := baggage.FromContext(ctx); b.Len() > 0 {
			h["Baggage"] = []string{b.String()}
		}
	}
	if f.others != nil {
		for _, k := range f.otherFields {
			delete(h, k)
		}
		for k := range h {
			for _, p := range f.otherPrefixes {
				if strings.HasPrefix(k, p) {
					delete(h, k)
				}
			}
		}
		f.others.Inject(trace.ContextWithSpanContext(ctx, sc), carrier(h))
	}
}

// Read returns ctx with the trace context h carries in any of the
// formats, a later format's replacing an earlier one's; called only when
// Carried(h).
func (f *Formats) Read(ctx context.Context, h http.Header) context.Context {
	return f.read.Extract(ctx, carrier(h))
}

// NonW3C reports whether the formats include one other than W3C trace
// context and baggage: its fields are looked up on every request, where
// a header scan sees W3C's (proxy's scanHeader).
func (f *Formats) NonW3C() bool { return f.others != nil }

// carrier carries trace context in an http.Header under the
// canonical names, without canonicalising a key on every request
// (propagation.HeaderCarrier does, and allocates for it).
type carrier http.Header

// Get returns the value of traceparent or tracestate, joined as RFC 9110
// joins repeated fields.
func (c carrier) Get(key string) string {
	vs := http.Header(c)[canonicalKey(key)]
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ",")
}

// Set replaces the value of key.
func (c carrier) Set(key, value string) {
	http.Header(c)[canonicalKey(key)] = []string{value}
}

// Keys lists the header's names.
func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// canonicalKey is the canonical header name of a propagator's key,
// spelled out for W3C's, which every request that carries one looks up.
func canonicalKey(k string) string {
	switch k {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(k)
}

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = len("00-") + 32 + len("-") + 16 + len("-") + 2

// sendTraceContext sets h's traceparent to sc, and its tracestate to
// sc's (a trusted client's, as the sampler kept it) or none, byte for
// byte as propagation.TraceContext's Inject writes them: the one
// traceparent value is formatted on the stack and held in tp, the
// forwarded context's (proxy's stateContext.traceparent), which the backend's
// header shares (backendHeader).
func sendTraceContext(h http.Header, tp *[1]string, sc trace.SpanContext) {
	var b [traceparentLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	v := append(b[:0], "00-"...)
	v = append(hex.AppendEncode(v, tid[:]), '-')
	v = append(hex.AppendEncode(v, sid[:]), '-')
	v = hex.AppendEncode(v, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	tp[0] = string(v)
	h["Traceparent"] = tp[:]
	delete(h, "Tracestate") // a client's, when not trusted
	if ts := sc.TraceState(); ts.Len() > 0 {
		h["Tracestate"] = []string{ts.String()}
	}
}
