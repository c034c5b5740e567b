package proxy

import (
	"io"
	"net/http"
	"sync"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/validate"
)

// orderState is what the order check found of one order request, kept
// in its requestState.
type orderState struct {
	identifier string // the order's identifier, or ""
	canonical  []byte // the canonical body forwarded, whose fingerprint a claim records
	rejected   bool   // checkOrder refused the body as invalid (counted once it is the answer)
}

// bodyPool holds the buffers request bodies are read into (readChunks):
// an order's fits in one (validation.max_body_bytes, 8 KiB by default).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// errBodyUnreadable answers a body the client broke off.
var errBodyUnreadable = apierror.Static(http.StatusBadRequest, "invalid_body", "Request body could not be read.")

// checkOrder reads an order's body whole and validates it. The request's
// body becomes the order's canonical encoding (forwardCanonical), the
// only form the backend receives and the one duplicate protection
// fingerprints. A body refused as invalid is marked (orderState.rejected)
// and counted by countInvalid once its refusal is the answer: a limit's
// refusal comes first.
func (g *Gateway) checkOrder(st *requestState, r *http.Request, v *validate.Validator) *apierror.Error {
	if e := v.PreCheck(r.Header["Content-Type"], r.ContentLength); e != nil {
		st.order.rejected = true
		return e
	}
	tooLarge := v.TooLarge()
	body, e := g.readWhole(st, r, v.MaxBodyBytes(), tooLarge)
	if e != nil {
		if e == tooLarge {
			st.order.rejected = true
		}
		return e
	}
	var order validate.Order
	if e := v.CheckInto(&order, r.Header["Content-Type"], body); e != nil {
		st.order.rejected = true
		return e
	}
	st.order.identifier = order.Identifier
	st.order.canonical = forwardCanonical(st, r, &order, len(body))
	return nil
}

// countInvalid counts e, the answer to a request, when it refuses an
// invalid order.
func (g *Gateway) countInvalid(st *requestState, e *apierror.Error) {
	if st.order.rejected {
		g.metrics.ValidationRejected(e.Code)
	}
}

// readChunks reads r into st's pooled buffers (bodyPool: the first is
// st.bodyBuf, the others st.bodyMore), at most max bytes, each
// filled before the next is taken: a body held whole takes the memory of
// the bytes that have arrived, in buffers of a few KiB that go back to
// the pool, never what its Content-Length promises and never a buffer
// grown by copies. tooBig reports a body longer than max; n is how many
// bytes were read.
func (st *requestState) readChunks(r io.Reader, max int64) (n int64, tooBig bool, err error) {
	if r == nil || r == http.NoBody {
		return 0, false, nil
	}
	cur := st.bodyBuf
	for {
		if n >= max {
			tooBig, err := probeEnd(r)
			return n, tooBig, err
		}
		if len(*cur) == cap(*cur) {
			cur = bodyPool.Get().(*[]byte)
			*cur = (*cur)[:0]
			st.bodyMore = append(st.bodyMore, cur)
		}
		b := *cur
		k, err := r.Read(b[len(b):min(cap(b), len(b)+int(max-n))])
		*cur = b[:len(b)+k]
		n += int64(k)
		if err == io.EOF {
			return n, false, nil
		}
		if err != nil {
			return n, false, err
		}
	}
}

// probeEnd reads r, at the limit of its body, for one byte more: true
// when there is one (the body is too big), false at its end; or the error
// the read failed with.
func probeEnd(r io.Reader) (bool, error) {
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		switch {
		case n == 1:
			return true, nil
		case err == io.EOF:
			return false, nil
		case err != nil:
			return false, err
		}
	}
}

// wholeBody returns the n bytes readChunks read: the first buffer itself
// when they fit in it (pooled: st's until releaseBodyBuffers), else a buffer of
// their own holding them all (pooled false), and gives the buffers past
// the first back to the pool.
func (st *requestState) wholeBody(n int64) (body []byte, pooled bool) {
	first := *st.bodyBuf
	if int64(len(first)) == n {
		body, pooled = first, true // a buffer taken for the end of file is empty
	} else {
		body = make([]byte, 0, n)
		body = append(body, first...)
	}
	for _, bp := range st.bodyMore {
		if !pooled {
			body = append(body, *bp...)
		}
		putBody(bp)
	}
	clear(st.bodyMore)
	st.bodyMore = st.bodyMore[:0]
	return body, pooled
}

func putBody(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		bodyPool.Put(bp)
	}
}

// releaseBodyBuffers returns the buffers of a body read whole (the client's
// bytes) to their pool; the backend is sent a buffer of its own (an
// order's canonical body, or a copy).
func (st *requestState) releaseBodyBuffers() {
	if bp := st.bodyBuf; bp != nil {
		st.bodyBuf = nil
		putBody(bp)
	}
	for _, bp := range st.bodyMore {
		putBody(bp)
	}
	st.bodyMore = nil
}
