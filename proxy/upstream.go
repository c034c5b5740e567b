package proxy

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/exgate/exgate/config"
)

// NewTransport returns the Transport to the backend: net/http's, the one
// HTTP client exgate forwards with, tuned for a gateway: a keep-alive pool
// sized for hundreds of concurrent requests, bounded dials, no transparent
// compression (bodies pass through byte for byte) and no HTTP proxy from
// the environment.
//
// net/http's Transport reads every connection while it is idle and closes
// one on which the backend sends bytes no request asked for, closes a
// connection after a response that asked to close it (bytes after it are
// never read), reads 1xx responses as informational, never takes a HEAD
// answer's body as the next response's start, and never reuses a
// connection whose request was not written whole, so a response sent
// before the request body was read cannot be taken for the next
// request's. What HTTP/1.1 leaves open — a stray response that arrives in
// the instant a reused connection carries a new request — the gateway
// closes as far as the backend lets it: see checkResponseID and
// closeAfterHead.
func NewTransport(u config.Upstream) *http.Transport {
	d := &net.Dialer{Timeout: u.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		MaxIdleConns:           u.MaxIdleConns,
		MaxIdleConnsPerHost:    u.MaxIdleConns,
		MaxConnsPerHost:        u.MaxConnsPerHost,
		IdleConnTimeout:        u.IdleConnTimeout,
		TLSHandshakeTimeout:    5 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     true,
		ForceAttemptHTTP2:      true,
		WriteBufferSize:        16 << 10,
		ReadBufferSize:         16 << 10,
	}
}

// errForeignResponse is the error of a backend response that carries
// another request's X-Request-ID. It is answered 502 and its connection
// is not reused (ReverseProxy closes the body unread).
var errForeignResponse = errors.New("exgate upstream: the response carries another request's X-Request-ID (the backend's connection is out of step)")

// checkResponseID refuses a response whose X-Request-ID is not the one
// exgate sent with the request. exgate sends every request with an
// X-Request-ID; a backend that echoes it lets exgate prove each answer
// belongs to its request, so that a response a backend sent unasked on a
// keep-alive connection (and read as the answer to the next request on it)
// reaches no client. A response without the header is not checked.
func checkResponseID(res *http.Response) error {
	got := res.Header["X-Request-Id"]
	if len(got) == 0 || res.Request == nil {
		return nil
	}
	sent := res.Request.Header["X-Request-Id"]
	if len(got) != 1 || len(sent) != 1 || got[0] != sent[0] {
		return errForeignResponse
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
