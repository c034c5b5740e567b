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

// ownPool returns how exgate's own requests to a service (its active
// health checks, the market catalogue's fetch) reach its instances: rt,
// when it is net/http's Transport a copy of it (its dials, its TLS, its
// protocols) with a pool of its own, one connection to each instance.
// In rt's pool they queued for the capped connections
// (upstream.max_conns_per_host) behind client traffic, first come, first
// served: with every connection held by reads a slow backend answers, a
// health check timed out and marked a healthy instance down, a surge
// every instance of the fleet (TestOwnRequestsBesideClientTraffic). Each
// such request is one at a time per instance, so one connection (beside
// the cap) serves it.
func ownPool(rt http.RoundTripper) http.RoundTripper {
	tr, ok := rt.(*http.Transport)
	if !ok {
		return rt
	}
	own := tr.Clone()
	own.MaxConnsPerHost, own.MaxIdleConnsPerHost, own.MaxIdleConns = 1, 1, 0
	return own
}
