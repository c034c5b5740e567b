package edge

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// NewServer returns the traffic server for h with the configured timeouts
// and header limit. net/http reads a header block of up to twice
// server.max_header_bytes (headerReadLimit); the gateway answers one over
// the limit with its JSON 431. net/http itself refuses a request whose
// headers exceed twice the limit by more than 4 KiB (with a plain-text
// 431) and a request it cannot parse (plain-text 400); every other
// refusal is exgate's JSON.
//
// Served by ServeTraffic with certificates, it speaks HTTP/2 to clients
// that offer it (net/http's own, through ALPN) under server.http2's
// limits: the header list is bounded as an HTTP/1.1 request's headers are
// (net/http advertises the bound in SETTINGS_MAX_HEADER_LIST_SIZE), and
// every request goes through the same handler. m counts HTTP/2 protocol
// errors; it may be nil. When h has a ConnContext method (a
// *proxy.Gateway has), the server calls it for each connection it
// accepts: the gateway keeps there what it works out once per connection.
// net/http's own lines about client connections (failed handshakes,
// HTTP/2 connection errors, GOAWAYs received) go to log within a bound
// no client can flood past (serverLog).
func NewServer(cfg *config.Config, h http.Handler, log *zap.Logger, m *metrics.Edge) *http.Server {
	return newServer(cfg, h, log, m, time.Now, func(d time.Duration, f func()) { time.AfterFunc(d, f) })
}

// newServer is NewServer on the clock now, whose net/http log lines
// (serverLog) are summed up by timers after starts.
func newServer(cfg *config.Config, h http.Handler, log *zap.Logger, m *metrics.Edge,
	now func() time.Time, after func(time.Duration, func())) *http.Server {
	if log == nil {
		log = zap.NewNop()
	}
	errLog := newServerLog(log, now, after)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(cfg.Server.HTTP2.Enabled)
	srv := &http.Server{
		ConnContext: connContext(h),
		Protocols:   protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: cfg.Server.HTTP2.MaxConcurrentStreams,
			// HPACK's default table and frame sizes; a client cannot
			// make exgate hold more per connection than these.
			MaxDecoderHeaderTableSize: 4 << 10,
			MaxReadFrameSize:          16 << 10,
			// Flow-control windows: enough for an order body at once,
			// small enough that 100 streams cannot buffer much.
			MaxReceiveBufferPerStream:     64 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
			CountError:                    m.HTTP2Error,
		},
		Addr:                         cfg.Listen,
		Handler:                      h,
		ReadHeaderTimeout:            cfg.Server.ReadHeaderTimeout,
		ReadTimeout:                  cfg.Server.ReadTimeout,
		WriteTimeout:                 cfg.Server.WriteTimeout,
		IdleTimeout:                  cfg.Server.IdleTimeout,
		MaxHeaderBytes:               headerReadLimit(cfg.Server.MaxHeaderBytes),
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     errLog,
	}
	return srv
}

// connContext returns h's ConnContext method, or nil.
func connContext(h http.Handler) func(context.Context, net.Conn) context.Context {
	if cc, ok := h.(interface {
		ConnContext(context.Context, net.Conn) context.Context
	}); ok {
		return cc.ConnContext
	}
	return nil
}

// headerReadLimit is how large a header block net/http reads for the
// gateway to judge: twice server.max_header_bytes. net/http's HTTP/2
// server closes the whole connection, every other stream on it included,
// when a header block goes past its own bound over more than one frame
// (a CONTINUATION after the bound, or a fragment twice the room left),
// and answers an HTTP/1.1 request past it in plain text. With its bound
// above exgate's, a block between the two is read whole and answered
// 431 request_header_too_large on its own stream; only a block over
// twice the limit still ends the connection.
func headerReadLimit(limit config.ByteSize) int { return int(2 * limit) }

// ServeTraffic serves srv on ln: over TLS with the certificates certs
// chooses (HTTP/2 offered through ALPN when server.http2.enabled) when
// certs is not nil, else plain HTTP/1.1. A TLS handshake must finish
// within the smallest of the server's read-header, read and write
// timeouts (net/http's rule), so a client that stalls in the handshake
// holds a connection no longer than one that stalls in its headers.
func ServeTraffic(srv *http.Server, ln net.Listener, certs *Certificates) error {
	if certs == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = certs.TLSConfig()
	return srv.ServeTLS(ln, "", "")
}
