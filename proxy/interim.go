package proxy

import (
	"errors"
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
)

// A backend's 1xx answers (103 Early Hints) reach the client through
// ReverseProxy, which, for each, adds the 1xx's fields to the answer's
// header, writes the 1xx with it and clears it. exgate's own fields
// (RateLimit, CORS, a draining Connection: close) are in that header
// already; the 1xx's must not stay there: they passed none of the checks
// a final answer passes (hop-by-hop fields, CORS, X-Request-ID), and they
// are hints about the final answer (RFC 8297), never its fields — a 103's
// Content-Encoding: gzip on a final answer in the identity coding makes
// its body unreadable. So the header is kept as ReverseProxy first reads
// it for a 1xx (Header, own), each 1xx goes with its fields filtered as a
// final answer's are (hint), and the final answer gets exgate's own
// fields back, none of the 1xx's (endHints).

// maxInterim is how many 1xx answers a request's backend may send before
// its final answer: the bound Go's Transport kept itself until it left it
// to the hook that reads them (golang/go#65035), here ReverseProxy's,
// which passes every one on. One 103 Early Hints is the use; a backend
// past it is broken, and without the bound it had exgate write each of a
// flood to the client, parsing each within Transport.MaxResponseHeaderBytes
// of its own, until the route's timeout.
const maxInterim = 5

// errTooManyInterim is the error of a call cut for its 1xx answers
// (passInterim): answered 502, an order's outcome unknown.
var errTooManyInterim = errors.New("the backend sent more than " + strconv.Itoa(maxInterim) + " 1xx answers before its answer")

// passInterim counts a backend's 1xx answer, which ReverseProxy is about
// to write, and reports whether it goes to the client: not to an HTTP/1.0
// client (RFC 9110 §15.2: HTTP/1.0 defines no 1xx, and its client reads
// the first status line as the answer — "HTTP/1.0 103 Early Hints", the
// final answer after it taken for its body), and none past maxInterim,
// the first of which cuts the call with errTooManyInterim (its HTTP/1.1
// connection closed, its HTTP/2 stream reset; proxyError and
// modifyResponse answer it 502). ReverseProxy writes a 1xx only while its
// round trip is under way, under its own lock: before forward ends the
// call and drops cut.
func (w *respWriter) passInterim() bool {
	w.interims++
	if w.interims > maxInterim {
		if cut := w.st.cut; cut != nil && w.interims == maxInterim+1 {
			cut(errTooManyInterim)
		}
		return false
	}
	return !w.http10
}

// Header returns the answer's header. While the backend's answer is
// awaited (hinting), the first call is ReverseProxy's for a 1xx, about to
// add the 1xx's fields: the header is kept then (own), exgate's fields
// alone. ReverseProxy reads the header for a 1xx only while its round
// trip is under way, and nothing else of the request reads it meanwhile:
// the handler waits in the round trip, and endHints, which ends hinting,
// runs after it.
func (w *respWriter) Header() http.Header {
	h := w.ResponseWriter.Header()
	if w.hinting && w.own == nil {
		w.own = maps.Clone(h)
	}
	return h
}

// hint readies the header for a backend's 1xx, whose fields ReverseProxy
// has added to it (for a 1xx after the first, to the header it cleared):
// they go as a final answer's would — without hop-by-hop fields and those
// the 1xx's Connection names, without the backend's CORS fields under a
// policy, without those of upstream.hide_headers (hide), with a Link or
// Location naming the instance as the path below it (unexposeInstance) — and without an
// X-Request-ID (a 1xx is never checked against its request; the final
// answer is: checkResponseID), beside exgate's own
// fields but Connection (draining's close, kept for the final answer:
// HTTP/2 forbids the field, and net/http's HTTP/2 server takes it out of
// a final answer only). A value the 1xx shares with exgate's own field is
// appended to a copy, never to exgate's slice.
func (w *respWriter) hint() {
	h := w.ResponseWriter.Header()
	own := w.own
	if own == nil { // cannot happen: ReverseProxy reads the header before it adds a 1xx's fields
		own = http.Header{}
		w.own = own
	}
	fields := make(http.Header, len(h))
	for k, v := range h {
		if o := own[k]; len(o) <= len(v) && slices.Equal(o, v[:len(o)]) {
			v = v[len(o):]
		}
		if len(v) > 0 {
			fields[k] = v
		}
	}
	dropHopByHop(fields)
	delete(fields, "X-Request-Id")
	w.st.g.hide(fields)
	if base := w.st.instanceURL(); base != nil {
		unexposeInstance(fields, base) // a 103's Link (preload) names the instance as a final answer's would
	}
	if w.st.plan != nil && w.st.plan.cors != nil {
		dropBackendCORS(fields)
	}
	clear(h)
	for k, v := range own {
		if k != "Connection" {
			h[k] = v
		}
	}
	for k, v := range fields {
		h[k] = append(h[k][:len(h[k]):len(h[k])], v...)
	}
	h["Content-Length"] = interimCopy
}

// interimCopy is the Content-Length a 1xx's header is written with (hint),
// so that net/http's HTTP/2 server writes a copy of it: it writes a 1xx's
// header map itself unless the map holds a Content-Length or
// Transfer-Encoding, which it takes out of a copy — and when the client
// resets its stream meanwhile, it returns before the frame is encoded,
// which a write too large for the connection's buffer does on a goroutine
// of its own. ReverseProxy then clears the map, and exgate's next 1xx or
// endHints writes it, while that goroutine reads it: a concurrent map
// write and iteration, a fatal error of the runtime that no recover
// catches, the whole process ended by one client's RST_STREAM
// (TestInterimHTTP2ClientReset under -race). HTTP/1's server writes a
// 1xx before it returns, never its Content-Length; ReverseProxy's clear
// takes it out of the header after. Shared, never modified.
var interimCopy = []string{"0"}

// endHints ends the time in which the backend may send a 1xx: its final
// answer, or its failure, has come. The header gets back exgate's own
// fields, which ReverseProxy cleared after each 1xx, and none of the
// 1xx's, before anything reads it for the final answer (modifyResponse,
// proxyError; WriteHeader as the last resort). It does nothing after the
// first call, nor for an answer no 1xx preceded.
func (w *respWriter) endHints() {
	if !w.hinting {
		return
	}
	w.hinting = false
	h := w.ResponseWriter.Header()
	for k, v := range w.own {
		if _, ok := h[k]; !ok {
			h[k] = v
		}
	}
}

// dropHopByHop removes from h, a backend's 1xx's fields, what ReverseProxy
// removes from a final answer: the fields its Connection names, and the
// hop-by-hop fields.
func dropHopByHop(h http.Header) {
	for name := range connectionOptions(h["Connection"]) {
		delete(h, textproto.CanonicalMIMEHeaderKey(name))
	}
	for k := range h {
		if isHopByHop(k) {
			delete(h, k)
		}
	}
}
