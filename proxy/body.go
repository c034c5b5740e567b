package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// Request bodies. Every request body is read whole by exgate before the
// request takes anything of the backend's — a backend slot, a connection,
// a worker of a backend that runs one per request — and is forwarded
// with its exact Content-Length, in one write with its head: a body that
// came chunked goes with its length (its canonical form), and a client
// that trickles its body holds only its own share of exgate's memory,
// never the backend's. An order body, single or bulk, is then validated
// and re-encoded; any other body goes as it came, byte for byte.
//
// Each body is bounded by its route's limit (server.max_body_bytes; an
// order's validation.max_body_bytes, a bulk's validation.bulk
// .max_body_bytes) and by a budget every client has a share of
// (server.max_buffered_bytes, a share.Pool), charged by the bytes that
// have arrived, never by what Content-Length promises (readWhole). A body
// of declared length over the limit is refused before any of it is read;
// one that grows past it, when its bytes arrive, with the same 413. A
// client that sends its body too slowly is cut by server.read_timeout,
// which bounds the whole request, and gets 408; one that breaks its body
// off gets 400. Either way the backend never hears of the request.

// Answers to a client whose body exgate could not read whole.
var (
	errBodyTimeout = apierror.Static(http.StatusRequestTimeout, "request_timeout",
		"Request body was not received within the server's read timeout.")
	errBufferBudget = apierror.Static(http.StatusServiceUnavailable, "server_busy",
		"The gateway holds as many of your request bodies as it may; retry shortly.", "Retry-After", "1")
)

// checkBody is the body step of a request that is not a bulk: an order
// route's body is read whole, validated and replaced by its canonical form
// (checkOrder); any other body is read whole within server.max_body_bytes
// and forwarded as it came (bufferBody).
func (g *Gateway) checkBody(st *requestState, r *http.Request, pl *requestPlan) *apierror.Error {
	if st.route.Config.Validate == config.ValidateOrd && pl.validator != nil {
		return g.checkOrder(st, r, pl.validator)
	}
	return g.bufferBody(st, r)
}

// bufferBody reads the body of a request that is not an order whole,
// within server.max_body_bytes and its client's share of the body budget
// (readWhole), and makes it the request's body with its exact length
// (forwardBody). The bytes forwarded are a copy of their own: the
// transport may still read them after the gateway has answered, while
// the pooled buffer they were read into goes back at once. A request
// without a body reads and allocates nothing. A form or JSON body that
// names a method override (bodyNamesMethod) is refused.
func (g *Gateway) bufferBody(st *requestState, r *http.Request) *apierror.Error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength > g.maxBody {
		return g.errBody
	}
	body, pooled, e := g.readWholeIn(st, r, g.maxBody, g.errBody)
	if e != nil {
		return e
	}
	if ct := r.Header["Content-Type"]; len(ct) > 0 && bodyNamesMethod(ct[0], body) {
		return errMethodOverride // a method override in a form or JSON body (methodParam)
	}
	if pooled && len(body) > 0 {
		body = bytes.Clone(body)
	}
	st.releaseBodyBuffers() // the pooled buffers: the client's bytes are copied
	forwardBody(r, body)
	st.sentBody = body
	return nil
}

// readWhole reads a request body whole into pooled buffers that st holds
// until finish (or until its bytes are copied or re-encoded; readChunks). Each read's
// bytes are charged to the client's share of the buffer budget as they
// arrive (chargedBody): a request holds only what its client has sent,
// never what its Content-Length promises. It refuses a body its client's
// share has no room for (503 server_busy), one over limit bytes with
// tooLarge, one that did not arrive within server.read_timeout (408
// request_timeout) and one the client broke off (400 invalid_body), each
// closing an HTTP/1 connection after the answer, since the rest of the
// body stays unread.
func (g *Gateway) readWhole(st *requestState, r *http.Request, limit int64, tooLarge *apierror.Error) ([]byte, *apierror.Error) {
	body, _, e := g.readWholeIn(st, r, limit, tooLarge)
	return body, e
}

// readWholeIn is readWhole, also reporting whether the body returned is a
// pooled buffer of st's (released with st.releaseBodyBuffers) rather than one
// of its own.
func (g *Gateway) readWholeIn(st *requestState, r *http.Request, limit int64, tooLarge *apierror.Error) ([]byte, bool, *apierror.Error) {
	charged := r.Body != nil && r.Body != http.NoBody
	if charged && !g.takeReadCharge(st) {
		closeAfterAnswer(st.rw.Header(), r)
		g.metrics.BodyBudgetExhausted()
		return nil, false, errBufferBudget
	}
	bp := bodyPool.Get().(*[]byte)
	*bp = (*bp)[:0]
	st.bodyBuf = bp
	st.bodyReader = chargedBody{rc: r.Body, st: st}
	n, tooBig, err := st.readChunks(&st.bodyReader, limit)
	st.bodyTaken = true
	if charged {
		g.giveReadCharge(st)
	}
	switch {
	case tooBig:
		closeAfterAnswer(st.rw.Header(), r)
		return nil, false, tooLarge
	case err == errShareFull:
		closeAfterAnswer(st.rw.Header(), r)
		g.metrics.BodyBudgetExhausted()
		return nil, false, errBufferBudget
	case err != nil:
		// The rest of the body, if any, stays unread.
		closeAfterAnswer(st.rw.Header(), r)
		if metrics.IsTimeout(err) {
			return nil, false, errBodyTimeout
		}
		return nil, false, errBodyUnreadable
	}
	body, pooled := st.wholeBody(n)
	return body, pooled, nil
}

// takeReadCharge charges config.BodyReadCharge to st's client's share of
// the body budget for a body about to be read (the memory a request
// waiting for its body holds before any byte of it: net/http's stream or
// connection, the handler's goroutine, exgate's state), reporting false
// when the share has no room for it. It is held, beside the bytes that
// arrive, until the read ends (giveReadCharge), so that a client that
// stalls its bodies holds its share's worth of them at most, however many
// it opens; a panic in the read leaves it in st.buffered, which finish
// gives back.
func (g *Gateway) takeReadCharge(st *requestState) bool {
	if !g.budget.Take(st.client, config.BodyReadCharge) {
		return false
	}
	st.buffered += config.BodyReadCharge
	return true
}

// giveReadCharge gives back the charge takeReadCharge took, once the read
// has ended: from there on the request waits on exgate and the backend
// (its limits, a slot), which their own shares bound, never on its client.
func (g *Gateway) giveReadCharge(st *requestState) {
	st.buffered -= config.BodyReadCharge
	g.budget.Give(st.client, config.BodyReadCharge)
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
		if !st.g.budget.Take(st.client, int64(n)) {
			return 0, errShareFull
		}
		st.buffered += int64(n)
	}
	return n, err
}
