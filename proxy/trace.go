package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/traceheader"
)

// The request's spans (docs/operations.md, "Tracing"): a server span from
// arrival to the last byte of the answer, a client span of the backend
// call, a child span of the rate-limit round trip, and an event for each
// other step that decided something. Every hook runs only while tracing
// is on (st.span set), and records only while the request is sampled
// (st.rec): off, a request pays one nil check per hook; on and not
// sampled, it pays the sampler's decision, its span context (no span is
// started) and the traceparent sent to the backend. No attribute carries a token, a token id, an account or a
// raw path with its ids.

// Attributes of exgate's own, beside the HTTP semantic conventions'.
const (
	attrRoute           = attribute.Key("exgate.route")
	attrRequestID       = attribute.Key("exgate.request_id")
	attrRefusalCode     = attribute.Key("exgate.refusal.code")
	attrRefusalFields   = attribute.Key("exgate.refusal.fields")
	attrAuthResult      = attribute.Key("exgate.auth.result")
	attrAuthReason      = attribute.Key("exgate.auth.reason")
	attrAuthVerified    = attribute.Key("exgate.auth.verified")
	attrLimitDecision   = attribute.Key("exgate.rate_limit.decision")
	attrLimitName       = attribute.Key("exgate.rate_limit.limit")
	attrLimitTier       = attribute.Key("exgate.rate_limit.tier")
	attrLimitRemaining  = attribute.Key("exgate.rate_limit.remaining")
	attrLimitCost       = attribute.Key("exgate.rate_limit.cost")
	attrLimitFallback   = attribute.Key("exgate.rate_limit.fallback")
	attrLimitCached     = attribute.Key("exgate.rate_limit.deny_cache")
	attrLimitDemoted    = attribute.Key("exgate.rate_limit.token_demoted")
	attrLimitGivenBack  = attribute.Key("exgate.rate_limit.given_back")
	attrClaimOutcome    = attribute.Key("exgate.identifier.outcome")
	attrOverloadClass   = attribute.Key("exgate.overload.class")
	attrOverloadResult  = attribute.Key("exgate.overload.result")
	attrOverloadQueued  = attribute.Key("exgate.overload.queue_seconds")
	attrUpstreamError   = attribute.Key("exgate.upstream.error")
	attrReplayed        = attribute.Key("exgate.identifier.replayed")
	attrIncomingTrusted = attribute.Key("exgate.trace.incoming_trusted")
)

// Tracer starts the requests' spans: tracing.Tracer, the SDK's tracer
// whose provider's sampler decides before a span starts.
type Tracer interface {
	trace.Tracer
	// StartSampled starts a span as Start does when it is sampled (or
	// recorded), and returns the context holding it, its span context and
	// the span; else it starts none and returns ctx, the span context the
	// span would have had, and a nil span.
	StartSampled(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.SpanContext, trace.Span)
}

// Trust of a client's trace context, compiled from tracing.trust_incoming.
const (
	trustNever = iota
	trustProxies
	trustAlways
)

func traceTrust(s string) uint8 {
	switch s {
	case config.TraceTrustAlways:
		return trustAlways
	case config.TraceTrustProxies:
		return trustProxies
	}
	return trustNever
}

// routeTrace is what a route's spans say of it, built once per plan.
type routeTrace struct {
	name      string // the span name, "METHOD pattern", or "" for a route of any method
	httpRoute attribute.KeyValue
	route     attribute.KeyValue
	hasRoute  bool // http.route is set: not the default route
}

func newRouteTrace(r *Route) routeTrace {
	rt := routeTrace{route: attrRoute.String(r.Name)}
	if !r.isDef {
		rt.httpRoute, rt.hasRoute = semconv.HTTPRoute(r.Config.Match.Path), true
		if r.method != "" {
			rt.name = r.method + " " + r.Config.Match.Path
		}
	}
	return rt
}

// spanName is the server span's name: "METHOD pattern" (the HTTP
// semantic conventions' name), or the method alone without a route.
func spanName(r *http.Request, rt *Route) string {
	switch {
	case rt == nil || !rt.trace.hasRoute:
		return methodName(r.Method)
	case rt.trace.name != "":
		return rt.trace.name
	}
	return methodName(r.Method) + " " + rt.Config.Match.Path
}

// methodName is the method as a span names it: a method HTTP does not
// define is "HTTP" (the semantic conventions' name for it).
func methodName(m string) string {
	if methodAttr(m).Value.AsString() == "_OTHER" {
		return "HTTP"
	}
	return m
}

// methodAttr is http.request.method: one of the known methods, else
// _OTHER (http.request.method_original then says which).
func methodAttr(m string) attribute.KeyValue {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodOther
}

// startSpan starts the request's server span, as the child of the
// client's trace context when tracing.trust_incoming trusts it, else as
// the root of a trace of its own linked to the client's. A request
// without a traceparent, the common case, starts with options built once
// and no attribute. The sampler decides first: a request it does not
// sample gets the span context of its server span (st.sc) and no span,
// which allocates nothing.
func (g *Gateway) startSpan(st *requestState, r *http.Request) {
	ctx, opts := context.Background(), g.spanStart
	trusted := false
	if g.formats.Carried(r.Header) {
		in := g.formats.Read(ctx, r.Header)
		switch {
		case g.trustsTraceOf(g.peerOf(r)):
			ctx, trusted = in, true
		default:
			if link := (trace.Link{SpanContext: trace.SpanContextFromContext(in)}); link.SpanContext.IsValid() {
				opts = []trace.SpanStartOption{opts[0], trace.WithNewRoot(), trace.WithLinks(link)}
			}
		}
	}
	st.traceCtx, st.sc, st.span = g.tracer.StartSampled(ctx, methodName(r.Method), opts...)
	if st.span == nil {
		return
	}
	st.rec = st.span.IsRecording()
	if st.rec {
		st.span.SetAttributes(methodAttr(r.Method), urlScheme(r))
		if trusted {
			st.span.SetAttributes(attrIncomingTrusted.Bool(true))
		}
	}
}

func urlScheme(r *http.Request) attribute.KeyValue {
	if r.TLS != nil {
		return semconv.URLScheme("https")
	}
	return semconv.URLScheme("http")
}

// startUpstreamSpan starts the client span of the backend call, under the
// server span, and sends its context to the backend in every format of
// tracing.propagators (with the trusted client's tracestate and
// baggage): the backend's spans are children of exgate's call. A request
// that is not sampled sends its server span's context, saying not
// sampled, and starts no client span. tp holds the traceparent sent
// (traceheader.Formats.Write).
func (g *Gateway) startUpstreamSpan(st *requestState, r *http.Request, tp *[1]string) {
	sc := st.sc
	if st.rec {
		_, st.upSpan = g.tracer.Start(st.traceCtx, spanName(r, st.route),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(st.upStart),
			trace.WithAttributes(methodAttr(r.Method), semconv.ServerAddress(st.inst.Host), semconv.ServerPort(st.inst.Port)))
		if st.route.trace.hasRoute {
			st.upSpan.SetAttributes(semconv.URLTemplate(st.route.Config.Match.Path))
		}
		sc = st.upSpan.SpanContext()
	}
	g.formats.Write(tp, r.Header, st.traceCtx, sc)
}

// endSpans ends the request's spans with what became of it: the route,
// the status, exgate's refusal code, the caller's authentication and
// address. A 5xx is an error of the server span; a backend's 4xx or 5xx
// an error of its client span.
func (g *Gateway) endSpans(st *requestState, r *http.Request, end time.Time) {
	if st.code != "" {
		g.refusals.add(st, methodName(r.Method), end)
	}
	if st.upSpan != nil {
		g.endUpstreamSpan(st, end)
	}
	s := st.span
	s.SetName(spanName(r, st.route))
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs, semconv.HTTPResponseStatusCode(st.rw.status), attrRequestID.String(st.id),
		semconv.NetworkProtocolVersion(protocolVersion(r)))
	if attrs[len(attrs)-1].Value.AsString() == "" {
		attrs = attrs[:len(attrs)-1]
	}
	if st.route != nil {
		attrs = append(attrs, st.route.trace.route)
		if st.route.trace.hasRoute {
			attrs = append(attrs, st.route.trace.httpRoute)
		}
	}
	if methodAttr(r.Method) == semconv.HTTPRequestMethodOther {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(MethodShown(r.Method)))
	}
	attrs = appendServerAddress(attrs, r)
	if st.addr.IsValid() {
		attrs = append(attrs, semconv.ClientAddress(st.addr.String()))
	}
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		// The connection's peer, the access log's peer: a trusted proxy
		// when client.address is the client it named, and there on a
		// request refused before its client address was derived.
		attrs = append(attrs, semconv.NetworkPeerAddress(peer.Addr().Unmap().String()), semconv.NetworkPeerPort(int(peer.Port())))
	}
	if ua := r.Header["User-Agent"]; len(ua) > 0 {
		attrs = append(attrs, semconv.UserAgentOriginal(userAgent(ua[0], r)))
	}
	if st.code != "" {
		attrs = append(attrs, attrRefusalCode.String(st.code))
	}
	if st.replayed {
		attrs = append(attrs, attrReplayed.Bool(true))
	}
	if st.rw.status >= 500 && st.rw.status != StatusClientClosed {
		errType := st.code
		if errType == "" {
			errType = strconv.Itoa(st.rw.status)
		}
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		s.SetStatus(codes.Error, errType)
	}
	s.SetAttributes(attrs...)
	s.End(trace.WithTimestamp(end))
}

// maxServerAddress bounds server.address: a DNS name has at most 253
// bytes, and a client's Host header is not kept longer.
const maxServerAddress = 255

// appendServerAddress appends server.address, the name the client asked
// for in its Host header (the semantic conventions' source for it), and
// server.port when the header names a port other than the scheme's. A
// Host that is empty, longer than a DNS name, or not a valid Host adds
// neither: an HTTP/2 :authority may hold any byte from 0x80 on, refused
// 400 invalid_header (checkHeader) but still its span's, and a span
// attribute that is not valid UTF-8 fails the OTLP export of its whole
// batch (shown).
func appendServerAddress(attrs []attribute.KeyValue, r *http.Request) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil { // no port
		host, port = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), ""
	}
	if host == "" || len(host) > maxServerAddress || !httpguts.ValidHostHeader(r.Host) {
		return attrs
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 || (r.TLS == nil && p == 80) || (r.TLS != nil && p == 443) {
		return attrs
	}
	return append(attrs, semconv.ServerPort(p))
}

// endUpstreamSpan ends the backend call's client span.
func (g *Gateway) endUpstreamSpan(st *requestState, end time.Time) {
	u := st.upSpan
	switch {
	case st.upStatus != 0:
		u.SetAttributes(semconv.HTTPResponseStatusCode(st.upStatus))
		if st.upStatus >= 400 {
			u.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(st.upStatus)))
			u.SetStatus(codes.Error, "")
		}
	case st.upErr != nil:
		kind := metrics.ClassifyUpstreamError(st.upErr, st.clientCx.Err() != nil).String()
		u.SetAttributes(semconv.ErrorTypeKey.String(kind), attrUpstreamError.String(kind))
		u.SetStatus(codes.Error, kind)
	}
	u.End(trace.WithTimestamp(end))
}

// protocolVersion is network.protocol.version: "1.1", "2", "1.0".
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "2"
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0"
	}
	return ""
}

// traceAuth records the authentication step: the caller authenticated
// (verified or not), anonymous, or refused, and why.
func (g *Gateway) traceAuth(st *requestState, e *apierror.Error) {
	result := "anonymous"
	switch {
	case e != nil:
		result = "refused"
	case st.caller.token != "":
		result = "authenticated"
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, attrAuthResult.String(result))
	if st.authFailed != "" {
		attrs = append(attrs, attrAuthReason.String(st.authFailed))
	}
	if st.caller.token != "" {
		attrs = append(attrs, attrAuthVerified.Bool(st.caller.id.Account != ""))
	}
	st.span.SetAttributes(attrs...)
	st.span.AddEvent("authentication", trace.WithAttributes(attrs...))
}

// traceLimits records the decision of a route's limits: a child span of
// the store's round trip from t0, or an event when the deny cache decided
// with no round trip. It names the limit that decided (the one that
// refused, else the last one), the caller's tier and what remains —
// never the token id or the account it counted.
func (g *Gateway) traceLimits(st *requestState, rt *Route, cost int64, t0 time.Time, cached bool) {
	d := &st.decision
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attrRoute.String(rt.Name), attrLimitCost.Int64(cost))
	if o := d.Deciding(); o != nil {
		attrs = append(attrs, attrLimitDecision.String(o.Decision.String()), attrLimitName.String(o.Limit),
			attrLimitRemaining.Int64(o.Result.Remaining))
		if o.Fallback != "" {
			attrs = append(attrs, attrLimitFallback.String(o.Fallback))
		}
	}
	if d.Tier != "" {
		attrs = append(attrs, attrLimitTier.String(d.Tier))
	}
	if d.Demoted {
		attrs = append(attrs, attrLimitDemoted.Bool(true))
	}
	if d.Uncharged { // its claim, riding in the round trip, took nothing: only its allowance was charged
		st.span.SetAttributes(attrLimitGivenBack.Bool(true))
	}
	if cached {
		attrs = append(attrs, attrLimitCached.Bool(true))
		st.span.AddEvent("rate_limit", trace.WithAttributes(attrs...))
		return
	}
	ctx := trace.ContextWithSpan(context.Background(), st.span)
	_, s := g.tracer.Start(ctx, "rate_limit", trace.WithTimestamp(t0), trace.WithAttributes(attrs...))
	if !d.Allowed {
		s.SetStatus(codes.Error, "refused")
	}
	s.End(trace.WithTimestamp(g.now()))
}

// traceClaim records what an order's identifier claim came to: claimed,
// replayed, or refused (conflict, in_progress, unknown), or the store's
// failure.
func (g *Gateway) traceClaim(st *requestState, o idempotency.Outcome, err error) {
	outcome := claimOutcome(o)
	if err != nil {
		outcome = "store_failed"
	}
	st.span.AddEvent("identifier_claim", trace.WithAttributes(attrClaimOutcome.String(outcome)))
}

// claimOutcome names an identifier claim's outcome.
func claimOutcome(o idempotency.Outcome) string {
	switch o {
	case idempotency.Claimed:
		return "claimed"
	case idempotency.Replay:
		return "replayed"
	case idempotency.InProgress:
		return "in_progress"
	case idempotency.Conflict:
		return "conflict"
	}
	return "unknown"
}

// traceAdmission records overload admission: the class, whether the
// request got a backend slot or was shed, and how long it queued.
func (g *Gateway) traceAdmission(st *requestState, c overload.Class, result string, waited time.Duration) {
	st.span.AddEvent("overload_admission", trace.WithAttributes(attrOverloadClass.String(c.String()),
		attrOverloadResult.String(result), attrOverloadQueued.Float64(waited.Seconds())))
}

// traceRefusal records exgate's answer to a refused request: its code and
// status and, for a body that failed validation, the fields it named
// (unknown fields, whose names the client chose, are not named).
func (g *Gateway) traceRefusal(st *requestState, e *apierror.Error) {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, attrRefusalCode.String(e.Code), semconv.HTTPResponseStatusCode(e.Status))
	if len(e.Fields) > 0 {
		attrs = append(attrs, attrRefusalFields.StringSlice(refusedFields(e.Fields)))
	}
	st.span.AddEvent("refused", trace.WithAttributes(attrs...))
}

// maxTracedFields bounds the fields a refusal's event names.
const maxTracedFields = 20

// refusedFields lists, sorted, the fields a refusal names, an unknown
// field as "(unknown field)".
func refusedFields(fields map[string][]string) []string {
	out := make([]string, 0, min(len(fields), maxTracedFields))
	for name, problems := range fields {
		if slices.ContainsFunc(problems, func(p string) bool { return p == "unknown field" }) {
			name = "(unknown field)"
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), maxTracedFields)]
}

// traceIDs returns the trace and span ids of the request's server span,
// sampled or not, for its access log line, or zero ids when tracing is
// off.
func (st *requestState) traceIDs() (trace.TraceID, trace.SpanID) {
	return st.sc.TraceID(), st.sc.SpanID()
}

// admissionResult names the outcome of waiting for a backend slot.
func admissionResult(ok bool, r *http.Request) string {
	switch {
	case ok:
		return "admitted"
	case r.Context().Err() != nil:
		return "client_gone"
	}
	return "shed"
}

// setTracing compiles what the gateway needs of cfg's tracing section:
// the formats and whose context is trusted, tracing on or off (off, an
// untrusted client's context is removed: rewrite), and what its spans
// need while tracing is on.
func (g *Gateway) setTracing(cfg *config.Config) error {
	var err error
	if g.formats, err = traceheader.New(cfg.Tracing.Propagators); err != nil {
		return fmt.Errorf("proxy: tracing.propagators: %w", err)
	}
	g.trust = traceTrust(cfg.Tracing.TrustIncoming)
	if g.tracer == nil {
		return nil
	}
	g.spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	g.refusals = newRecentRefusals(recentRefusalsKept)
	return nil
}

// trustsTraceOf reports whether tracing.trust_incoming trusts the trace
// context of a request from p.
func (g *Gateway) trustsTraceOf(p *peer) bool {
	return g.trust == trustAlways || g.trust == trustProxies && p.trusted
}

// traceFields adds the request's trace and span ids to its access log
// line: sampled or not, the backend received the same trace id, so the
// two logs join on it.
func traceFields(fields []zap.Field, st *requestState) []zap.Field {
	tid, sid := st.traceIDs()
	if !tid.IsValid() {
		return fields
	}
	fields = append(fields, zap.String("trace_id", tid.String()), zap.String("span_id", sid.String()))
	if st.rec {
		fields = append(fields, zap.Bool("trace_sampled", true))
	}
	return fields
}
