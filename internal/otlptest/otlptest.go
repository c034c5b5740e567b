// Package otlptest is an OTLP trace receiver for tests, built from the
// protocol's official types (go.opentelemetry.io/proto/otlp): the
// collector's TraceService over a real gRPC server, and POST /v1/traces
// of protobuf over a real HTTP server, both on loopback. It keeps every
// span it receives, with its resource.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span with its resource's attributes, flattened to
// strings.
type Span struct {
	Name                       string
	Kind                       tracepb.Span_SpanKind
	TraceID, SpanID            string // hex
	ParentSpanID               string // hex, "" for a root
	Attributes                 map[string]string
	Resource                   map[string]string
	Events                     []Event
	Links                      []string // the linked spans' trace ids, hex
	StatusCode                 tracepb.Status_StatusCode
	StatusMessage              string
	StartUnixNano, EndUnixNano uint64
}

// Event is a received span event.
type Event struct {
	Name       string
	Attributes map[string]string
}

// Receiver receives OTLP traces over gRPC and HTTP on loopback.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// GRPC and HTTP are the receivers' URLs: http://127.0.0.1:port, and
	// for HTTP the whole URL spans are POSTed to (…/v1/traces).
	GRPC, HTTP string

	mu      sync.Mutex
	spans   []Span
	exports int
}

// Start starts both receivers until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	rc := &Receiver{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rc)
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(gs.Stop)
	rc.GRPC = "http://" + gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", rc.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	rc.HTTP = "http://" + hl.Addr().String() + "/v1/traces"
	return rc
}

// Export receives an export over gRPC.
func (rc *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	rc.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveHTTP receives an export over HTTP: binary protobuf, answered with
// an empty ExportTraceServiceResponse.
func (rc *Receiver) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "want an ExportTraceServiceRequest in application/x-protobuf", http.StatusBadRequest)
		return
	}
	rc.add(&req)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.exports++
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				rc.spans = append(rc.spans, flatten(s, res))
			}
		}
	}
}

func flatten(s *tracepb.Span, res map[string]string) Span {
	out := Span{
		Name: s.GetName(), Kind: s.GetKind(), TraceID: hex.EncodeToString(s.GetTraceId()),
		SpanID: hex.EncodeToString(s.GetSpanId()), ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
		Attributes: attrs(s.GetAttributes()), Resource: res,
		StatusCode: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
		StartUnixNano: s.GetStartTimeUnixNano(), EndUnixNano: s.GetEndTimeUnixNano(),
	}
	for _, e := range s.GetEvents() {
		out.Events = append(out.Events, Event{Name: e.GetName(), Attributes: attrs(e.GetAttributes())})
	}
	for _, l := range s.GetLinks() {
		out.Links = append(out.Links, hex.EncodeToString(l.GetTraceId()))
	}
	return out
}

// attrs flattens attributes to strings (arrays as their elements joined
// by commas).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_ArrayValue:
		s := ""
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				s += ","
			}
			s += value(e)
		}
		return s
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return ""
}

// Spans returns the spans received so far.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Span(nil), rc.spans...)
}

// WaitSpans waits until at least n spans have arrived, for at most
// timeout (a bound on a broken test, not a measured time), and returns
// them.
func (rc *Receiver) WaitSpans(t testing.TB, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := rc.Spans()
		if len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %d spans, want %d", len(s), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
