package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
)

// What a replayed order's answer carries, and to whom it is replayed
// (docs/validation.md, "What a replay carries"). duplicate protection
// answers a retry of a placed order with the answer the backend gave the
// order, as Stripe's idempotency keys do, and never places it twice. That
// answer is kept with the headers about the order a client may read
// (recordedHeaders) and with what the order's Accept asked for
// (acceptAsked), as a cache keeps the request headers a response varies
// by. A retry whose Accept or Prefer asks for another representation
// than the one kept gets 406 not_acceptable (RFC 9110 §15.5.7), saying
// that the order was placed and what its answer is: never the
// representation it did not ask for, never a second order.

// recordedHeaders are the backend's answer headers kept and replayed with
// an order's answer (canonical names), besides Content-Type: headers
// about the order a client may read. Per-response headers (Date, Server,
// Content-Length, Age, the hop-by-hop ones), Set-Cookie (a session is
// not the order's), cache directives (a replay is no fresher than its
// first answer) and Vary (the replay is judged here, replayable) are
// not kept; nor is any other header, whose meaning exgate cannot know.
var recordedHeaders = [...]string{
	"Location", "Content-Location", "Content-Language", "Etag", "Last-Modified", "Link", "Preference-Applied",
}

// keptHeaders returns the recordedHeaders of h, an order's answer, as a
// Record keeps them (name and value pairs), or nil when it has none: an
// answer without them allocates nothing.
func keptHeaders(h http.Header) []string {
	var kept []string
	for _, name := range recordedHeaders {
		for _, v := range h[name] {
			kept = append(kept, name, v)
		}
	}
	return kept
}

// joined returns a header's values as one list, allocating only for a
// header sent on several lines.
func joined(vs []string) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

// sentAccept returns the Accept of the order res answers, as the backend
// received it (the client's).
func sentAccept(res *http.Response) string {
	if res.Request == nil {
		return ""
	}
	return joined(res.Request.Header["Accept"])
}

// acceptAsked returns what a Record keeps of accept, the Accept of an
// order whose answer has Content-Type ct: "" when it asked for nothing
// particular (no Accept, no Content-Type, or a range taking ct with no
// parameter), the range that took ct when it has parameters (DRF's
// AcceptHeaderVersioning reads the API version from them:
// "application/json; version=2.0"), else the whole Accept (the backend
// answered in a type the order did not ask for: it disregards Accept).
func acceptAsked(accept, ct string) string {
	if strings.TrimSpace(accept) == "" || ct == "" {
		return ""
	}
	rng, params, ok := bestRange(accept, ct)
	switch {
	case ok && params == "":
		return ""
	case ok:
		return rng
	}
	return accept
}

// acceptable reports whether a retry whose Accept is accept asks for the
// answer rec: rec has no Content-Type, or accept is the order's own, or
// it takes rec's Content-Type with the same parameters as the order's
// range did (a version of the API) — a range that takes it with a q of 0
// does not.
func acceptable(accept string, rec *idempotency.Record) bool {
	if rec.ContentType == "" || accept == rec.Accept {
		return true
	}
	_, params, ok := bestRange(accept, rec.ContentType)
	if !ok {
		return false
	}
	_, asked, _ := bestRange(rec.Accept, rec.ContentType)
	return sameParams(params, asked)
}

// bestRange returns the media range of accept that most specifically
// takes the media type of ct (type/subtype > type/* > */*, the first of
// equals), and its parameters before any q. ok is false when none takes
// it, or the one that does has a q of 0. An empty accept takes anything
// (RFC 9110 §12.5.1).
func bestRange(accept, ct string) (rng, params string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return "", "", true
	}
	mt, _, _ := strings.Cut(ct, ";")
	typ, sub, _ := strings.Cut(strings.TrimSpace(mt), "/")
	best, bestQ0 := 0, false
	for accept != "" {
		var el string
		el, accept, _ = strings.Cut(accept, ",")
		el = strings.TrimSpace(el)
		m, ps, _ := strings.Cut(el, ";")
		t, s, _ := strings.Cut(strings.TrimSpace(m), "/")
		t, s = strings.TrimSpace(t), strings.TrimSpace(s)
		spec := 0
		switch {
		case t == "*" && s == "*":
			spec = 1
		case asciiEqualFold(t, typ) && s == "*":
			spec = 2
		case asciiEqualFold(t, typ) && asciiEqualFold(s, sub):
			spec = 3
		}
		if spec <= best {
			continue
		}
		p, end, q0 := beforeQ(ps)
		best, bestQ0, params = spec, q0, p
		rng = el[:len(el)-len(ps)+end]
	}
	if best == 0 || bestQ0 {
		return "", "", false
	}
	return strings.TrimRight(strings.TrimSpace(rng), "; "), params, true
}

// beforeQ returns the media-range parameters ps up to its q parameter
// (what follows q is accept-ext, RFC 9110 §12.5.1), trimmed, where in ps
// they end, and whether q is 0.
func beforeQ(ps string) (params string, end int, q0 bool) {
	rest := ps
	for rest != "" {
		var p string
		start := len(ps) - len(rest)
		p, rest, _ = strings.Cut(rest, ";")
		name, v, _ := strings.Cut(p, "=")
		if asciiEqualFold(strings.TrimSpace(name), "q") {
			v = strings.TrimRight(strings.TrimSpace(v), "0")
			return strings.TrimSpace(strings.TrimRight(ps[:start], "; ")), start, v == "0." || v == "" || v == "0"
		}
	}
	return strings.TrimSpace(ps), len(ps), false
}

// sameParams reports whether two media-range parameter lists are the
// same: in the same order, names alike in any case, values alike once
// unquoted, spaces around them ignored.
func sameParams(a, b string) bool {
	for a != "" || b != "" {
		var pa, pb string
		pa, a, _ = strings.Cut(a, ";")
		pb, b, _ = strings.Cut(b, ";")
		na, va, _ := strings.Cut(pa, "=")
		nb, vb, _ := strings.Cut(pb, "=")
		if !asciiEqualFold(strings.TrimSpace(na), strings.TrimSpace(nb)) ||
			strings.Trim(strings.TrimSpace(va), `"`) != strings.Trim(strings.TrimSpace(vb), `"`) {
			return false
		}
	}
	return true
}

// returnApplied returns the return preference (RFC 7240 §4.2: minimal or
// representation) a kept answer says it applied in Preference-Applied,
// or "".
func returnApplied(rec *idempotency.Record) string {
	for i := 0; i+1 < len(rec.Header); i += 2 {
		if rec.Header[i] == "Preference-Applied" {
			if v := preference(rec.Header[i+1], "return"); v != "" {
				return v
			}
		}
	}
	return ""
}

// preference returns the value of the preference name in a Prefer (or
// Preference-Applied) list, or "".
func preference(list, name string) string {
	for list != "" {
		var p string
		p, list, _ = strings.Cut(list, ",")
		p, _, _ = strings.Cut(p, ";") // its parameters
		n, v, _ := strings.Cut(p, "=")
		if asciiEqualFold(strings.TrimSpace(n), name) {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// replayRefusal is the answer to a retry of a placed order that does not
// ask for its kept answer rec, or nil when it does: its Accept takes
// rec's Content-Type as the order's did (acceptable), and, when rec
// applied a return preference (Preference-Applied: return=minimal), its
// Prefer asks for the same. A backend that ignores Prefer (Django REST
// framework does) says nothing of it, and its answers replay whatever a
// retry prefers.
func replayRefusal(h http.Header, rec *idempotency.Record) *apierror.Error {
	if !acceptable(joined(h["Accept"]), rec) {
		return notAcceptable("this request's Accept does not take " + quoted(rec.ContentType) +
			"; retry with an Accept that does to receive it, or read the order from the exchange")
	}
	if ret := returnApplied(rec); ret != "" && !asciiEqualFold(preference(joined(h["Prefer"]), "return"), ret) {
		return notAcceptable("it applied Prefer: return=" + bounded(ret) +
			", which this request does not ask for; retry with that preference to receive it, or read the order from the exchange")
	}
	return nil
}

// notAcceptable is the 406 answer to a retry of a placed order whose kept
// answer it does not ask for.
func notAcceptable(why string) *apierror.Error {
	return apierror.New(http.StatusNotAcceptable, "not_acceptable",
		"This order was already placed, and its answer was kept for retries, but "+why+".")
}

// bounded cuts s, a value of the backend's, to a length fit for a
// detail.
func bounded(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

// quoted is bounded(s) quoted, for a detail.
func quoted(s string) string { return strconv.Quote(bounded(s)) }

// replay answers with the response recorded for an identifier, with the
// headers kept with it, and returns answered; a retry that does not ask
// for that response is refused (replayRefusal).
func (g *Gateway) replay(st *requestState, r *http.Request, rec *idempotency.Record) *apierror.Error {
	if e := replayRefusal(r.Header, rec); e != nil {
		g.metrics.Idempotency(metrics.IdempotencyNotAcceptable)
		return e
	}
	g.metrics.Idempotency(metrics.IdempotencyReplayed)
	h := st.rw.Header()
	if rec.ContentType != "" {
		h["Content-Type"] = []string{rec.ContentType}
	}
	for i := 0; i+1 < len(rec.Header); i += 2 {
		h[rec.Header[i]] = append(h[rec.Header[i]], rec.Header[i+1])
	}
	h["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	h[idempotency.ReplayedHeader] = []string{"true"}
	h["X-Request-Id"] = []string{st.id}
	st.replayed = true
	st.rw.WriteHeader(rec.Status)
	_, _ = st.rw.Write(rec.Body)
	return answered
}
