package config

import "time"

// TLS terminates TLS on the traffic listener.
type TLS struct {
	// Certificates are the certificate chains exgate serves, each with its
	// key; the one a client gets is chosen by the server name it asks for
	// (SNI), the first when none matches. A relative path is taken from
	// the configuration file's directory. Empty turns TLS off. Default:
	// none.
	Certificates []Certificate `yaml:"certificates" reload:"live"`
	// ReloadInterval is how often the certificate files are read again
	// and, when their content changed, swapped in without dropping a
	// connection; 0 turns polling off (SIGHUP still reloads). Default 10s.
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// Certificate is one certificate chain and its private key, PEM files.
type Certificate struct {
	// CertFile holds the leaf certificate first, then its intermediates.
	CertFile string `yaml:"cert_file"`
	// KeyFile holds the leaf certificate's private key.
	KeyFile string `yaml:"key_file"`
}

// HTTP2 sets the limits of HTTP/2. Its header list is bounded by
// server.max_header_bytes like an HTTP/1.1 request's headers, and its
// reset floods by net/http (no more running handlers than
// MaxConcurrentStreams per connection; a client whose reset streams queue
// up past four times that loses its connection).
type HTTP2 struct {
	// Enabled offers HTTP/2 to TLS clients (ALPN "h2"); without TLS exgate
	// speaks HTTP/1.1 only. Default true.
	Enabled bool `yaml:"enabled"`
	// MaxConcurrentStreams is how many requests one HTTP/2 connection may
	// have open at once. Default 100.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
}

// ProxyProtocol accepts the PROXY protocol (v1 and v2) from the load
// balancers listed in TrustedPeers: the client address the header carries
// replaces the connection's peer for limits, logs, metrics and
// X-Forwarded-For. A connection from any other peer that opens with a
// PROXY header is closed; one without a header is served as it is.
type ProxyProtocol struct {
	// TrustedPeers lists the load balancers (CIDR or single address)
	// whose PROXY header is believed. Empty turns the PROXY protocol off.
	// Default: none.
	TrustedPeers []Prefix `yaml:"trusted_peers"`
	// Policy is "required" (a connection from a trusted peer without a
	// header is closed) or "optional" (it is served with the peer as the
	// client). The header must arrive within server.read_header_timeout.
	// Default "required".
	Policy string `yaml:"policy"`
}

// PROXY protocol policies.
const (
	ProxyRequired = "required"
	ProxyOptional = "optional"
)

// maxConcurrentStreams bounds server.http2.max_concurrent_streams.
const maxConcurrentStreams = 1000

// defaultTLS returns the TLS defaults: off, with certificate files polled
// every 10s once they are given.
func defaultTLS() TLS { return TLS{ReloadInterval: 10 * time.Second} }

// defaultHTTP2 returns the HTTP/2 defaults: on for TLS clients, 100
// streams a connection.
func defaultHTTP2() HTTP2 { return HTTP2{Enabled: true, MaxConcurrentStreams: 100} }

// defaultProxyProtocol returns the PROXY protocol defaults: off (no
// trusted peers), and required from trusted peers once they are given.
func defaultProxyProtocol() ProxyProtocol { return ProxyProtocol{Policy: ProxyRequired} }

// check reports problems in the TLS settings at p.
func (t *TLS) check(col *collector, p path) {
	for i, cert := range t.Certificates {
		cp := p.key("certificates").index(i)
		if cert.CertFile == "" {
			col.addf(cp.key("cert_file"), "required")
		}
		if cert.KeyFile == "" {
			col.addf(cp.key("key_file"), "required")
		}
	}
	if t.ReloadInterval != 0 && t.ReloadInterval < time.Second {
		col.addf(p.key("reload_interval"), "must be at least 1s (0 turns polling off), got %s", t.ReloadInterval)
	}
}

// check reports problems in the HTTP/2 settings at p.
func (h *HTTP2) check(col *collector, p path) {
	if n := h.MaxConcurrentStreams; n < 1 || n > maxConcurrentStreams {
		col.addf(p.key("max_concurrent_streams"), "must be from 1 to %d, got %d", maxConcurrentStreams, n)
	}
}

// check reports problems in the PROXY protocol settings at p.
func (pp *ProxyProtocol) check(col *collector, p path) {
	for i, peer := range pp.TrustedPeers {
		if !peer.IsValid() {
			col.addf(p.key("trusted_peers").index(i), "not a valid IP prefix")
		}
	}
	col.oneOf(p.key("policy"), pp.Policy, ProxyRequired, ProxyOptional)
}
