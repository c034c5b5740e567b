package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"reflect"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// errForeignResponse is the error of a backend response that carries
// another request's X-Request-ID. It is answered 502 and its connection
// is not reused (ReverseProxy closes the body unread).
var errForeignResponse = errors.New("exgate upstream: the response carries another request's X-Request-ID (the backend's connection is out of step)")

// checkResponseID refuses a response whose X-Request-ID is not the one
// exgate sent with the request. exgate sends every request with an
// X-Request-ID; a backend that echoes it lets exgate prove each answer
// belongs to its request, so that a response a backend sent unasked on a
// keep-alive connection (and read as the answer to the next request on it)
// reaches no client. got is the response's X-Request-ID values; a
// response without the header is not checked. The gateway checks every
// response unless upstream.check_response_id is off.
func checkResponseID(res *http.Response, got []string) error {
	if len(got) == 0 || res.Request == nil {
		return nil
	}
	sent := res.Request.Header["X-Request-Id"]
	if len(got) != 1 || len(sent) != 1 || got[0] != sent[0] {
		return errForeignResponse
	}
	return nil
}

// unhideResponseID takes X-Request-ID out of the tokens of a backend
// response's Connection header, so that the header stays for
// checkResponseID: ReverseProxy strips every header Connection names
// before ModifyResponse, and a backend naming X-Request-ID there would
// otherwise slip an answer with another request's id past the check (an
// answer without the header is not checked). The id then reaches the
// client as any checked one does (the request's own; the client's, by
// clientsID). It changes nothing, and allocates nothing, for a response
// whose Connection does not name it.
func unhideResponseID(h http.Header) {
	vs := h["Connection"]
	for i := range vs {
		if !httpguts.HeaderValuesContainsToken(vs[i:i+1], "X-Request-Id") {
			continue
		}
		var kept []string
		for t := range connectionOptions(vs[i : i+1]) {
			if !asciiEqualFold(t, "x-request-id") {
				kept = append(kept, t)
			}
		}
		vs[i] = strings.Join(kept, ", ")
	}
}

// errInvalidStatus is the error of a backend response whose status code
// HTTP does not define.
var errInvalidStatus = errors.New("exgate upstream: the response's status code is outside 100-599")

// checkStatus refuses a response whose status code is outside 100-599.
// net/http's Transport reads any three digits; RFC 9110 §15 has a client
// treat such a code as a server error, and net/http's server panics on
// one below 100. exgate answers 502, and a claimed order's outcome is
// unknown, as after any response it cannot pass on.
func checkStatus(res *http.Response) error {
	if res.StatusCode < 100 || res.StatusCode > 599 {
		return errInvalidStatus
	}
	return nil
}

// closeAfterHead asks the backend to close the connection after its answer
// to a HEAD request. A HEAD answer has no body, yet backends that frame it
// wrongly send one; on a connection that stays open those bytes would be
// read as the start of the next request's response. HEAD is rare on a
// trading API, so the new connection it costs is cheap.
func closeAfterHead(out *http.Request) {
	if out.Method == http.MethodHead {
		out.Close = true
	}
}

// replayHeaders are the headers whose presence in a request's header map
// net/http's Transport takes as leave to send the request again
// (Request.isReplayable, golang.org/issue/19943): on a kept-alive
// connection that fails after the request was written and before the
// answer's first byte — a backend worker killed or recycled with the
// request read — it resends a bodyless request carrying either one on a
// new connection, whatever its method.
// Each is listed with the lower-case name keepFromReplay sends it under.
var replayHeaders = [...][2]string{
	{"Idempotency-Key", "idempotency-key"},
	{"X-Idempotency-Key", "x-idempotency-key"},
}

// keepFromReplay returns the name under which the client's field k, one
// of replayHeaders, goes to the backend on a request that is not safe to
// repeat (any method but GET, HEAD, OPTIONS and TRACE: safeMethod): its
// lower-case name. It keeps net/http's Transport from sending such a
// request again: exgate never sends a request that may have reached the
// backend twice (fleetTransport, retryable), and a client's header says
// nothing of what the backend does with a repeat (a cancel of all orders
// sent again cancels the ones placed meanwhile). The Transport's check,
// an exact look-up of the canonical name, does not find the lower-case
// one: HTTP/1 writes names as they are in the map, HTTP/2 in lower case,
// and field names are case-insensitive (RFC 9110 §5.1), so the backend
// reads the same field.
func keepFromReplay(k string) string {
	for _, name := range replayHeaders {
		if name[0] == k {
			return name[1]
		}
	}
	return k
}

// forwardBody makes body, read whole and checked, the body of the request
// forwarded to the backend, sent with its Content-Length. body becomes the
// transport's: it must be the request's own buffer, never pooled or
// modified afterwards, since the transport may still be writing it after
// the gateway has answered. Its type, a *bytes.Reader behind io.NopCloser,
// is one net/http's Transport knows to be in memory, so it writes the
// request head and body in one flush — one write, one segment to the
// backend — instead of flushing the head first as it must for a body that
// might block (keepInMemoryBody keeps ReverseProxy from hiding the type).
// Expect: 100-continue is dropped: exgate already holds the whole body,
// and waiting for the backend's 100 would cost a round trip. GetBody stays
// nil: a body that can be rewound would make the request replayable, and
// an order is never sent twice.
func forwardBody(r *http.Request, body []byte) {
	forwardReader(r, bytes.NewReader(body), false)
}

// forwardReader is forwardBody of the body rd reads, from its start.
// noDrops is the request's requestState.noDrops: its head has neither
// Transfer-Encoding nor Expect, and they are not looked up.
func forwardReader(r *http.Request, rd *bytes.Reader, noDrops bool) {
	r.Body = http.NoBody
	if rd.Len() > 0 {
		r.Body = io.NopCloser(rd)
	}
	r.ContentLength = int64(rd.Len())
	r.TransferEncoding = nil
	if !noDrops {
		delete(r.Header, "Transfer-Encoding")
		delete(r.Header, "Expect")
	}
}

// inMemoryBodyType is the type of the bodies exgate reads whole before
// forwarding (forwardBody, for orders): io.NopCloser
// of a *bytes.Reader or *bytes.Buffer. The server's own request bodies are
// never of this type.
var inMemoryBodyType = reflect.TypeOf(io.NopCloser(bytes.NewReader(nil)))

// keepInMemoryBody forwards a body exgate read whole as it is.
// ReverseProxy wraps every outbound body in a reader of its own (so that
// the transport cannot close, or read after the handler returned, the
// server's request body); net/http's Transport does not know that type to
// be in memory and flushes the request head in a write of its own before
// the body. exgate's in-memory bodies are private copies, safe to read at
// any time, so they go out unwrapped, head and body in one write.
func keepInMemoryBody(pr *httputil.ProxyRequest) {
	if pr.Out.Body != nil && reflect.TypeOf(pr.In.Body) == inMemoryBodyType {
		pr.Out.Body = pr.In.Body
	}
}

// bufferPool is the ReverseProxy's pool of copy buffers. It holds each
// buffer by a pointer to its array, which an interface holds without an
// allocation (a slice would be boxed), in a sync.Pool: each processor
// takes and gives back buffers of its own, where a channel's one lock
// went from core to core with every response.
type bufferPool struct{ p *sync.Pool }

// proxyBufSize is the size of a copy buffer.
const proxyBufSize = 32 << 10

func newBufferPool() bufferPool { return bufferPool{p: new(sync.Pool)} }

// Get returns a buffer from the pool or a new one.
func (p bufferPool) Get() []byte {
	if b, ok := p.p.Get().(*[proxyBufSize]byte); ok {
		return b[:]
	}
	return make([]byte, proxyBufSize)
}

// Put returns a buffer to the pool; one of another size is dropped.
func (p bufferPool) Put(b []byte) {
	if cap(b) != proxyBufSize {
		return
	}
	p.p.Put((*[proxyBufSize]byte)(b[:proxyBufSize]))
}
