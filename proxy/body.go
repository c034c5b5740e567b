package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// Request bodies. An order body, single or bulk, is read whole (it is
// validated and re-encoded), bounded by validation.max_body_bytes (or the
// bulk limit) and by a budget every client has a share of
// (server.max_buffered_bytes, a sharedPool). Every other body streams
// to the backend as it arrives: exgate holds no more of it than its copy
// buffer, whatever its size or however slowly it comes.
//
// A body of known length over server.max_body_bytes is refused before
// anything is forwarded. A body of unknown length (chunked) is counted as
// it streams; when it passes the limit, exgate stops reading, the
// upstream request is aborted and its connection closed before the
// body's end, so the backend sees a broken request — never a complete
// one — and the client gets 413. A client that sends its body too slowly
// is cut by server.read_timeout, which bounds the whole request, and gets
// 408; one that breaks its body off gets 400, and in both cases the
// backend again sees a broken request.

// streamBody is a request body on its way to the backend: it counts the
// bytes read, stops past max with *http.MaxBytesError, and remembers the
// first error of the client's body so that the answer blames the client,
// not the backend. The transport may still read it after the round trip
// has returned (it writes bodies from its own goroutine), so it is not
// part of the pooled requestState, and its failure is read atomically.
type streamBody struct {
	rc     io.ReadCloser
	n      int64 // read by the transport's one writer only
	max    int64
	length int64                 // the declared length, or -1 (chunked)
	failed atomic.Pointer[error] // the client's body failed: too large, too slow, broken; or it was shed
	// slot, when set, is the request's backend slot, taken once the
	// body has arrived whole: before the read that ends it returns, so
	// that the backend never has the whole request without it.
	slot *deferredSlot
}

func (b *streamBody) Read(p []byte) (int, error) {
	if e := b.failed.Load(); e != nil {
		return 0, *e
	}
	if room := b.max - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		err = &http.MaxBytesError{Limit: b.max}
		b.failed.Store(&err)
		return n - int(b.n-b.max), err
	}
	if err != nil && err != io.EOF {
		b.failed.Store(&err)
		return n, err
	}
	if b.slot != nil && (err == io.EOF || b.n == b.length) {
		slot := b.slot
		b.slot = nil
		if e := slot.take(); e != nil {
			b.failed.Store(&e)
			return 0, e
		}
	}
	return n, err
}

// err returns the error the client's body failed with, or nil.
func (b *streamBody) err() error {
	if b == nil {
		return nil
	}
	if e := b.failed.Load(); e != nil {
		return *e
	}
	return nil
}

func (b *streamBody) Close() error { return b.rc.Close() }

// Answers to a client whose body failed while it streamed.
var (
	errBodyTimeout = apierror.Static(http.StatusRequestTimeout, "request_timeout",
		"Request body was not received within the server's read timeout.")
	errBufferBudget = apierror.Static(http.StatusServiceUnavailable, "server_busy",
		"The gateway holds as many of your request bodies as it may; retry shortly.", "Retry-After", "1")
)

// streamBodyOf refuses a body of known length over the limit and wraps
// any other body in st's streamBody, counted as it goes to the backend.
func (g *Gateway) streamBodyOf(st *requestState, r *http.Request) *apierror.Error {
	switch {
	case r.ContentLength > g.maxBody:
		return g.errBody
	case r.Body == nil || r.Body == http.NoBody:
		return nil
	}
	st.body = &streamBody{rc: r.Body, max: g.maxBody, length: r.ContentLength}
	r.Body = st.body
	return nil
}

// bodyError is the answer to a request whose own body failed while it
// streamed to the backend, or was shed once it had arrived, or nil when
// the failure was the backend's.
func (g *Gateway) bodyError(st *requestState) *apierror.Error {
	var tooBig *http.MaxBytesError
	switch err := st.body.err(); {
	case err == nil:
		return nil
	case err == errSlotShed:
		return st.plan.admission.errShed
	case errors.As(err, &tooBig):
		return g.errBody
	case metrics.IsTimeout(err):
		return errBodyTimeout
	default:
		return errBodyUnreadable
	}
}

// checkBody is the body step of a request that is not a bulk: an order
// route's body is read whole, validated and replaced by its canonical form
// (checkOrder); any other body streams to the backend, within
// server.max_body_bytes (streamBodyOf).
func (g *Gateway) checkBody(st *requestState, r *http.Request, pl *plan) *apierror.Error {
	if st.route.Config.Validate == config.ValidateOrd && pl.validator != nil {
		return g.checkOrder(st, r, pl.validator)
	}
	return g.streamBodyOf(st, r)
}

// readWhole reads the body of an order or a bulk whole into a pooled
// buffer that st holds until finish. Each read's bytes are charged to the
// client's share of the buffer budget as they arrive (chargedBody): a
// request holds only what its client has sent, never what its
// Content-Length promises. It refuses a body its client's share has no
// room for (503 server_busy), one over limit bytes with tooLarge, and one
// the client broke off (400 invalid_body); the first two close an HTTP/1
// connection after the answer, since the rest of the body stays unread.
func (g *Gateway) readWhole(st *requestState, r *http.Request, limit int64, tooLarge *apierror.Error) ([]byte, *apierror.Error) {
	bp := bodyPool.Get().(*[]byte)
	st.order.body = bp
	st.bodyReader = chargedBody{rc: r.Body, st: st}
	body, tooBig, err := readBody((*bp)[:0], &st.bodyReader, limit)
	*bp = body[:0]
	st.bodyTaken = true
	switch {
	case tooBig:
		closeAfterAnswer(st.rw.Header(), r)
		return nil, tooLarge
	case err == errShareFull:
		closeAfterAnswer(st.rw.Header(), r)
		g.metrics.BodyBudgetExhausted()
		return nil, errBufferBudget
	case err != nil:
		return nil, errBodyUnreadable
	}
	return body, nil
}

// errShareFull is chargedBody's error for bytes its client's share of the
// budget has no room for.
var errShareFull = errors.New("proxy: the client's share of the body budget is full")

// chargedBody is a body being read whole, each read's bytes charged to
// the client's share of the buffer budget as they arrive; finish gives
// them back.
type chargedBody struct {
	rc io.Reader
	st *requestState
}

func (b *chargedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		st := b.st
		if !st.g.budget.take(st.client, int64(n)) {
			return 0, errShareFull
		}
		st.buffered += int64(n)
	}
	return n, err
}
