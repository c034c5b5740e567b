package config

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tracing configures OpenTelemetry tracing: a span of each request, its
// steps and its backend call, exported over OTLP (docs/operations.md,
// "Tracing"). The standard OTEL_* variables override these keys
// (applyOTelEnv): deployment tooling sets them for every service of a
// cluster, and the file gives what they leave unset.
type Tracing struct {
	// Exporter is "none" (tracing off: no span, and a client's trace
	// context forwarded only when TrustIncoming trusts it) or "otlp". OTEL_TRACES_EXPORTER overrides it,
	// and OTEL_SDK_DISABLED=true turns tracing off. Default "none".
	Exporter string `yaml:"exporter"`
	// Protocol is the OTLP transport: "http/protobuf" or "grpc".
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
	// overrides it. Default "http/protobuf".
	Protocol string `yaml:"protocol"`
	// Endpoint is where spans go: for http/protobuf the URL spans are
	// POSTed to (one with no path gets /v1/traces), for grpc the
	// collector's http:// or https:// URL. "" means the protocol's local
	// collector: http://localhost:4318/v1/traces or http://localhost:4317.
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is), else
	// OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: /v1/traces is appended for
	// http/protobuf), overrides it. Default "".
	Endpoint string `yaml:"endpoint"`
	// Sampler decides which traces are recorded: always_on, always_off,
	// traceidratio, or parentbased_ of one of them (a request whose
	// trusted trace context says sampled is sampled, see TrustIncoming).
	// OTEL_TRACES_SAMPLER overrides it. Default "parentbased_always_on".
	Sampler string `yaml:"sampler"`
	// SamplerArg is the ratio of the traceidratio samplers, from 0 to 1.
	// OTEL_TRACES_SAMPLER_ARG overrides it. Default 1.
	SamplerArg Ratio `yaml:"sampler_arg"`
	// ServiceName is the service.name of exgate's spans. OTEL_SERVICE_NAME
	// overrides it, and so does service.name in OTEL_RESOURCE_ATTRIBUTES.
	// Default "exgate".
	ServiceName string `yaml:"service_name"`
	// ResourceAttributes are added to the resource of exgate's spans
	// (deployment.environment.name, k8s.pod.name, …). The pairs of
	// OTEL_RESOURCE_ATTRIBUTES (key=value,…) are added to them, replacing
	// a key given here. Default: none.
	ResourceAttributes map[string]string `yaml:"resource_attributes"`
	// TrustIncoming says whose trace context (traceparent, tracestate)
	// exgate continues: "never" (every request starts a trace of its own,
	// linked to the client's), "trusted_proxies" (from a peer in
	// client_ip.trusted_proxies, or a PROXY protocol peer it names)
	// or "always". With tracing off it says whose trace context (each
	// format of Propagators, baggage too) is forwarded; an untrusted
	// client's is removed. A client whose context is trusted chooses, through its
	// sampled flag, whether its requests are traced. Default "never": an
	// exchange's clients are the public, and a client that may set the
	// flag can have every one of its requests traced, a cost the exchange
	// pays.
	TrustIncoming string `yaml:"trust_incoming"`
	// Propagators are the formats of trace context exgate reads from a
	// client it trusts and writes to the backend, as OTEL_PROPAGATORS
	// names them: tracecontext (W3C traceparent and tracestate), baggage
	// (W3C baggage), b3 (B3's one header), b3multi (B3's X-B3-* headers),
	// jaeger (uber-trace-id), xray (X-Amzn-Trace-Id), ottrace (ot-tracer-*),
	// or none alone. exgate writes every format listed on each request it
	// forwards, replacing what a client sent in it; a format not listed is
	// forwarded as the client sent it, as any header. OTEL_PROPAGATORS
	// overrides it. Default tracecontext, baggage.
	Propagators []string `yaml:"propagators"`
	// MaxQueueSize bounds the spans waiting to be exported; a span that
	// finds the queue full is dropped and counted
	// (exgate_tracing_spans_dropped_total{reason="queue_full"}), never
	// waited for. OTEL_BSP_MAX_QUEUE_SIZE overrides it. Default 2048.
	MaxQueueSize int `yaml:"max_queue_size"`
	// MaxExportBatchSize is the most spans one export sends; one larger
	// than MaxQueueSize is taken as MaxQueueSize, as the SDK does.
	// OTEL_BSP_MAX_EXPORT_BATCH_SIZE overrides it. Default 512.
	MaxExportBatchSize int `yaml:"max_export_batch_size"`
	// BatchTimeout is the longest a span waits for its batch to fill
	// before it is exported. OTEL_BSP_SCHEDULE_DELAY (milliseconds)
	// overrides it. Default 5s.
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// ExportTimeout bounds one export, retries included; the spans of an
	// export that fails are dropped and counted
	// (exgate_tracing_spans_dropped_total{reason="export_failed"}).
	// OTEL_BSP_EXPORT_TIMEOUT (milliseconds) overrides it. Default 10s.
	ExportTimeout time.Duration `yaml:"export_timeout"`
}

// Tracing exporters, protocols and trust of incoming trace context.
const (
	TraceExporterNone  = "none"
	TraceExporterOTLP  = "otlp"
	TraceProtocolHTTP  = "http/protobuf"
	TraceProtocolGRPC  = "grpc"
	TraceTrustNever    = "never"
	TraceTrustProxies  = "trusted_proxies"
	TraceTrustAlways   = "always"
	defaultServiceName = "exgate"
)

// TraceSamplers are the values of tracing.sampler, as
// OTEL_TRACES_SAMPLER names them.
var TraceSamplers = []string{
	"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
}

// TracePropagators are the values of tracing.propagators, as
// OTEL_PROPAGATORS names them.
var TracePropagators = []string{
	TracePropagatorTraceContext, TracePropagatorBaggage, "b3", "b3multi", "jaeger", "xray", "ottrace", TracePropagatorNone,
}

// Propagators of tracing.propagators that exgate handles itself.
const (
	TracePropagatorTraceContext = "tracecontext"
	TracePropagatorBaggage      = "baggage"
	TracePropagatorNone         = "none"
)

// DefaultTracing returns tracing's defaults: off; when turned on, OTLP
// over HTTP to the local collector, every trace sampled unless a trusted
// parent says otherwise, clients' trace context not trusted.
func DefaultTracing() Tracing {
	return Tracing{
		Exporter:           TraceExporterNone,
		Protocol:           TraceProtocolHTTP,
		Sampler:            "parentbased_always_on",
		SamplerArg:         1,
		ServiceName:        defaultServiceName,
		TrustIncoming:      TraceTrustNever,
		Propagators:        []string{TracePropagatorTraceContext, TracePropagatorBaggage},
		MaxQueueSize:       2048,
		MaxExportBatchSize: 512,
		BatchTimeout:       5 * time.Second,
		ExportTimeout:      10 * time.Second,
	}
}

// On reports whether spans are exported.
func (t *Tracing) On() bool { return t.Exporter == TraceExporterOTLP }

// ExportURL returns the URL spans are sent to: Endpoint, or the local
// collector of the protocol; over HTTP, /v1/traces when the URL names no
// path.
func (t *Tracing) ExportURL() string {
	e := t.Endpoint
	if e == "" {
		if t.Protocol == TraceProtocolGRPC {
			return "http://localhost:4317"
		}
		return "http://localhost:4318/v1/traces"
	}
	if t.Protocol == TraceProtocolHTTP {
		if u, err := url.Parse(e); err == nil && (u.Path == "" || u.Path == "/") {
			return strings.TrimSuffix(e, "/") + "/v1/traces"
		}
	}
	return e
}

// check reports problems in the tracing section at p.
func (t *Tracing) check(col *collector, p path) {
	col.oneOf(p.key("exporter"), t.Exporter, TraceExporterNone, TraceExporterOTLP)
	col.oneOf(p.key("protocol"), t.Protocol, TraceProtocolHTTP, TraceProtocolGRPC)
	col.oneOf(p.key("sampler"), t.Sampler, TraceSamplers...)
	col.oneOf(p.key("trust_incoming"), t.TrustIncoming, TraceTrustNever, TraceTrustProxies, TraceTrustAlways)
	t.checkPropagators(col, p.key("propagators"))
	if t.Endpoint != "" {
		if !httpURL(t.Endpoint) {
			col.addf(p.key("endpoint"), "want an http or https URL such as \"http://otel-collector:4318\", got %q", t.Endpoint)
		}
	}
	if t.ServiceName == "" {
		col.addf(p.key("service_name"), "must not be empty")
	}
	for k := range t.ResourceAttributes {
		if k == "" || strings.ContainsAny(k, ",= \t") {
			col.addf(p.key("resource_attributes"), "want attribute names without commas, equals signs or spaces, got %q", k)
		}
	}
	if t.MaxQueueSize < 1 {
		col.addf(p.key("max_queue_size"), "must be at least 1, got %d", t.MaxQueueSize)
	}
	if t.MaxExportBatchSize < 1 {
		col.addf(p.key("max_export_batch_size"), "must be at least 1, got %d", t.MaxExportBatchSize)
	}
	col.positive(p.key("batch_timeout"), t.BatchTimeout)
	col.positive(p.key("export_timeout"), t.ExportTimeout)
}

// checkPropagators reports a propagator exgate does not know, one named
// twice, none beside another, and an empty list (none says "no
// propagation" where an empty list could be a mistake).
func (t *Tracing) checkPropagators(col *collector, p path) {
	if len(t.Propagators) == 0 {
		col.addf(p, "must name at least one propagator, or none")
	}
	for i, name := range t.Propagators {
		switch {
		case !slices.Contains(TracePropagators, name):
			col.oneOf(p.index(i), name, TracePropagators...)
		case slices.Index(t.Propagators, name) != i:
			col.addf(p.index(i), "%q is named twice", name)
		case name == TracePropagatorNone && len(t.Propagators) > 1:
			col.addf(p.index(i), "none stands alone: it means no trace context is read or written")
		}
	}
}

// httpURL reports whether s is an http or https URL with a host. A bad
// endpoint is left as it was given, so that its problem quotes the value
// the operator wrote.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// otelEnv applies the standard OpenTelemetry variables to a tracing
// section, each recorded as the source of the key it sets.
type otelEnv struct {
	getenv func(string) (string, bool)
	col    *collector
	src    *sources
}

// applyOTelEnv overrides t's keys with the OTEL_* variables that are set
// (docs/configuration.md, "Tracing"): they come after the file and the
// EXGATE_TRACING_* variables.
func (t *Tracing) applyOTelEnv(getenv func(string) (string, bool), col *collector, src *sources) {
	e := otelEnv{getenv: getenv, col: col, src: src}
	p := path("tracing")
	if v, ok := e.get("OTEL_TRACES_EXPORTER", p.key("exporter")); ok {
		t.Exporter = strings.ToLower(v)
	}
	if v, ok := e.get("OTEL_SDK_DISABLED", p.key("exporter")); ok && strings.EqualFold(v, "true") {
		t.Exporter = TraceExporterNone
	}
	if v, ok := e.first(p.key("protocol"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); ok {
		t.Protocol = v
	}
	if v, ok := e.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", p.key("endpoint")); ok {
		t.Endpoint = v
	} else if v, ok := e.get("OTEL_EXPORTER_OTLP_ENDPOINT", p.key("endpoint")); ok {
		t.Endpoint = v
		if t.Protocol == TraceProtocolHTTP && httpURL(v) {
			t.Endpoint = strings.TrimSuffix(v, "/") + "/v1/traces" // a base URL, per the OTLP exporter spec
		}
	}
	if v, ok := e.get("OTEL_TRACES_SAMPLER", p.key("sampler")); ok {
		t.Sampler = v
	}
	if v, ok := e.get("OTEL_TRACES_SAMPLER_ARG", p.key("sampler_arg")); ok {
		if err := t.SamplerArg.UnmarshalText([]byte(v)); err != nil {
			e.problem("OTEL_TRACES_SAMPLER_ARG", p.key("sampler_arg"), "%v", err)
		}
	}
	if v, ok := e.get("OTEL_PROPAGATORS", p.key("propagators")); ok {
		t.Propagators = t.Propagators[:0:0]
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.ToLower(strings.TrimSpace(name)); name != "" {
				t.Propagators = append(t.Propagators, name)
			}
		}
	}
	e.resource(t, p)
	e.duration("OTEL_BSP_SCHEDULE_DELAY", p.key("batch_timeout"), &t.BatchTimeout)
	e.duration("OTEL_BSP_EXPORT_TIMEOUT", p.key("export_timeout"), &t.ExportTimeout)
	e.integer("OTEL_BSP_MAX_QUEUE_SIZE", p.key("max_queue_size"), &t.MaxQueueSize)
	e.integer("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", p.key("max_export_batch_size"), &t.MaxExportBatchSize)
}

// resource applies OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME.
func (e otelEnv) resource(t *Tracing, p path) {
	if v, ok := e.get("OTEL_RESOURCE_ATTRIBUTES", p.key("resource_attributes")); ok {
		attrs := maps.Clone(t.ResourceAttributes)
		if attrs == nil {
			attrs = map[string]string{}
		}
		for pair := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			dec, err := url.PathUnescape(strings.TrimSpace(val))
			if !ok || k == "" || err != nil {
				e.problem("OTEL_RESOURCE_ATTRIBUTES", p.key("resource_attributes"), "want key=value pairs joined by commas (values percent-encoded), got %q", pair)
				continue
			}
			if k == "service.name" {
				t.ServiceName = dec
				continue
			}
			attrs[k] = dec
		}
		t.ResourceAttributes = attrs
	}
	if v, ok := e.get("OTEL_SERVICE_NAME", p.key("service_name")); ok {
		t.ServiceName = v
	}
}

// get returns the variable's value when it is set and not empty (the
// OpenTelemetry specification reads an empty value as unset), and
// records it as the source of key p.
func (e otelEnv) get(name string, p path) (string, bool) {
	v, ok := e.getenv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	e.src.envs[string(p)] = name
	for k := range e.src.lines {
		if within(k, string(p)) {
			delete(e.src.lines, k)
		}
	}
	return strings.TrimSpace(v), true
}

// first returns the value of the first of names that is set.
func (e otelEnv) first(p path, names ...string) (string, bool) {
	for _, n := range names {
		if v, ok := e.get(n, p); ok {
			return v, true
		}
	}
	return "", false
}

// duration reads a variable of milliseconds into d.
func (e otelEnv) duration(name string, p path, d *time.Duration) {
	if v, ok := e.get(name, p); ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			e.problem(name, p, "want milliseconds, such as 5000, got %q", v)
			return
		}
		*d = time.Duration(ms) * time.Millisecond
	}
}

// integer reads a variable holding a whole number into n.
func (e otelEnv) integer(name string, p path, n *int) {
	if v, ok := e.get(name, p); ok {
		i, err := strconv.Atoi(v)
		if err != nil {
			e.problem(name, p, "want a whole number, got %q", v)
			return
		}
		*n = i
	}
}

// problem records a variable that cannot be read.
func (e otelEnv) problem(name string, p path, format string, args ...any) {
	e.col.add(&FieldError{Path: string(p), Env: name, Msg: fmt.Sprintf(format, args...)})
}

// Ratio is a number from 0 to 1, written as a decimal: 0.01 samples one
// trace in a hundred.
type Ratio float64

// UnmarshalText parses a ratio.
func (r *Ratio) UnmarshalText(t []byte) error {
	s := strings.TrimSpace(string(t))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return fmt.Errorf("want a ratio from 0 to 1, such as 0.01, got %q", string(t))
	}
	*r = Ratio(f)
	return nil
}

// MarshalText writes the ratio in its shortest decimal form.
func (r Ratio) MarshalText() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(r), 'g', -1, 64), nil
}
