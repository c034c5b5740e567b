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
// bulk limit) and by a budget shared by every request
// (server.max_buffered_bytes). Every other body streams
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
	failed atomic.Pointer[error] // the client's body failed: too large, too slow, broken
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
		"The gateway holds as many request bodies as it may; retry shortly.", "Retry-After", "1")
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
	st.body = &streamBody{rc: r.Body, max: g.maxBody}
	r.Body = st.body
	return nil
}

// bodyError is the answer to a request whose own body failed while it
// streamed to the backend, or nil when the failure was the backend's.
func (g *Gateway) bodyError(st *requestState) *apierror.Error {
	var tooBig *http.MaxBytesError
	switch err := st.body.err(); {
	case err == nil:
		return nil
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
// buffer that st holds until finish. It refuses a body the buffer budget
// has no room for (503 server_busy), one over limit bytes with tooLarge
// (closing the connection: the rest of the body stays unread), and one the
// client broke off (400 invalid_body).
func (g *Gateway) readWhole(st *requestState, r *http.Request, limit int64, tooLarge *apierror.Error) ([]byte, *apierror.Error) {
	if e := g.reserveBody(st, r, limit); e != nil {
		return nil, e
	}
	bp := bodyPool.Get().(*[]byte)
	st.order.body = bp
	body, tooBig, err := readBody((*bp)[:0], r.Body, limit)
	*bp = body[:0]
	st.bodyTaken = true
	switch {
	case tooBig:
		closeAfterAnswer(st.rw.Header(), r)
		return nil, tooLarge
	case err != nil:
		return nil, errBodyUnreadable
	}
	return body, nil
}

// reserveBody takes from the budget what reading r's body whole, up to
// limit bytes, may hold, or refuses the request 503 server_busy. finish
// gives it back.
func (g *Gateway) reserveBody(st *requestState, r *http.Request, limit int64) *apierror.Error {
	n := limit + 1
	if r.ContentLength >= 0 {
		n = min(n, r.ContentLength)
	}
	if !g.budget.reserve(n) {
		g.metrics.BodyBudgetExhausted()
		return errBufferBudget
	}
	st.buffered = n
	return nil
}

// bufferBudget bounds the bytes of request bodies held whole at once,
// across every request.
type bufferBudget struct {
	left atomic.Int64
}

// reserve takes n bytes of the budget, reporting false (and taking
// nothing) when fewer are left.
func (b *bufferBudget) reserve(n int64) bool {
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

// release gives n bytes back.
func (b *bufferBudget) release(n int64) { b.left.Add(n) }
