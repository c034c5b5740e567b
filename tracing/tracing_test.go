package tracing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/otlptest"
	"github.com/exgate/exgate/internal/unreachable"
)

// counts records what Provider reports.
type counts struct {
	exported          atomic.Int64
	queueFull, failed atomic.Int64
}

func (c *counts) Exported(n int) { c.exported.Add(int64(n)) }
func (c *counts) Dropped(reason string, n int) {
	switch reason {
	case DroppedQueueFull:
		c.queueFull.Add(int64(n))
	case DroppedExportFailed:
		c.failed.Add(int64(n))
	}
}

func on(mut func(*config.Tracing)) config.Tracing {
	c := config.DefaultTracing()
	c.Exporter = config.TraceExporterOTLP
	c.BatchTimeout = 10 * time.Millisecond
	if mut != nil {
		mut(&c)
	}
	return c
}

// spanEnds ends n sampled spans of p, each on its own.
func spanEnds(p *Provider, n int) {
	for i := 0; i < n; i++ {
		_, s := p.Tracer().Start(context.Background(), "s")
		s.End()
	}
}

func TestOffIsNil(t *testing.T) {
	p, err := New(config.DefaultTracing(), Options{})
	if p != nil || err != nil {
		t.Fatalf("New of the default section = %v, %v; want nil: tracing is off", p, err)
	}
}

// blocking is an exporter that holds every export until released, as a
// collector that does not answer does, then fails or succeeds.
type blocking struct {
	release chan struct{}
	fail    bool
	got     atomic.Int64
}

func (b *blocking) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.fail {
		return errors.New("collector refused")
	}
	b.got.Add(int64(len(spans)))
	return nil
}
func (b *blocking) Shutdown(context.Context) error { return nil }

// TestQueueBoundedDropsCounted: while the collector holds every export,
// spans past max_queue_size are dropped and counted, ending a span never
// waits, and every span is in the end exported or counted as dropped.
func TestQueueBoundedDropsCounted(t *testing.T) {
	for _, fail := range []bool{false, true} {
		exp := &blocking{release: make(chan struct{}), fail: fail}
		var c counts
		p, err := New(on(func(c *config.Tracing) { c.MaxQueueSize, c.MaxExportBatchSize = 8, 4 }),
			Options{Counts: &c, Exporter: exp})
		if err != nil {
			t.Fatal(err)
		}
		spanEnds(p, 100) // returns: ending a span never waits for the collector
		if c.queueFull.Load() < 100-8-4 {
			t.Errorf("fail=%v: %d spans dropped as queue_full while the collector held the queue, want at least 88", fail, c.queueFull.Load())
		}
		if q := p.Queued(); q > 8 {
			t.Errorf("fail=%v: %d spans queued, past max_queue_size 8", fail, q)
		}
		close(exp.release)
		if err := p.Shutdown(context.Background()); err != nil && !fail {
			t.Fatal(err)
		}
		total := c.exported.Load() + c.queueFull.Load() + c.failed.Load()
		if total != 100 {
			t.Errorf("fail=%v: exported %d + queue_full %d + export_failed %d = %d, want every one of 100 spans accounted for",
				fail, c.exported.Load(), c.queueFull.Load(), c.failed.Load(), total)
		}
		if fail && (c.failed.Load() == 0 || c.exported.Load() != 0) {
			t.Errorf("failing collector: exported %d, export_failed %d; want all that left the queue failed", c.exported.Load(), c.failed.Load())
		}
		if !fail && exp.got.Load() != c.exported.Load() {
			t.Errorf("collector got %d spans, %d counted as exported", exp.got.Load(), c.exported.Load())
		}
	}
}

// TestSampler: each OTEL_TRACES_SAMPLER name samples as it says, and the
// parentbased ones follow a sampled or unsampled parent.
func TestSampler(t *testing.T) {
	sampledParent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	unsampledParent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}))
	for _, tc := range []struct {
		name                     string
		ratio                    float64
		root, sampled, unsampled bool
	}{
		{"always_on", 1, true, true, true},
		{"always_off", 1, false, false, false},
		{"traceidratio", 0, false, false, false},
		{"parentbased_always_on", 1, true, true, false},
		{"parentbased_always_off", 1, false, true, false},
		{"parentbased_traceidratio", 0, false, true, false},
		{"parentbased_traceidratio", 1, true, true, false},
	} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(tc.name, tc.ratio)), sdktrace.WithSpanProcessor(rec))
		for _, c := range []struct {
			ctx  context.Context
			want bool
			what string
		}{{context.Background(), tc.root, "root"}, {sampledParent, tc.sampled, "sampled parent"}, {unsampledParent, tc.unsampled, "unsampled parent"}} {
			_, s := tp.Tracer("t").Start(c.ctx, "s")
			if s.SpanContext().IsSampled() != c.want {
				t.Errorf("%s(%v), %s: sampled %v, want %v", tc.name, tc.ratio, c.what, !c.want, c.want)
			}
			s.End()
		}
	}
}

// TestExportsToRealReceivers exports over OTLP HTTP/protobuf and gRPC to
// receivers built from the protocol's types, with the resource the
// section names.
func TestExportsToRealReceivers(t *testing.T) {
	rc := otlptest.Start(t)
	for _, tc := range []struct{ protocol, endpoint string }{
		{config.TraceProtocolHTTP, rc.HTTP},
		{config.TraceProtocolGRPC, rc.GRPC},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			before := len(rc.Spans())
			var c counts
			p, err := New(on(func(c *config.Tracing) {
				c.Protocol, c.Endpoint, c.ServiceName = tc.protocol, tc.endpoint, "gw-"+tc.protocol
				c.ResourceAttributes = map[string]string{"deployment.environment.name": "test"}
			}), Options{Version: "v9.9.9", Instance: "replica-1", Counts: &c})
			if err != nil {
				t.Fatal(err)
			}
			ctx, parent := p.Tracer().Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := p.Tracer().Start(ctx, "child", trace.WithSpanKind(trace.SpanKindClient))
			child.End()
			parent.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := rc.WaitSpans(t, before+2, 10*time.Second)[before:]
			if c.exported.Load() != 2 {
				t.Errorf("exported counted %d, want 2", c.exported.Load())
			}
			byName := map[string]otlptest.Span{}
			for _, s := range got {
				byName[s.Name] = s
			}
			ps, cs := byName["parent"], byName["child"]
			if cs.ParentSpanID != ps.SpanID || cs.TraceID != ps.TraceID || ps.Kind != tracepb.Span_SPAN_KIND_SERVER || cs.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("received %+v, want child under parent, server and client", got)
			}
			for k, v := range map[string]string{"service.name": "gw-" + tc.protocol, "service.version": "v9.9.9",
				"service.instance.id": "replica-1", "deployment.environment.name": "test", "telemetry.sdk.language": "go"} {
				if ps.Resource[k] != v {
					t.Errorf("resource %s = %q, want %q", k, ps.Resource[k], v)
				}
			}
		})
	}
}

// TestUnreachableCollector: with a collector that refuses connections,
// spans are dropped and counted, ending spans from many goroutines never
// waits, and shutdown is bounded by its context.
func TestUnreachableCollector(t *testing.T) {
	for _, protocol := range []string{config.TraceProtocolHTTP, config.TraceProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			var c counts
			p, err := New(on(func(c *config.Tracing) {
				c.Protocol, c.Endpoint = protocol, "http://"+unreachable.Refused(t)
				c.MaxQueueSize, c.MaxExportBatchSize, c.ExportTimeout = 16, 8, 200*time.Millisecond
			}), Options{Counts: &c})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() { defer wg.Done(); spanEnds(p, 250) }()
			}
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			if c.exported.Load() != 0 {
				t.Errorf("%d spans counted as exported to a collector that refuses connections", c.exported.Load())
			}
			if c.queueFull.Load() == 0 || c.queueFull.Load()+c.failed.Load() < 2000-16 {
				t.Errorf("dropped queue_full %d, export_failed %d of 2000; want the drops counted", c.queueFull.Load(), c.failed.Load())
			}
		})
	}
}
