package config

import "time"

// BodyReadCharge is what a request whose body is being read is charged of
// its client's share of server.max_buffered_bytes before its first byte,
// beside the bytes that arrive, until the read ends: about what such a
// request holds while its client sends nothing (22.8 KiB measured for an
// HTTP/2 stream: net/http's stream, the handler's goroutine and stack,
// exgate's pooled state), so that stalled bodies are bounded by the budget
// as bytes are, and one client's by its share (docs/pools.md).
const BodyReadCharge = 24 << 10

// Server holds the traffic listener's timeouts and size limits.
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response; it must exceed every route
	// timeout. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes is the largest request line plus headers accepted;
	// larger requests get 431. Default 16KiB.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// MaxBodyBytes is the largest request body accepted on any route;
	// larger bodies get 413. Default 1MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// MaxBufferedBytes bounds the request-body bytes held in memory at
	// once across all requests, each body being read whole before it is
	// forwarded, and BodyReadCharge for each body being read. Past its
	// client's share, a request gets 503 server_busy. Default 64MiB.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// MaxConnections bounds the client connections held at once, shared
	// between client addresses (docs/pools.md): a client may open one
	// only while it holds fewer than are left free; a connection past its
	// share has its first request answered 503 too_many_connections and
	// is closed. Connections from trusted proxies are not counted; a PROXY
	// protocol balancer's is counted as the client its header names.
	// Default 0: the process's file-descriptor limit less 1024, kept for
	// the backend's and Redis's connections, the admin listener's
	// (Admin.MaxConnections) and files.
	MaxConnections int `yaml:"max_connections"`
	// DrainDelay is how long exgate keeps serving after a shutdown signal
	// with /readyz answering 503, so that load balancers stop sending
	// traffic before the listener closes. Default 5s; 0 closes at once.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// ShutdownTimeout bounds how long in-flight requests may take to finish
	// after the listener closes. Default 25s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TLS terminates TLS on the traffic listener. Default: off (plain
	// HTTP/1.1).
	TLS TLS `yaml:"tls"`
	// HTTP2 sets the limits of HTTP/2, offered to TLS clients through
	// ALPN.
	HTTP2 HTTP2 `yaml:"http2"`
	// ProxyProtocol accepts the PROXY protocol (v1 and v2) from load
	// balancers. Default: off.
	ProxyProtocol ProxyProtocol `yaml:"proxy_protocol"`
}

// DefaultServer returns the traffic listener's defaults.
func DefaultServer() Server {
	return Server{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		MaxBodyBytes:      1 << 20,
		MaxBufferedBytes:  64 << 20,
		DrainDelay:        5 * time.Second,
		ShutdownTimeout:   25 * time.Second,
		TLS:               defaultTLS(),
		HTTP2:             defaultHTTP2(),
		ProxyProtocol:     defaultProxyProtocol(),
	}
}

// check reports problems in the server section at p; the write timeout
// against the route timeouts is checked across sections.
func (s *Server) check(col *collector, p path) {
	col.positive(p.key("read_header_timeout"), s.ReadHeaderTimeout)
	col.positive(p.key("read_timeout"), s.ReadTimeout)
	col.positive(p.key("write_timeout"), s.WriteTimeout)
	col.positive(p.key("idle_timeout"), s.IdleTimeout)
	col.positive(p.key("shutdown_timeout"), s.ShutdownTimeout)
	if s.DrainDelay < 0 {
		col.addf(p.key("drain_delay"), "must not be negative (0 closes at once), got %s", s.DrainDelay)
	}
	if s.MaxHeaderBytes < 1<<10 || s.MaxHeaderBytes > 1<<20 {
		col.addf(p.key("max_header_bytes"), "must be from 1KiB to 1MiB, got %s", s.MaxHeaderBytes)
	}
	if s.MaxBodyBytes < 1 {
		col.addf(p.key("max_body_bytes"), "must be at least 1, got %s", s.MaxBodyBytes)
	}
	if s.MaxConnections < 0 {
		col.addf(p.key("max_connections"), "must not be negative (0 is the file-descriptor limit less 1024), got %d", s.MaxConnections)
	}
	if s.MaxBufferedBytes < 64<<10 {
		col.addf(p.key("max_buffered_bytes"), "must be at least 64KiB, got %s", s.MaxBufferedBytes)
	}
	s.TLS.check(col, p.key("tls"))
	s.HTTP2.check(col, p.key("http2"))
	s.ProxyProtocol.check(col, p.key("proxy_protocol"))
}
