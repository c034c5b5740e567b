package proxy

import (
	"bytes"
	"net/http"

	"github.com/exgate/exgate/validate"
)

// canonicalInline is how many bytes of an order's canonical encoding a
// canonicalBody holds in itself: with its reader, one allocation of 192
// bytes (a size class of Go's allocator), room for a usual limit order
// with an identifier; as many bytes as the encoding and its reader took
// in two allocations before.
const canonicalInline = 192 - 40 // 40: the size of a bytes.Reader

// canonicalBody is an order's canonical encoding and the reader the
// transport reads it through, allocated together: one allocation where
// the bytes and the reader took two. It is the transport's once
// forwarded (forwardBody), never pooled.
type canonicalBody struct {
	rd  bytes.Reader
	buf [canonicalInline]byte
}

// forwardCanonical makes the request carry the canonical encoding of the
// validated order o instead of the client's bytes (n of them), and
// returns it: the backend then reads the order exgate checked, whatever
// its JSON parser and charset handling (validate.Order.AppendCanonical).
// The client's buffer goes back to the pool; the canonical body is a
// buffer of its own, handed to the transport (forwardBody), which may
// still read it after the gateway has answered. Content-Type becomes
// exactly application/json, Content-Length the canonical length, and
// Content-Encoding and Transfer-Encoding are dropped (the canonical body
// is neither), as are the headers that describe the client's bytes
// (bodyDescribing).
func forwardCanonical(st *requestState, r *http.Request, o *validate.Order, n int) []byte {
	if n > canonicalInline { // the canonical encoding is about as long as the client's
		body := o.AppendCanonical(make([]byte, 0, n+64))
		return forwardEncoded(st, r, bytes.NewReader(body), body)
	}
	cb := new(canonicalBody)
	body := o.AppendCanonical(cb.buf[:0]) // a longer encoding than foreseen moves out of buf
	cb.rd.Reset(body)
	return forwardEncoded(st, r, &cb.rd, body)
}

// forwardEncoded makes body, a buffer of its own read through rd (a
// reader of body from its start), the request's body in place of the
// client's bytes (whose buffer goes back to the pool), with the headers
// of a canonical JSON body, and returns it.
func forwardEncoded(st *requestState, r *http.Request, rd *bytes.Reader, body []byte) []byte {
	st.releaseBodyBuffers() // the client's bytes
	forwardReader(r, rd, st.noDrops)
	st.sentBody = body
	h := r.Header
	h["Content-Type"] = jsonContentType // shared; ReverseProxy copies the header
	delete(h, "Content-Length")
	if !st.plainBody { // the head has such headers, or was not scanned
		for _, k := range bodyDescribing {
			delete(h, k)
		}
	}
	return body
}

// bodyDescribing are the headers that describe a request's body bytes:
// its encoding, its digest, or a range of it. They describe the client's
// bytes, not the canonical body forwarded in their place, so a backend
// that checks them would refuse every re-encoded order and one that
// trusts them would record what it did not receive.
var bodyDescribing = []string{"Content-Encoding", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Content-Range"}

// isBodyDescribing reports whether name is one of bodyDescribing, for
// scanHeader: a request whose head has none is forwarded in canonical
// form without looking each up.
func isBodyDescribing(name string) bool {
	switch name {
	case "Content-Encoding", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Content-Range":
		return true
	}
	return false
}
