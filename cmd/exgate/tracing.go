package main

import (
	"context"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/lograte"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/tracing"
)

// startTracing builds the tracer provider of cfg's tracing section (the
// OTEL_* variables already applied), counting its spans in
// a.traceMetrics, or leaves a.traces nil when tracing is off. The SDK's
// own errors (a collector that cannot be reached) are logged at most once
// a second: the metrics count every span they cost.
func (a *app) startTracing(cfg *config.Config) error {
	tc := cfg.Tracing
	if !tc.On() {
		return nil
	}
	host, _ := os.Hostname()
	p, err := tracing.New(tc, tracing.Options{
		Version: buildInfo().Version, Instance: host, Counts: a.traceMetrics, Exporter: a.d.spanExporter,
	})
	if err != nil {
		return err
	}
	a.traces = p
	a.traceMetrics.SetQueue(p.Queued)
	otel.SetErrorHandler(tracingErrors(a.log.Named("tracing"), a.d.now))
	a.log.Info("tracing on",
		zap.String("protocol", tc.Protocol), zap.String("endpoint", tc.ExportURL()),
		zap.String("sampler", tc.Sampler), zap.Float64("sampler_arg", float64(tc.SamplerArg)),
		zap.String("trust_incoming", tc.TrustIncoming), zap.String("service_name", tc.ServiceName))
	return nil
}

// tracingErrors logs the SDK's errors, at most one a second.
func tracingErrors(log *zap.Logger, now func() time.Time) otel.ErrorHandler {
	var limit lograte.OncePerSecond
	return otel.ErrorHandlerFunc(func(err error) {
		if limit.Allow(now()) {
			log.Warn("tracing: spans not exported (counted in "+metrics.NameTraceSpansDropped+")", zap.Error(err))
		}
	})
}

// stopTracing exports the spans still queued, for at most timeout, and
// stops the provider.
func (a *app) stopTracing(timeout time.Duration) {
	if a.traces == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := a.traces.Shutdown(ctx); err != nil {
		a.log.Warn("tracing: spans still queued at shutdown were dropped", zap.Error(err))
	}
}

// spanExporter is the type of deps.spanExporter, a test's replacement of
// the OTLP exporter.
type spanExporter = sdktrace.SpanExporter
