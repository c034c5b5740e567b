package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTracingEnv: the standard OTEL_* variables override the tracing
// section, the signal's own over the general ones, and a bad value is
// reported with the variable it came from.
func TestTracingEnv(t *testing.T) {
	file := "tracing:\n  exporter: otlp\n  endpoint: http://file:4318\n  service_name: from-file\n  resource_attributes: {team: a, region: eu}\n"
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		want func(*Tracing) string // "" when as expected
	}{
		{"file alone", file, nil, func(tr *Tracing) string {
			if !tr.On() || tr.ExportURL() != "http://file:4318/v1/traces" || tr.ServiceName != "from-file" {
				return "the file's values, /v1/traces appended to a URL without a path"
			}
			return ""
		}},
		{"off by default", "", nil, func(tr *Tracing) string {
			if tr.On() || tr.ExportURL() != "http://localhost:4318/v1/traces" {
				return "off, the local collector as the default endpoint"
			}
			return ""
		}},
		{"variables win", file, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318/base/", "OTEL_SERVICE_NAME": "from-env",
			"OTEL_RESOURCE_ATTRIBUTES": "region=us%2Deast,service.name=ignored,k8s.pod.name=p-1",
			"OTEL_TRACES_SAMPLER":      "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01",
			"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_MAX_QUEUE_SIZE": "100",
		}, func(tr *Tracing) string {
			if tr.ExportURL() != "http://env:4318/base/v1/traces" || tr.ServiceName != "from-env" ||
				tr.ResourceAttributes["region"] != "us-east" || tr.ResourceAttributes["team"] != "a" ||
				tr.ResourceAttributes["k8s.pod.name"] != "p-1" || tr.Sampler != "parentbased_traceidratio" ||
				tr.SamplerArg != 0.01 || tr.BatchTimeout != 200*time.Millisecond || tr.MaxQueueSize != 100 {
				return "every variable applied over the file"
			}
			return ""
		}},
		{"signal's own variables", "", map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://general:4317",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces:4317",
		}, func(tr *Tracing) string {
			if !tr.On() || tr.Protocol != TraceProtocolGRPC || tr.ExportURL() != "https://traces:4317" {
				return "the traces variables over the general ones, gRPC's URL as is"
			}
			return ""
		}},
		{"service.name from the attributes", "", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr"}, func(tr *Tracing) string {
			if tr.ServiceName != "attr" {
				return "service.name taken from OTEL_RESOURCE_ATTRIBUTES"
			}
			return ""
		}},
		{"disabled", file, map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, func(tr *Tracing) string {
			if tr.On() {
				return "OTEL_SDK_DISABLED turns tracing off"
			}
			return ""
		}},
		{"none", file, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, func(tr *Tracing) string {
			if tr.On() {
				return "OTEL_TRACES_EXPORTER=none turns tracing off over the file"
			}
			return ""
		}},
		{"propagators by default", "", nil, func(tr *Tracing) string {
			if !slices.Equal(tr.Propagators, []string{"tracecontext", "baggage"}) {
				return "W3C trace context and baggage, OTEL_PROPAGATORS' default"
			}
			return ""
		}},
		{"propagators of the file", "tracing: {propagators: [b3]}", nil, func(tr *Tracing) string {
			if !slices.Equal(tr.Propagators, []string{"b3"}) {
				return "the file's list, replacing the default"
			}
			return ""
		}},
		{"OTEL_PROPAGATORS", "tracing: {propagators: [b3]}", map[string]string{"OTEL_PROPAGATORS": " B3multi, tracecontext,"}, func(tr *Tracing) string {
			if !slices.Equal(tr.Propagators, []string{"b3multi", "tracecontext"}) {
				return "the variable's list, in its order, names trimmed and lower-cased"
			}
			return ""
		}},
		{"empty variable is unset", file, map[string]string{"OTEL_TRACES_EXPORTER": "", "OTEL_SERVICE_NAME": " "}, func(tr *Tracing) string {
			if !tr.On() || tr.ServiceName != "from-file" {
				return "empty variables ignored"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			c, err := Parse("test.yaml", []byte(tc.file), getenv)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.want(&c.Tracing); want != "" {
				t.Errorf("got %+v, want %s", c.Tracing, want)
			}
		})
	}
}

// TestTracingProblems: check-config names each problem of the section
// at its key, and the variable that brought a bad value.
func TestTracingProblems(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"exporter", "tracing: {exporter: zipkin}", nil, `tracing.exporter: want "none" or "otlp", got "zipkin"`},
		{"exporter variable", "", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, `OTEL_TRACES_EXPORTER (tracing.exporter): want "none" or "otlp"`},
		{"protocol variable", "", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL (tracing.protocol): want "http/protobuf" or "grpc", got "http/json"`},
		{"ratio", "tracing: {sampler_arg: 1.5}", nil, "tracing.sampler_arg: want a ratio from 0 to 1"},
		{"ratio variable", "", map[string]string{"OTEL_TRACES_SAMPLER_ARG": "1%"}, `OTEL_TRACES_SAMPLER_ARG (tracing.sampler_arg): want a ratio from 0 to 1, such as 0.01, got "1%"`},
		{"sampler", "tracing: {sampler: jaeger_remote}", nil, "tracing.sampler: want"},
		{"endpoint", "tracing: {endpoint: 'collector:4317'}", nil, `tracing.endpoint: want an http or https URL`},
		{"endpoint variable", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT (tracing.endpoint): want an http or https URL such as "http://otel-collector:4318", got "collector:4318"`},
		{"trust", "tracing: {trust_incoming: proxies}", nil, `tracing.trust_incoming: want "never", "trusted_proxies" or "always"`},
		{"batch", "tracing: {max_queue_size: 0, max_export_batch_size: 0}", nil, "tracing.max_export_batch_size: must be at least 1, got 0"},
		{"bsp variable", "", map[string]string{"OTEL_BSP_EXPORT_TIMEOUT": "10s"}, `OTEL_BSP_EXPORT_TIMEOUT (tracing.export_timeout): want milliseconds`},
		{"propagator", "tracing: {propagators: [tracecontext, zipkin]}", nil, `tracing.propagators[1]: want "tracecontext", "baggage", "b3", "b3multi", "jaeger", "xray", "ottrace" or "none", got "zipkin"`},
		{"propagator variable", "", map[string]string{"OTEL_PROPAGATORS": "tracecontext,none"}, `OTEL_PROPAGATORS (tracing.propagators[1]): none stands alone`},
		{"propagator twice", "tracing: {propagators: [b3, b3]}", nil, `tracing.propagators[1]: "b3" is named twice`},
		{"no propagator", "tracing: {propagators: []}", nil, `tracing.propagators: must name at least one propagator, or none`},
		{"attributes variable", "", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=1,broken"}, `OTEL_RESOURCE_ATTRIBUTES (tracing.resource_attributes): want key=value pairs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			_, err := Parse("test.yaml", []byte(tc.file), getenv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("problems %v, want one containing %q", err, tc.want)
			}
		})
	}
}
