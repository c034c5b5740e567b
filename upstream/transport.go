package upstream

import (
	"net"
	"net/http"
	"time"

	"github.com/exgate/exgate/config"
)

// NewTransport returns the Transport to the backends: net/http's, the one
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
// closes as far as the backend lets it: see the proxy's checkResponseID
// and closeAfterHead.
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
