package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// Request bodies. An order body, single or bulk, is read whole (it is
// validated and re-encoded), bounded by validation.max_body_bytes (or the
// bulk limit) and by a budget every client has a share of
// (server.max_buffered_bytes, bufferBudget). Every other body streams
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

// bufferBudget bounds the bytes of request bodies held whole at once
// (server.max_buffered_bytes), and shares them between clients (a
// verified account, else an address) by a dynamic threshold, the scheme
// of shared-memory switch buffers (Choudhury and Hahne): a client may take
// bytes only while, once taken, it holds no more than are left free. A
// client alone holds at most half of the budget; n clients taking all
// they can hold at most 1/(n+1) of it each and leave as much free, so a
// client that holds nothing always finds room, and a client's excess is
// refused to it alone. Nothing is reserved ahead: bytes are taken as they
// arrive.
type bufferBudget struct {
	mu   sync.Mutex
	size int64
	used int64
	held map[clientKey]int64
}

func newBufferBudget(size int64) *bufferBudget {
	return &bufferBudget{size: size, held: make(map[clientKey]int64)}
}

// take charges n bytes to client c, reporting false (and taking nothing)
// when c's share has no room for them.
func (b *bufferBudget) take(c clientKey, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	free := b.size - b.used - n
	h := b.held[c] + n
	if free < 0 || h > free {
		return false
	}
	b.used += n
	b.held[c] = h
	return true
}

// give gives back n bytes client c took.
func (b *bufferBudget) give(c clientKey, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if h := b.held[c] - n; h > 0 {
		b.held[c] = h
	} else {
		delete(b.held, c)
	}
}

// Buffered returns the bytes held.
func (b *bufferBudget) Buffered() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Clients returns how many clients hold bytes.
func (b *bufferBudget) Clients() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}
