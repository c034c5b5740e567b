package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the tracer of exgate's spans: the SDK's, whose provider's
// sampler and ID generator it shares, so that it can decide whether a
// span is sampled before the SDK starts one (StartSampled).
type Tracer struct {
	trace.Tracer
	sampler sdktrace.Sampler
	ids     *idGenerator
}

// NewTracerProvider returns the SDK's tracer provider with opts, sampler
// as its sampler (over any opts name), and the Tracer of exgate's scope
// on it, of version. Provider uses it; tests pass a span recorder in
// opts.
func NewTracerProvider(sampler sdktrace.Sampler, version string, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, *Tracer) {
	ids := &idGenerator{}
	opts = append(opts[:len(opts):len(opts)], sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(ids))
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, &Tracer{Tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version)), sampler: sampler, ids: ids}
}

// StartSampled starts a span as Start does when the provider's sampler
// records or samples it, and returns the context holding it, its span
// context and the span. A span the sampler drops is not started:
// StartSampled returns ctx, the span context the SDK's non-recording span
// would have had (its trace id, a new span id, the flags of the parent
// without sampled, the sampler's tracestate) and a nil span, with no
// allocation of its own when ctx holds no parent. The sampler decides with what the SDK would pass it
// (the parent in ctx, the trace id, name, kind, attributes and links of
// opts), and the span the SDK then starts has the ids decided here; a
// sampler must therefore decide alike when asked twice the same (every
// sampler Sampler returns does).
func (t *Tracer) StartSampled(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.SpanContext, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := ctx
	var psc trace.SpanContext
	if cfg.NewRoot() {
		parent = trace.ContextWithSpanContext(ctx, psc)
	} else {
		psc = trace.SpanContextFromContext(ctx)
	}
	var tid trace.TraceID
	var sid trace.SpanID
	if psc.TraceID().IsValid() {
		tid, sid = psc.TraceID(), t.ids.NewSpanID(parent, psc.TraceID())
	} else {
		tid, sid = t.ids.NewIDs(parent)
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: parent,
		TraceID:       tid,
		Name:          name,
		Kind:          cfg.SpanKind(),
		Attributes:    cfg.Attributes(),
		Links:         cfg.Links(),
	})
	if res.Decision != sdktrace.Drop {
		ctx, s := t.Start(&presetContext{Context: ctx, ids: presetIDs{trace: tid, span: sid}}, name, opts...)
		return ctx, s.SpanContext(), s
	}
	return ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: psc.TraceFlags() &^ trace.FlagsSampled, TraceState: res.Tracestate}), nil
}

// idGenerator is the provider's ID generator: random ids, as the SDK's
// own, except for the span StartSampled has decided, which gets the ids
// decided.
type idGenerator struct{}

// presetKey is the context key of the ids StartSampled has decided.
type presetKey struct{}

// presetContext is ctx with the ids StartSampled has decided under
// presetKey: one allocation, where context.WithValue would take two.
type presetContext struct {
	context.Context
	ids presetIDs
}

// Value returns the decided ids for presetKey.
func (c *presetContext) Value(k any) any {
	if k == (presetKey{}) {
		return &c.ids
	}
	return c.Context.Value(k)
}

// presetIDs are the ids of one span, given out once: a span started
// under it (whose context holds them too) gets ids of its own.
type presetIDs struct {
	trace trace.TraceID
	span  trace.SpanID
	taken atomic.Bool
}

func preset(ctx context.Context) *presetIDs {
	if p, ok := ctx.Value(presetKey{}).(*presetIDs); ok && !p.taken.Swap(true) {
		return p
	}
	return nil
}

// NewIDs returns the ids decided for the span ctx starts, else a random
// non-zero trace id and span id.
func (g *idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p := preset(ctx); p != nil {
		return p.trace, p.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, g.NewSpanID(context.Background(), tid)
}

// NewSpanID returns the span id decided for the span ctx starts in the
// trace tid, else a random non-zero one.
func (g *idGenerator) NewSpanID(ctx context.Context, tid trace.TraceID) trace.SpanID {
	if p := preset(ctx); p != nil && p.trace == tid {
		return p.span
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
