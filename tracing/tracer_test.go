package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// fixedIDs gives every span the same ids: the reference SDK's span gets
// the ids StartSampled chose.
type fixedIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

func (f fixedIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID)  { return f.tid, f.sid }
func (f fixedIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return f.sid }

// askedSampler is a sampler that keeps the trace ids it is asked about.
type askedSampler struct {
	sdktrace.Sampler
	asked []trace.TraceID
}

func (a *askedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	a.asked = append(a.asked, p.TraceID)
	return a.Sampler.ShouldSample(p)
}

// TestStartSampledAgreesWithSDK: for every sampler OTEL_TRACES_SAMPLER
// names and every kind of parent, StartSampled decides as the SDK's
// Start does with the same ids — the same span context (flags and
// tracestate included), a span exactly when the SDK's records — and a
// span it starts is in the trace the sampler decided on (the SDK asks it
// about the same trace id), while a child of it gets a span id of its
// own.
func TestStartSampledAgreesWithSDK(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=abc,other=x")
	if err != nil {
		t.Fatal(err)
	}
	remote := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0xa, 1}, SpanID: trace.SpanID{0xb, 1}, TraceFlags: flags, TraceState: ts, Remote: true}))
	}
	link := trace.Link{SpanContext: trace.SpanContextFromContext(remote(trace.FlagsSampled))}
	parents := []struct {
		name string
		ctx  context.Context
		opts []trace.SpanStartOption
	}{
		{"root", context.Background(), nil},
		{"sampled parent", remote(trace.FlagsSampled), nil},
		{"unsampled parent", remote(0), nil},
		{"new root linked to a sampled context", remote(trace.FlagsSampled), []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(link)}},
	}
	for _, name := range []string{"always_on", "always_off", "traceidratio", "parentbased_always_on",
		"parentbased_always_off", "parentbased_traceidratio"} {
		sampler := Sampler(name, 0.5)
		asked := &askedSampler{Sampler: sampler}
		tp, tr := NewTracerProvider(asked, "test", sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		for _, p := range parents {
			opts := append([]trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}, p.opts...)
			seen := map[bool]bool{}
			for range 64 { // traceidratio at 0.5 decides both ways over the trace ids
				asked.asked = asked.asked[:0]
				ctx, sc, span := tr.StartSampled(p.ctx, "s", opts...)
				ref := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(fixedIDs{sc.TraceID(), sc.SpanID()}))
				_, want := ref.Tracer("t").Start(p.ctx, "s", opts...)
				if !sc.Equal(want.SpanContext()) || (span != nil) != want.IsRecording() {
					t.Fatalf("%s, %s: StartSampled = %+v, span %v; the SDK's %+v, recording %v",
						name, p.name, sc, span != nil, want.SpanContext(), want.IsRecording())
				}
				seen[sc.IsSampled()] = true
				if span == nil {
					if ctx != p.ctx {
						t.Fatalf("%s, %s: a span not started changed the context", name, p.name)
					}
					continue
				}
				if len(asked.asked) != 2 || asked.asked[0] != sc.TraceID() || asked.asked[1] != sc.TraceID() {
					t.Fatalf("%s, %s: the sampler was asked about %v, want the span's trace %v twice", name, p.name, asked.asked, sc.TraceID())
				}
				if !span.SpanContext().Equal(sc) || trace.SpanFromContext(ctx) != span {
					t.Fatalf("%s, %s: span %+v in its context %v, want the decided %+v", name, p.name, span.SpanContext(), trace.SpanFromContext(ctx) == span, sc)
				}
				_, child := tr.Start(ctx, "child")
				if child.SpanContext().TraceID() != sc.TraceID() || child.SpanContext().SpanID() == sc.SpanID() {
					t.Fatalf("%s, %s: child %+v of %+v, want the trace's and an id of its own", name, p.name, child.SpanContext(), sc)
				}
				child.End()
				span.End()
			}
			if name == "traceidratio" && p.name == "root" && len(seen) != 2 {
				t.Errorf("traceidratio at 0.5 decided only %v in 64 roots", seen)
			}
		}
	}
}

// TestStartSampledAllocatesNothingUnsampled: a root span the sampler
// drops costs no allocation.
func TestStartSampledAllocatesNothingUnsampled(t *testing.T) {
	tp, tr := NewTracerProvider(Sampler("parentbased_always_off", 0), "test")
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	if n := testing.AllocsPerRun(100, func() {
		if _, sc, s := tr.StartSampled(context.Background(), "GET", opts...); s != nil || !sc.IsValid() {
			t.Fatal("sampled, or no span context")
		}
	}); n != 0 {
		t.Errorf("%v allocations per unsampled root, want 0", n)
	}
}
