package proxy

import (
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/exgate/exgate/limiter"
)

// evidence reports whether the request's access log line must survive
// log sampling: an order or a cancel, or a refusal — by exgate or the
// backend, 499 included.
func (st *requestState) evidence() bool {
	return st.rw.status >= 400 || st.code != "" || st.route != nil && st.route.evidence
}

// ownRefusal reports whether the request was refused by exgate before it
// went to the backend, and without its limits letting it through: its
// access log line is charged to its client's share of such lines
// (log.refusals_per_client). The line of a request that went to the
// backend, whatever its status, never is, nor that of a request its
// limits allowed (then answered by duplicate protection, shed, or
// refused by validation), which the limits bound.
func (st *requestState) ownRefusal() bool {
	return st.upStart.IsZero() && (st.code != "" || st.rw.status >= 400) &&
		!(st.limitsDecided && st.decision.Allowed)
}

// logAccess writes the request's access log line; done is when it ended.
func (g *Gateway) logAccess(st *requestState, r *http.Request, done time.Time, extra ...zap.Field) {
	if !g.access {
		return
	}
	lg := g.log
	if st.evidence() {
		lg = g.evidence
	}
	ce := lg.Check(zapcore.InfoLevel, "request")
	if ce == nil || g.logShare != nil && st.ownRefusal() && !g.withinLogShare(st, r, done) {
		return
	}
	route := "default"
	if st.route != nil {
		route = st.route.Name
	}
	fp := accessFields.Get().(*[]zap.Field)
	fields := append((*fp)[:0],
		zap.String("request_id", st.id),
		zap.String("route", route),
		zap.String("method", MethodShown(r.Method)),
		zap.String("path", shown(st.path, maxPathShown)),
		zap.String("protocol", r.Proto),
		zap.Int("status", st.rw.status),
		zap.Duration("duration", done.Sub(st.start)),
		zap.Int64("bytes", st.rw.bytes),
		zap.String("peer", r.RemoteAddr),
	)
	if ua := r.Header["User-Agent"]; len(ua) > 0 {
		fields = append(fields, zap.String("user_agent", userAgent(ua[0], r)))
	}
	if st.code != "" {
		// Why exgate answered itself (duplicate_protection_unavailable,
		// rate_limit_unavailable, throttled, …): the status alone does
		// not tell one 503 from another.
		fields = append(fields, zap.String("code", st.code))
	}
	if st.authFailed != "" {
		fields = append(fields, zap.String("auth_failure", st.authFailed))
	}
	if st.replayed {
		fields = append(fields, zap.Bool("replayed", true))
	}
	if st.addr.IsValid() {
		fields = append(fields, zap.String("client", st.addr.String())) // as zap.Stringer writes it, without boxing the address
	}
	if a := st.caller.id.Account; a != "" {
		fields = append(fields, zap.String("account", a[:12])) // an HMAC prefix, never the user id
	}
	if st.limitsDecided {
		fields = g.limitFields(fields, &st.decision)
	}
	if st.inst != nil {
		fields = append(fields, zap.String("upstream_instance", st.inst.Addr))
	}
	if st.upDone {
		if st.upStatus != 0 {
			fields = append(fields, zap.Int("upstream_status", st.upStatus))
		}
		fields = append(fields, zap.Duration("upstream_duration", st.upDur))
	}
	if st.upErr != nil {
		fields = append(fields, zap.NamedError("upstream_error", st.upErr))
	}
	if st.sc.IsValid() {
		fields = traceFields(fields, st)
	}
	fields = append(fields, extra...)
	ce.Write(fields...)
	clear(fields) // the line's strings, for the collector
	*fp = fields[:0]
	accessFields.Put(fp)
}

// accessFields holds the field slices of access log lines, reused from
// one line to the next, where each line made one of 1.5 KiB: a core
// encodes a line's fields while its Write runs (zap's JSON and console
// cores, its sampler and tee pass them on, zaptest's observer copies
// them), and none keeps the slice.
var accessFields = sync.Pool{New: func() any {
	s := make([]zap.Field, 0, 28)
	return &s
}}

// maxMethodShown bounds the method a log line, a span or a 405's detail
// shows: the longest methods registered (UPDATEREDIRECTREF,
// BASELINE-CONTROL) are 17 bytes, and net/http reads any token up to
// twice server.max_header_bytes as one.
const maxMethodShown = 24

// MethodShown is the method m as the access log, the span's
// http.request.method_original and a 405's detail (the gateway's and the
// admin listener's) show it: at most its first maxMethodShown bytes,
// followed by "…" when it is longer (shown): net/http's HTTP/1 server
// takes only a token as a method, its HTTP/2 server any :method a field
// value may hold, UTF-8 included (answered 405: no route names one).
func MethodShown(m string) string { return shown(m, maxMethodShown) }

// maxPathShown bounds the path an access log line shows: a canonical
// path is as long as net/http reads a request line (up to twice
// server.max_header_bytes, 32 KiB by default), and a line longer than a
// log pipeline's own bound (Docker's json-file driver splits at 16 KiB)
// reaches the collector in pieces none of which parses. 2 KiB holds a
// status read of some 100 order ids.
const maxPathShown = 2048

// shown is s as a log line, a span or an answer shows what a client
// sent: at most its first max bytes, followed by "…" when it is longer,
// cut between two characters, and valid UTF-8 (a byte that is not part
// of a character as U+FFFD). A header value may hold any byte from 0x80
// on (obs-text), which net/http's servers take, and a span attribute
// that is not valid UTF-8 fails the OTLP export of its whole batch
// (protobuf refuses to marshal it: opentelemetry-go#3021), the spans of
// every other request in it dropped.
func shown(s string, max int) string {
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// maxUserAgent bounds the user agent an access log line carries.
const maxUserAgent = 256

// userAgent is the user agent as the access log and the span write it:
// shown within maxUserAgent bytes, and never a token of the request's Authorization
// headers (all of them: a request may send two, and is refused for it),
// should a client have put it there.
func userAgent(ua string, r *http.Request) string {
	for _, auth := range r.Header["Authorization"] {
		if _, t, ok := strings.Cut(auth, " "); ok && len(t) >= 8 && strings.Contains(ua, t) {
			ua = strings.ReplaceAll(ua, t, "[token]")
		}
	}
	return shown(ua, maxUserAgent)
}

// limitFields adds the rate-limit decision to an access log line: the
// token id's first 12 hex digits (never the token), the tier, and the
// limit that decided (Decision.Deciding: the one that denied, else the
// one closest to denial, as the RateLimit headers and the trace name it).
func (g *Gateway) limitFields(fields []zap.Field, d *limiter.Decision) []zap.Field {
	if d.TokenID != "" {
		fields = append(fields, zap.String("token_id", d.TokenID[:12]))
	}
	if d.Tier != "" {
		fields = append(fields, zap.String("tier", d.Tier))
	}
	if d.Demoted {
		fields = append(fields, zap.Bool("token_demoted", true))
	}
	if o := d.Deciding(); o != nil {
		fields = append(fields, zap.String("limit", o.Limit), zap.String("limit_decision", o.Decision.String()),
			zap.Int64("limit_remaining", o.Result.Remaining))
		if o.Fallback != "" {
			fields = append(fields, zap.String("limit_fallback", o.Fallback))
		}
		if d.ExceedsBurst {
			fields = append(fields, zap.Int64("limit_max_cost", d.MaxCost))
		}
	}
	return fields
}
