package proxy

import (
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
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
// policy — and without an X-Request-ID (a 1xx is never checked against its
// request; the final answer is: checkResponseID), beside exgate's own
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
}

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
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
	}
	for k := range h {
		if isHopByHop(k) {
			delete(h, k)
		}
	}
}
