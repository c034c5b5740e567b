package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/otlptest"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/metrics"
)

// traceparents records the traceparent of every request a backend gets,
// by path, and answers 200.
type traceparents struct {
	mu  sync.Mutex
	got map[string]string
}

func (tp *traceparents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tp.mu.Lock()
	if tp.got == nil {
		tp.got = map[string]string{}
	}
	tp.got[r.URL.Path] = r.Header.Get("Traceparent")
	tp.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"bids":[],"asks":[]}`)
}

const tracingConfig = `
listen: %s
admin_listen: %s
upstream: { url: %s }
server: { drain_delay: 0s }
limiter: { store: memory }
`

// TestTracingBinary runs the real binary with tracing configured by the
// standard OTEL_* variables, exporting over gRPC and over HTTP/protobuf to
// a receiver built from the protocol's types: a trusted client's trace
// continues through exgate's server span and its backend call to the
// backend, a refusal is traced with its code, the access log names each
// request's trace, /metrics shows the trace id as an exemplar in
// OpenMetrics, the console's /admin/refusals lists the refusal with its
// trace id and its page shows it in Chromium, and the process stops
// cleanly, its spans flushed.
func TestTracingBinary(t *testing.T) {
	bin := buildBinary(t)
	rc := otlptest.Start(t)
	for _, tc := range []struct{ protocol, endpoint string }{{"grpc", rc.GRPC}, {"http/protobuf", strings.TrimSuffix(rc.HTTP, "/v1/traces")}} {
		t.Run(tc.protocol, func(t *testing.T) {
			be := &traceparents{}
			bs := httptest.NewServer(be)
			t.Cleanup(bs.Close)
			cfgPath := filepath.Join(t.TempDir(), "exgate.yaml")
			if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(tracingConfig, anyPort, anyPort, bs.URL)), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd, logs, _ := startBinary(t, bin, cfgPath, "EXGATE_KEY_SECRET=tracing-test-secret-0123456789",
				"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL="+tc.protocol, "OTEL_EXPORTER_OTLP_ENDPOINT="+tc.endpoint,
				"OTEL_SERVICE_NAME=exgate-"+tc.protocol, "OTEL_BSP_SCHEDULE_DELAY=50", "EXGATE_TRACING_TRUST_INCOMING=always")
			listen, admin := startedAddrs(t, logs)
			before := len(rc.Spans())
			const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			code, _, _ := call(t, "GET", "http://"+listen+"/api/v1/mth/orderbook/BTC_USDT/", "", "Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
			if code != 200 {
				t.Fatalf("order book answered %d", code)
			}
			if code, _, _ := call(t, "GET", "http://"+listen+"/api/v1/odr/orders/", "", "Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01"); code != 401 {
				t.Fatalf("orders without a token answered %d, want 401", code)
			}
			// The order book's server, rate_limit and client spans, and the refusal's server span.
			spans := rc.WaitSpans(t, before+4, 30*time.Second)[before:]
			var server, client, refused, limits otlptest.Span
			for _, s := range spans {
				switch {
				case s.Name == "rate_limit":
					limits = s
				case s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
					client = s
				case s.Kind == tracepb.Span_SPAN_KIND_SERVER && s.Attributes["exgate.refusal.code"] != "":
					refused = s
				case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
					server = s
				}
			}
			if server.TraceID != clientTrace || server.ParentSpanID != clientSpan || client.ParentSpanID != server.SpanID ||
				limits.ParentSpanID != server.SpanID || limits.Attributes["exgate.rate_limit.decision"] != "allowed" {
				t.Fatalf("spans %+v, want client → exgate's server span → its rate_limit and client spans", spans)
			}
			be.mu.Lock()
			up := be.got["/api/v1/mth/orderbook/BTC_USDT/"]
			be.mu.Unlock()
			if want := "00-" + clientTrace + "-" + client.SpanID + "-01"; up != want {
				t.Errorf("backend got traceparent %q, want %q (exgate's client span as parent)", up, want)
			}
			if server.Name != "GET /api/v1/mth/orderbook/{symbol}/" || server.Attributes["http.route"] != "/api/v1/mth/orderbook/{symbol}/" ||
				server.Resource["service.name"] != "exgate-"+tc.protocol {
				t.Errorf("server span %+v", server)
			}
			if refused.Attributes["exgate.refusal.code"] != "not_authenticated" || refused.Attributes["http.response.status_code"] != "401" {
				t.Errorf("refused span %+v, want not_authenticated, 401", refused)
			}
			checkRefusalListed(t, admin, refused)
			checkRefusalShown(t, admin, refused.TraceID, "401", "not_authenticated")
			line, _ := logs.wait(t, server.SpanID, 0)
			var fields map[string]any
			if err := json.Unmarshal([]byte(line), &fields); err != nil || fields["trace_id"] != clientTrace || fields["span_id"] != server.SpanID {
				t.Errorf("access log line %s, want trace_id %s and span_id %s", line, clientTrace, server.SpanID)
			}
			req, _ := http.NewRequest("GET", "http://"+admin+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(body), `exgate_request_duration_seconds_bucket{route="order_book",le=`) ||
				!strings.Contains(string(body), `# {trace_id="`+clientTrace+`"}`) {
				t.Errorf("OpenMetrics exposition has no exemplar of trace %s", clientTrace)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("exgate exited with %v after SIGTERM", err)
			}
		})
	}
}

// checkRefusalListed checks that the console's /admin/refusals lists the
// refusal whose server span is refused, with its trace id: the trace an
// operator opens from the console.
func checkRefusalListed(t *testing.T, admin string, refused otlptest.Span) {
	t.Helper()
	code, _, b := call(t, "GET", "http://"+admin+"/admin/refusals", "")
	var body struct {
		Tracing  bool `json:"tracing"`
		Refusals []struct {
			Code    string `json:"code"`
			Status  int    `json:"status"`
			TraceID string `json:"trace_id"`
		} `json:"refusals"`
	}
	if err := json.Unmarshal(b, &body); err != nil || code != 200 || !body.Tracing {
		t.Fatalf("/admin/refusals answered %d %s, want tracing on", code, b)
	}
	for _, r := range body.Refusals {
		if r.Code == "not_authenticated" && r.Status == 401 && r.TraceID == refused.TraceID {
			return
		}
	}
	t.Errorf("/admin/refusals %s does not list the 401 of trace %s", b, refused.TraceID)
}

// TestTracingCollectorUnreachable: with the collector refusing every
// connection and a small queue, requests under load are all answered as
// without tracing, and the spans they could not export are counted as
// dropped.
func TestTracingCollectorUnreachable(t *testing.T) {
	bs := httptest.NewServer(&traceparents{})
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Store = config.StoreMemory
	cfg.Overload.Enabled = false // 20 clients of one address are shed on a loaded machine: not tracing's doing
	cfg.Tracing.Exporter = config.TraceExporterOTLP
	cfg.Tracing.Endpoint = "http://" + unreachable.Refused(t)
	cfg.Tracing.MaxQueueSize, cfg.Tracing.MaxExportBatchSize = 16, 8
	cfg.Tracing.BatchTimeout, cfg.Tracing.ExportTimeout = 20*time.Millisecond, 500*time.Millisecond
	reg := prometheus.NewRegistry()
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, reg: reg})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for c := 0; c < 20; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				code, _, _ := call(t, "GET", "http://"+a.addr+"/api/v1/mth/orderbook/BTC_USDT/", "")
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if codes[200] != 500 {
		t.Errorf("answers %v, want all 500 requests answered 200", codes)
	}
	exported, dropped := 0.0, 0.0
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metrics.NameTraceSpansExported:
				exported += m.GetCounter().GetValue()
			case metrics.NameTraceSpansDropped:
				dropped += m.GetCounter().GetValue()
			}
		}
	}
	// 500 requests, two spans each; the queue holds at most 16 at a time.
	if exported != 0 || dropped < 1000-16-8 {
		t.Errorf("exported %v, dropped %v of 1000 spans; want every span past the queue counted as dropped", exported, dropped)
	}
}
