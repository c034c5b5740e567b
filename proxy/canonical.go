package proxy

import (
	"net/http"

	"github.com/exgate/exgate/validate"
)

// forwardCanonical makes the request carry the canonical encoding of the
// validated order o instead of the client's bytes, and returns it: the
// backend then reads the order exgate checked, whatever its JSON parser
// and charset handling (validate.Order.AppendCanonical). The client's
// buffer goes back to the pool; the canonical body is a buffer of its own,
// handed to the transport (forwardBody), which may still read it after the
// gateway has answered. Content-Type becomes exactly application/json,
// Content-Length the canonical length, and Content-Encoding and
// Transfer-Encoding are dropped (the canonical body is neither), as are
// the headers that describe the client's bytes (bodyDescribing).
func forwardCanonical(st *requestState, r *http.Request, o *validate.Order) []byte {
	return forwardEncoded(st, r, o.AppendCanonical(make([]byte, 0, max(r.ContentLength, 0)+64)))
}

// forwardEncoded makes body, a buffer of its own, the request's body in
// place of the client's bytes (whose buffer goes back to the pool), with
// the headers of a canonical JSON body, and returns it.
func forwardEncoded(st *requestState, r *http.Request, body []byte) []byte {
	st.releaseBodyBuffers() // the client's bytes
	forwardBody(r, body)
	st.sentBody = body
	h := r.Header
	h["Content-Type"] = jsonContentType // shared; ReverseProxy copies the header
	delete(h, "Content-Length")
	delete(h, "Content-Encoding")
	for _, k := range bodyDescribing {
		delete(h, k)
	}
	return body
}

// bodyDescribing are the headers that describe a request's body bytes
// (their digest, or a range of them): they describe the client's bytes,
// not the canonical body forwarded in their place, so a backend that
// checks them would refuse every re-encoded order and one that trusts
// them would record what it did not receive.
var bodyDescribing = []string{"Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Content-Range"}
