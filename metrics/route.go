package metrics

import (
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RouteMetrics are the per-route series of one route, resolved once. Its
// methods do not allocate once a (method, code) pair has been seen. A nil
// *RouteMetrics is valid and records nothing.
type RouteMetrics struct {
	m                *Metrics
	name             string
	duration         prometheus.Observer
	upstreamDuration prometheus.Observer
	upstreamErrors   [numUpstreamErrorKinds]prometheus.Counter
	fallback         [numFallbackModes]prometheus.Counter

	// requests holds the exgate_requests_total children of the common
	// status codes, resolved on first use so that pairs never seen export
	// no zero series.
	requests [numMethods][numCommonCodes]atomic.Pointer[counterRef]
}

// counterRef boxes a Counter so that it can sit behind an atomic.Pointer.
type counterRef struct{ c prometheus.Counter }

func newRouteMetrics(m *Metrics, name string) *RouteMetrics {
	r := &RouteMetrics{
		m:                m,
		name:             name,
		duration:         m.requestDuration.WithLabelValues(name),
		upstreamDuration: m.upstreamDuration.WithLabelValues(name),
	}
	for k := range r.upstreamErrors {
		r.upstreamErrors[k] = m.upstreamErrors.WithLabelValues(name, UpstreamErrorKind(k).String())
	}
	for k := range r.fallback {
		r.fallback[k] = m.fallback.WithLabelValues(name, FallbackMode(k).String())
	}
	return r
}

// Name returns the route label, or "" on a nil *RouteMetrics.
func (r *RouteMetrics) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// ObserveRequest records one answered request: it counts it in
// exgate_requests_total under the normalised method and the status code,
// and observes d in exgate_request_duration_seconds. Use code 499 when the
// client went away before an answer. Codes outside 100–999 are counted as
// "000".
func (r *RouteMetrics) ObserveRequest(method string, code int, d time.Duration) {
	if r == nil {
		return
	}
	r.requestCounter(methodIndex(method), code).Inc()
	r.duration.Observe(d.Seconds())
}

func (r *RouteMetrics) requestCounter(mi, code int) prometheus.Counter {
	ci := codeIndex(code)
	if ci < 0 { // rare status: resolved every time
		return r.m.requests.WithLabelValues(r.name, methodLabel(mi), codeLabel(code))
	}
	p := &r.requests[mi][ci]
	if ref := p.Load(); ref != nil {
		return ref.c
	}
	// Concurrent first uses store equal children: WithLabelValues returns
	// the same child for the same labels.
	ref := &counterRef{r.m.requests.WithLabelValues(r.name, methodLabel(mi), codeLabel(code))}
	p.Store(ref)
	return ref.c
}

// ObserveUpstream records the time the backend took to answer with
// response headers, or to fail.
func (r *RouteMetrics) ObserveUpstream(d time.Duration) {
	if r == nil {
		return
	}
	r.upstreamDuration.Observe(d.Seconds())
}

// UpstreamError counts one request the backend did not answer. Kinds
// outside the defined set are counted as UpstreamOther.
func (r *RouteMetrics) UpstreamError(kind UpstreamErrorKind) {
	if r == nil {
		return
	}
	if kind >= numUpstreamErrorKinds {
		kind = UpstreamOther
	}
	r.upstreamErrors[kind].Inc()
}

// Fallback counts one rate-limit decision of this route taken without the
// store because the store failed, by the mode that decided it. Modes
// outside the defined set are ignored.
func (r *RouteMetrics) Fallback(mode FallbackMode) {
	if r == nil || mode >= numFallbackModes {
		return
	}
	r.fallback[mode].Inc()
}

// Methods: the known set, then "other".
const (
	methodGET = iota
	methodHEAD
	methodPOST
	methodPUT
	methodPATCH
	methodDELETE
	methodOPTIONS
	methodOther
	numMethods
)

// methodIndex maps an HTTP method to its label index. Methods are
// case-sensitive (RFC 9110), so "get" is "other".
func methodIndex(method string) int {
	switch method {
	case "GET":
		return methodGET
	case "HEAD":
		return methodHEAD
	case "POST":
		return methodPOST
	case "PUT":
		return methodPUT
	case "PATCH":
		return methodPATCH
	case "DELETE":
		return methodDELETE
	case "OPTIONS":
		return methodOPTIONS
	}
	return methodOther
}

func methodLabel(i int) string {
	switch i {
	case methodGET:
		return "GET"
	case methodHEAD:
		return "HEAD"
	case methodPOST:
		return "POST"
	case methodPUT:
		return "PUT"
	case methodPATCH:
		return "PATCH"
	case methodDELETE:
		return "DELETE"
	case methodOPTIONS:
		return "OPTIONS"
	}
	return "other"
}

// numCommonCodes is how many status codes codeIndex knows.
const numCommonCodes = 30

// codeIndex returns the index of a common status code, or -1.
func codeIndex(code int) int {
	switch code {
	case 200:
		return 0
	case 201:
		return 1
	case 202:
		return 2
	case 204:
		return 3
	case 206:
		return 4
	case 301:
		return 5
	case 302:
		return 6
	case 304:
		return 7
	case 307:
		return 8
	case 308:
		return 9
	case 400:
		return 10
	case 401:
		return 11
	case 403:
		return 12
	case 404:
		return 13
	case 405:
		return 14
	case 408:
		return 15
	case 409:
		return 16
	case 410:
		return 17
	case 413:
		return 18
	case 415:
		return 19
	case 422:
		return 20
	case 429:
		return 21
	case 431:
		return 22
	case 499:
		return 23
	case 500:
		return 24
	case 501:
		return 25
	case 502:
		return 26
	case 503:
		return 27
	case 504:
		return 28
	case 505:
		return 29
	}
	return -1
}

func codeLabel(code int) string {
	if code < 100 || code > 999 {
		return "000"
	}
	return strconv.Itoa(code)
}

// ObserveRequestTraced is ObserveRequest for a sampled request: its
// duration carries the request's trace id as an exemplar (OpenMetrics),
// so that a latency spike on a dashboard links to a trace.
func (r *RouteMetrics) ObserveRequestTraced(method string, code int, d time.Duration, traceID [16]byte) {
	if r == nil {
		return
	}
	r.requestCounter(methodIndex(method), code).Inc()
	observeTraced(r.duration, d, traceID)
}

// ObserveUpstreamTraced is ObserveUpstream for a sampled request, with
// its trace id as an exemplar.
func (r *RouteMetrics) ObserveUpstreamTraced(d time.Duration, traceID [16]byte) {
	if r == nil {
		return
	}
	observeTraced(r.upstreamDuration, d, traceID)
}

// observeTraced observes d with the exemplar {trace_id="<32 hex digits>"}.
func observeTraced(o prometheus.Observer, d time.Duration, traceID [16]byte) {
	eo, ok := o.(prometheus.ExemplarObserver)
	if !ok {
		o.Observe(d.Seconds())
		return
	}
	eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": hex.EncodeToString(traceID[:])})
}
