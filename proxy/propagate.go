package proxy

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/exgate/exgate/config"
)

// traceFormats reads and writes the trace context formats of
// tracing.propagators (docs/operations.md, "Tracing"). Each is read from
// a client's request through its OpenTelemetry propagator (autoprop
// builds them by OTEL_PROPAGATORS' names) and written to the backend in
// place of what the client sent in it: W3C trace context and baggage by
// hand, which allocates nothing on a request that carries neither, the
// other formats by their propagators. The zero traceFormats (none)
// reads and writes no format, and leaves every header as it came.
type traceFormats struct {
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

// newTraceFormats builds the formats named, which config has checked.
func newTraceFormats(names []string) (traceFormats, error) {
	if len(names) == 0 || slices.Contains(names, config.TracePropagatorNone) {
		return traceFormats{}, nil
	}
	read, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return traceFormats{}, err
	}
	f := traceFormats{read: read, fields: canonicalFields(read)}
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
			return traceFormats{}, err
		}
		f.otherFields = canonicalFields(f.others)
	}
	return f, nil
}

func canonicalFields(p propagation.TextMapPropagator) []string {
	var out []string
	for _, k := range p.Fields() {
		if k = canonicalTraceKey(k); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// carried reports whether h carries trace context in any format.
func (f *traceFormats) carried(h http.Header) bool {
	for _, k := range f.fields {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// carries reports whether k, a canonical field name, is a field of the
// formats, or one that carries their baggage: what forwarding leaves out
// of a client's trace context it does not trust while tracing is off
// (Gateway.rewrite, sentAs).
func (f *traceFormats) carries(k string) bool {
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

// write sets h's trace context in every format to sc, with the baggage
// of ctx (a trusted client's, none otherwise), replacing the client's;
// tp holds the traceparent (sendTraceContext).
func (f *traceFormats) write(tp *[1]string, h http.Header, ctx context.Context, sc trace.SpanContext) {
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
		f.others.Inject(trace.ContextWithSpanContext(ctx, sc), traceCarrier(h))
	}
}
