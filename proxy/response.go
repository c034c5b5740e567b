package proxy

import (
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/upstream"
)

// modifyResponse refuses a response with a status HTTP does not define,
// one that switches protocols or one that names another request's id,
// leaves the client one set of legacy rate-limit fields, records the
// response of a claimed order and adds the request id to backend
// responses that lack one. st is the state of the request res answers:
// the reverse proxy calling it is the state's own (newState).
func (g *Gateway) modifyResponse(st *requestState, res *http.Response) error {
	st.rw.endHints() // exgate's own fields back, after a 1xx
	if inst := st.inst; inst != nil {
		inst.Answered(res.ProtoMajor) // an https instance that fell back to HTTP/1.1 keeps its limit within its connections
	}
	if st.rw.interims > maxInterim {
		return errTooManyInterim // an answer that came as the call was cut for its 1xx answers
	}
	if err := checkStatus(res); err != nil {
		return err
	}
	if err := checkNoSwitch(res); err != nil {
		return err
	}
	// The backend's X-Request-ID, read once: nothing below writes it
	// before answerWithID.
	id, idSent := res.Header["X-Request-Id"]
	if g.checkIDs {
		if err := checkResponseID(res, id); err != nil {
			return err // before anything is recorded: the answer is not this request's
		}
	}
	if g.plan.Load().cors != nil {
		dropBackendCORS(res.Header)
	}
	// The fields upstream.hide_headers names go in moveHeader's pass over
	// the answer's header, where a delete of each, present or not, cost
	// about 200 instructions; first when something below reads them
	// there: the legacy fields' merge, an order's answer kept for replay.
	hidden := g.hidden
	if g.hidesLegacy || st.claim.phase == claimHeld {
		g.hide(res.Header)
		hidden = nil
	}
	if st.legacyFields {
		limiter.MergeLegacyFields(res.Header, st.rw.Header())
	}
	if err := g.recordResponse(st, res); err != nil {
		return err
	}
	if len(id) == 0 || id[0] == "" {
		answerWithID(st, res, idSent) // none, or an empty one (the header as res.Header.Get reads it)
	}
	moveHeader(st.rw.Header(), res.Header, st.instanceURL(), hidden)
	return nil
}

// instanceURL returns the base URL of the instance st's request is under
// way at, or nil before one is chosen.
func (st *requestState) instanceURL() *url.URL {
	if st.inst == nil {
		return nil
	}
	return st.inst.URL
}

// hide removes from h, a backend's answer's or 1xx's header, the fields
// upstream.hide_headers names: before it is recorded for replay or
// reaches the client (or moveHeader removes them as it moves the rest).
func (g *Gateway) hide(h http.Header) {
	for _, k := range g.hidden {
		delete(h, k)
	}
}

// hidesLegacy reports whether hidden, upstream.hide_headers' names,
// names a legacy rate-limit field, which limiter.MergeLegacyFields reads
// before moveHeader would remove it.
func hidesLegacy(hidden []string) bool {
	for _, k := range hidden {
		if limiter.LegacyField(k) {
			return true
		}
	}
	return false
}

// unexposeInstance rewrites h's Location, Content-Location, Refresh and
// Link, a backend's answer's, where they name base, the instance that
// answered (its scheme, host and port, and its base path): what a
// backend sent the instance's address as Host builds its absolute links
// from. Each such URL then names the path below base, a relative
// reference (RFC 9110 §10.2.2; a Link target's is resolved against the
// request's URL, RFC 8288 §3.1), as NGINX's proxy_redirect default
// rewrites Location and Refresh: a client never gets an instance's
// address, which it cannot reach, or reaches past exgate. Link, which
// NGINX leaves, carries a pagination's next and last pages (GitHub's
// style, Rails' api-pagination) built the same way.
// recordResponse runs it before an order's answer is kept, so that a
// replay carries it so too; any other answer's fields are rewritten as
// moveHeader moves them (unexposeField), in the one pass it makes over
// the answer's header, where two look-ups of fields almost no answer
// carries cost about 330 instructions a GET.
func unexposeInstance(h http.Header, base *url.URL) {
	for _, k := range [...]string{"Location", "Content-Location", "Refresh", "Link"} {
		if v := h[k]; len(v) > 0 {
			unexposeField(h, k, v, base)
		}
	}
}

// unexposed reports whether unexposeInstance rewrites the field k.
func unexposed(k string) bool {
	switch k {
	case "Location", "Content-Location", "Refresh", "Link":
		return true
	}
	return false
}

// unexposeField rewrites h's field k, one unexposed, whose values are vs,
// as unexposeInstance does, and returns its values as they are then: a
// Location, Content-Location or Refresh sent once, each value of Link.
// vs is replaced, never written into.
func unexposeField(h http.Header, k string, vs []string, base *url.URL) []string {
	if k == "Link" {
		var out []string
		for i, v := range vs {
			if nv, ok := linkBelowInstance(v, base); ok {
				if out == nil {
					out = append([]string(nil), vs...)
				}
				out[i] = nv
			}
		}
		if out != nil {
			vs = out
			h[k] = vs
		}
		return vs
	}
	if len(vs) != 1 {
		return vs
	}
	below := belowInstance
	if k == "Refresh" {
		below = refreshBelowInstance
	}
	if v, ok := below(vs[0], base); ok {
		vs = []string{v}
		h[k] = vs
	}
	return vs
}

// refreshBelowInstance returns the Refresh value v with its URL below
// base, as belowInstance makes it, when it names one: "5; url=URL", the
// "url=" and the separator optional, the URL optionally quoted, read as
// browsers read it (HTML's shared declarative refresh steps).
func refreshBelowInstance(v string, base *url.URL) (string, bool) {
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	i = skipSpace(v, i)
	if i < len(v) && (v[i] == ';' || v[i] == ',') {
		i = skipSpace(v, i+1)
	}
	if rest, ok := cutPrefixFold(v[i:], "url"); ok {
		if j := skipSpace(v, len(v)-len(rest)); j < len(v) && v[j] == '=' {
			i = skipSpace(v, j+1)
		}
	}
	end := len(v)
	if i < len(v) && (v[i] == '"' || v[i] == '\'') {
		if j := strings.IndexByte(v[i+1:], v[i]); j >= 0 {
			end = i + 1 + j
		}
		i++
	}
	u := strings.TrimRight(v[i:end], " \t")
	rel, ok := belowInstance(u, base)
	if !ok {
		return "", false
	}
	return v[:i] + rel + v[i+len(u):], true
}

// skipSpace returns the index of the first byte of s from i on that is
// not a space or a tab.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// linkBelowInstance returns the Link value v with each link's target
// (its <URI-Reference>, RFC 8288 §3) below base, as belowInstance makes
// it, when one names it; a quoted parameter's "<" starts no target.
func linkBelowInstance(v string, base *url.URL) (string, bool) {
	var b []byte // nil until a target is rewritten
	last, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '<':
			n := strings.IndexByte(v[i+1:], '>')
			if n < 0 {
				i = len(v)
				break
			}
			if rel, ok := belowInstance(v[i+1:i+1+n], base); ok {
				b = append(append(b, v[last:i+1]...), rel...)
				last = i + 1 + n
			}
			i += n + 1
		}
	}
	if b == nil {
		return "", false
	}
	return string(append(b, v[last:]...)), true
}

// belowInstance returns loc as a path below base when loc is an absolute
// URL of base's scheme and host (compared whatever the case) under its
// base path, whole segments: "http://10.0.0.5:8000/prefix/orders/7/"
// below "http://10.0.0.5:8000/prefix/" is "/orders/7/". A path below it
// that starts with two slashes (or a slash and a backslash) is not one:
// as a relative reference it would name another host.
func belowInstance(loc string, base *url.URL) (string, bool) {
	rest, ok := cutPrefixFold(loc, base.Scheme+"://")
	if !ok {
		return "", false
	}
	if rest, ok = cutPrefixFold(rest, base.Host); !ok {
		return "", false
	}
	if p := strings.TrimSuffix(base.Path, "/"); p != "" {
		if !strings.HasPrefix(rest, p) {
			return "", false
		}
		rest = rest[len(p):]
	}
	switch {
	case rest == "":
		return "/", true
	case len(rest) > 1 && rest[0] == '/' && (rest[1] == '/' || rest[1] == '\\'):
		// As a relative reference "//evil.example/x" names another host
		// (and "/\evil.example/x" too, to a browser): kept as sent.
		return "", false
	case rest[0] == '/':
		return rest, true
	case rest[0] == '?' || rest[0] == '#':
		return "/" + rest, true
	}
	return "", false // a longer port, host or base path segment
}

// cutPrefixFold is strings.CutPrefix, the prefix compared whatever the
// case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !asciiEqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// canonicalNames returns names in canonical form, as http.Header keys
// them.
func canonicalNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return out
}

// moveHeader moves every field of from, the backend's response header,
// that out, the client's answer's, does not have yet into out, value
// slice and all, where ReverseProxy would copy each value after ModifyResponse
// (copyHeader: Header.Add, an allocation and a key check per value; a
// GET's Date, Content-Length and X-Request-Id were three allocations). It
// is what copyHeader makes of them: keys as the Transport read them are
// canonical already, and a field the answer has (exgate's own) is left in
// res.Header for copyHeader to add to, as before (so is a field without
// a value, which copyHeader leaves out). Nothing else holds the
// moved slices once they are out of res.Header (each the Transport's own,
// of capacity one per field or grown by append: an append to one never
// writes into another). A field hidden names (upstream.hide_headers, or
// nil once hide removed them) is removed, as hide does; a Location,
// Content-Location, Refresh or Link naming base, the instance that
// answered (nil: none), is rewritten first, as unexposeInstance does,
// moved or not. The Content-Type of an event stream stays too:
// ReverseProxy reads it from res.Header after the copy to flush the stream
// as it comes; any other moves, so that ReverseProxy finds none and parses
// none (mime.ParseMediaType's parameter map, an allocation per answer) and
// copies none.
func moveHeader(out, from http.Header, base *url.URL, hidden []string) {
	for k, v := range from {
		if slices.Contains(hidden, k) {
			delete(from, k)
			continue
		}
		if base != nil && len(v) > 0 && unexposed(k) {
			v = unexposeField(from, k, v, base)
		}
		if _, ok := out[k]; ok || len(v) == 0 || k == "Content-Type" && isEventStream(v[0]) {
			continue // copyHeader's to add to, nothing to copy, or read later
		}
		out[k] = v
		delete(from, k)
	}
}

// isEventStream reports whether ReverseProxy takes an answer of Content-Type
// ct for an event stream, which it flushes as it comes: ct's media type,
// lowercased as mime.ParseMediaType makes it, is text/event-stream
// (ReverseProxy.flushInterval). Nothing is allocated for a type in lower
// case, and a type shorter than that is not read: only ASCII letters
// lowercase to its ASCII, byte for byte.
func isEventStream(ct string) bool {
	const eventStream = "text/event-stream"
	base, _, _ := strings.Cut(ct, ";")
	if len(base) < len(eventStream) {
		return false
	}
	return strings.TrimSpace(strings.ToLower(base)) == eventStream
}

// answerWithID gives a response the backend sent without an X-Request-ID
// the one sent with its request (the client's own, once clientsID has
// given it back). It goes straight into the client's answer, whose header
// the reverse proxy copies the backend's into next: set on res, net/http
// would copy it again, into a slice of its own. sent is whether the backend
// sent the field (empty): it is removed from res then.
func answerWithID(st *requestState, res *http.Response, sent bool) {
	id := res.Request.Header["X-Request-Id"]
	if len(id) != 1 {
		return
	}
	if sent {
		delete(res.Header, "X-Request-Id") // an empty value of the backend's
	}
	st.rw.Header()["X-Request-Id"] = id // the outbound request's, never modified
}

// proxyError maps a failure to reach the backend to an answer: client gone
// → nothing (logged as 499), timeout → 504, body over the limit → 413,
// anything else → 502.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rw, ok := w.(*respWriter)
	if !ok { // cannot happen: the gateway always passes its own writer
		WriteError(w, "", errBadGateway)
		return
	}
	st := rw.st
	rw.endHints() // exgate's own fields back, after a 1xx
	if rw.interims > maxInterim {
		err = errTooManyInterim // the call cut for them (passInterim): context.Canceled, or this, its cause
	}
	st.upErr = err
	g.observeUpstream(st)
	g.settleFailed(st, err)
	st.abandoned = st.clientCx.Err() != nil
	if st.route != nil {
		st.route.metrics.UpstreamError(metrics.ClassifyUpstreamError(err, st.clientCx.Err() != nil))
	}
	switch {
	case st.clientCx.Err() != nil:
		rw.status = StatusClientClosed
	case nothingSent(st, err) && st.reached:
		// The last instance took no connection, but one before it read
		// the request and failed it: it was served, and its charge stays.
		g.refuse(st, r, sentFailed(r, errBadGateway, errWriteBadGateway))
	case nothingSent(st, err):
		// No instance took a connection: nothing of the request was
		// sent, and it costs its client nothing.
		g.unavailable(st, r, errUpstreamUnavailable)
	case metrics.IsTimeout(err):
		g.refuse(st, r, sentFailed(r, errGatewayTimeout, errWriteTimeout))
	case errors.As(err, new(brokenAnswer)):
		g.refuse(st, r, errOrderAnswerBroken)
	default:
		g.refuse(st, r, sentFailed(r, errBadGateway, errWriteBadGateway))
	}
}

// sentFailed returns the answer to r, sent to the backend and failed
// there: read for a read (GET, HEAD), write for anything else, whose
// outcome is unknown.
func sentFailed(r *http.Request, read, write *apierror.Error) *apierror.Error {
	if upstream.KindOf(r.Method) == upstream.Read {
		return read
	}
	return write
}

// observeUpstream records, once, how long the backend took to answer with
// headers or to fail.
func (g *Gateway) observeUpstream(st *requestState) {
	if st.upDone || st.upStart.IsZero() || st.route == nil {
		return
	}
	st.upDone = true
	st.upEnd = g.nowSince(st.upStart)
	st.upDur = st.upEnd.Sub(st.upStart)
	if st.rec {
		st.route.metrics.ObserveUpstreamTraced(st.upDur, st.span.SpanContext().TraceID())
		return
	}
	st.route.metrics.ObserveUpstream(st.upDur)
}
