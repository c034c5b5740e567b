package proxy

import (
	"bytes"
	"net/http"

	"github.com/exgate/exgate/validate"
)

// forwardCanonical makes the request carry the canonical encoding of the
// validated order o instead of the client's bytes, and returns it: the
// backend then reads the order exgate checked, whatever its JSON parser
// and charset handling (validate.Order.AppendCanonical). The body is
// written into a pooled buffer, the client's buffer goes back to the
// pool; Content-Type becomes exactly application/json, Content-Length
// the canonical length, and Content-Encoding and Transfer-Encoding are
// dropped (the canonical body is neither).
//
// The transport owns the body from here and closes it when done writing,
// which returns its buffer to the pool.
func forwardCanonical(ex *exchange, r *http.Request, o *validate.Order) []byte {
	cp := bodyPool.Get().(*[]byte)
	body := o.AppendCanonical((*cp)[:0])
	*cp = body[:0]
	ex.releaseOrder() // the client's bytes
	r.Body = &pooledBody{Reader: bytes.NewReader(body), bp: cp}
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	h := r.Header
	h["Content-Type"] = jsonContentType // shared; ReverseProxy copies the header
	delete(h, "Content-Length")
	delete(h, "Content-Encoding")
	delete(h, "Transfer-Encoding")
	return body
}
