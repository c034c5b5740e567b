// Package tracing is exgate's OpenTelemetry setup: a tracer provider built
// from the tracing section of the configuration (with the OTEL_*
// variables already applied by config), exporting over OTLP — HTTP/protobuf
// or gRPC — through a bounded queue that drops and counts the spans it has
// no room for, never making a request wait; the sampler the section
// names. The request's spans themselves, and the W3C trace context read
// from clients and sent to the backend, are proxy.Gateway's
// (docs/operations.md, "Tracing").
package tracing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/exgate/exgate/config"
)

// ScopeName is the instrumentation scope of exgate's spans.
const ScopeName = "github.com/exgate/exgate"

// Reasons a span is dropped instead of exported.
const (
	// DroppedQueueFull: the span ended while max_queue_size spans were
	// already waiting for export (the collector is slow or unreachable).
	DroppedQueueFull = "queue_full"
	// DroppedExportFailed: the export carrying the span failed within
	// export_timeout, its retries included.
	DroppedExportFailed = "export_failed"
)

// Counts receives what becomes of the spans of sampled requests. Its
// methods are called from the exporting goroutine and from requests
// ending; they must not block.
type Counts interface {
	// Exported counts n spans the collector accepted.
	Exported(n int)
	// Dropped counts n spans dropped for reason (DroppedQueueFull,
	// DroppedExportFailed).
	Dropped(reason string, n int)
}

// Options are a Provider's dependencies besides its configuration.
type Options struct {
	// Version is the service.version of the spans' resource.
	Version string
	// Instance is the service.instance.id (the replica's name); "" for
	// none.
	Instance string
	// Counts receives the exported and dropped spans. Nil counts nothing.
	Counts Counts
	// Exporter replaces the OTLP exporter the configuration names (tests
	// pass the SDK's in-memory exporter). Nil means OTLP.
	Exporter sdktrace.SpanExporter
}

// Provider is a running tracer provider. Its Tracer starts exgate's
// spans; Shutdown exports what is queued and stops.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer *Tracer
	queue  *boundedProcessor
}

// New builds the provider of cfg, or returns nil when tracing is off.
// Nothing is dialled here: an unreachable collector shows as dropped
// spans, and exgate starts all the same.
func New(cfg config.Tracing, o Options) (*Provider, error) {
	if !cfg.On() {
		return nil, nil
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = otlpExporter(cfg); err != nil {
			return nil, err
		}
	}
	if o.Counts == nil {
		o.Counts = noCounts{}
	}
	res, err := newResource(cfg, o)
	if err != nil {
		return nil, err
	}
	batch := min(cfg.MaxExportBatchSize, cfg.MaxQueueSize)
	bp := &boundedProcessor{max: int64(cfg.MaxQueueSize), counts: o.Counts}
	// The batch processor's own queue has room for every span the bound
	// lets in, the batch under export included: it never drops one
	// itself, so that every drop is counted here.
	bp.SpanProcessor = sdktrace.NewBatchSpanProcessor(&countingExporter{SpanExporter: exp, queue: bp},
		sdktrace.WithMaxQueueSize(cfg.MaxQueueSize+batch),
		sdktrace.WithMaxExportBatchSize(batch),
		sdktrace.WithBatchTimeout(cfg.BatchTimeout),
		sdktrace.WithExportTimeout(cfg.ExportTimeout))
	tp, tracer := NewTracerProvider(Sampler(cfg.Sampler, float64(cfg.SamplerArg)), o.Version,
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(bp),
	)
	return &Provider{tp: tp, tracer: tracer, queue: bp}, nil
}

// Tracer returns the tracer of exgate's spans.
func (p *Provider) Tracer() *Tracer { return p.tracer }

// Queued returns how many spans wait for export, the batch under export
// included.
func (p *Provider) Queued() int { return int(p.queue.pending.Load()) }

// Shutdown exports the spans still queued, within ctx, and stops the
// provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Sampler returns the sampler OTEL_TRACES_SAMPLER's name stands for
// (config.TraceSamplers), with ratio for the traceidratio ones.
func Sampler(name string, ratio float64) sdktrace.Sampler {
	var root sdktrace.Sampler
	base, parentBased := cutPrefix(name, "parentbased_")
	switch base {
	case "always_off":
		root = sdktrace.NeverSample()
	case "traceidratio":
		root = sdktrace.TraceIDRatioBased(ratio)
	default:
		root = sdktrace.AlwaysSample()
	}
	if parentBased {
		return sdktrace.ParentBased(root)
	}
	return root
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// otlpExporter builds the OTLP exporter of cfg. Its options are explicit
// for what the section says; what it does not (OTEL_EXPORTER_OTLP_HEADERS,
// _CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE, _COMPRESSION) the SDK
// reads from the process's environment itself.
func otlpExporter(cfg config.Tracing) (sdktrace.SpanExporter, error) {
	ctx := context.Background()
	switch cfg.Protocol {
	case config.TraceProtocolHTTP:
		return otlptracehttp.New(ctx,
			otlptracehttp.WithEndpointURL(cfg.ExportURL()),
			otlptracehttp.WithTimeout(cfg.ExportTimeout),
			otlptracehttp.WithRetry(retry(cfg)))
	case config.TraceProtocolGRPC:
		return otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpointURL(cfg.ExportURL()),
			otlptracegrpc.WithTimeout(cfg.ExportTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig(retry(cfg))))
	}
	return nil, fmt.Errorf("tracing: protocol %q is neither %s nor %s", cfg.Protocol, config.TraceProtocolHTTP, config.TraceProtocolGRPC)
}

// retry retries a failed export within export_timeout: past it the spans
// are dropped, so that a collector that is down costs a bounded queue and
// nothing else.
func retry(cfg config.Tracing) otlptracehttp.RetryConfig {
	return otlptracehttp.RetryConfig{
		Enabled:         true,
		InitialInterval: min(cfg.ExportTimeout/10, time.Second),
		MaxInterval:     min(cfg.ExportTimeout/2, 5*time.Second),
		MaxElapsedTime:  cfg.ExportTimeout,
	}
}

// newResource is the resource of exgate's spans: the service's name,
// version and instance, the section's attributes (the variables' ones
// included), and the SDK's own.
func newResource(cfg config.Tracing, o Options) (*resource.Resource, error) {
	attrs := make([]attribute.KeyValue, 0, len(cfg.ResourceAttributes)+3)
	for _, k := range slices.Sorted(maps.Keys(cfg.ResourceAttributes)) {
		attrs = append(attrs, attribute.String(k, cfg.ResourceAttributes[k]))
	}
	attrs = append(attrs, semconv.ServiceName(cfg.ServiceName))
	if o.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.Version))
	}
	if o.Instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.Instance))
	}
	res, err := resource.New(context.Background(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// boundedProcessor lets at most max sampled spans wait for export in the
// batch processor it wraps; a span past that is dropped and counted.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	max     int64
	pending atomic.Int64 // spans handed to the batch processor and not yet exported or failed
	counts  Counts
}

// OnEnd queues a sampled span for export, or drops it when max spans
// already wait.
func (b *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if b.pending.Add(1) > b.max {
		b.pending.Add(-1)
		b.counts.Dropped(DroppedQueueFull, 1)
		return
	}
	b.SpanProcessor.OnEnd(s)
}

// countingExporter counts what becomes of each batch, and frees its
// place in the bounded queue.
type countingExporter struct {
	sdktrace.SpanExporter
	queue *boundedProcessor
}

// ExportSpans exports spans and counts them as exported or dropped.
func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	c.queue.pending.Add(-int64(len(spans)))
	if err != nil {
		c.queue.counts.Dropped(DroppedExportFailed, len(spans))
	} else {
		c.queue.counts.Exported(len(spans))
	}
	return err
}

type noCounts struct{}

func (noCounts) Exported(int)        {}
func (noCounts) Dropped(string, int) {}
