package config

import "time"

// Upstream is the backend exgate forwards to.
type Upstream struct {
	// URL is the backend's base URL (http or https). A path in it is
	// prefixed to every forwarded path. Default "http://127.0.0.1:9000".
	URL URL `yaml:"url"`
	// Timeout is the default route timeout: the longest exgate waits for
	// the backend's whole response before answering 504. Default 10s.
	Timeout time.Duration `yaml:"timeout" reload:"live"`
	// DialTimeout bounds opening a connection to the backend. Default 2s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MaxIdleConns is the size of the keep-alive pool to the backend.
	// Default 512.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// MaxConnsPerHost caps concurrent connections to the backend; 0 means
	// no cap. Default 0.
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// IdleConnTimeout closes pooled connections idle this long; keep it
	// below the backend's own keep-alive timeout. Default 90s.
	IdleConnTimeout time.Duration `yaml:"idle_conn_timeout"`
	// CheckResponseID refuses (502) a backend response whose X-Request-ID
	// is not the one exgate sent with the request: with a backend that
	// echoes the id, no client can be handed another request's answer.
	// Turn it off only for a backend that sets X-Request-ID to ids of its
	// own. Default true.
	CheckResponseID bool `yaml:"check_response_id"`
	// TLS is how instances with an https URL are dialled: a private CA,
	// a client certificate (mutual TLS), the server name, HTTP/2.
	TLS BackendTLS `yaml:"tls"`
}

// DefaultUpstream returns the backend defaults: a backend on the same
// host, port 9000.
func DefaultUpstream() Upstream {
	return Upstream{
		URL:             MustURL("http://127.0.0.1:9000"),
		Timeout:         10 * time.Second,
		DialTimeout:     2 * time.Second,
		MaxIdleConns:    512,
		IdleConnTimeout: 90 * time.Second,
		CheckResponseID: true,
		TLS:             defaultBackendTLS(),
	}
}

// check reports problems in the upstream section at p.
func (u *Upstream) check(col *collector, p path) {
	switch {
	case u.URL.URL == nil:
		col.addf(p.key("url"), "required, such as \"http://127.0.0.1:9000\"")
	case u.URL.Scheme != "http" && u.URL.Scheme != "https" || u.URL.Host == "":
		col.addf(p.key("url"), "want an absolute http or https URL, got %q", u.URL.Redacted())
	}
	u.TLS.check(col, p.key("tls"), u.URL.URL != nil && u.URL.Scheme == "https")
	col.positive(p.key("timeout"), u.Timeout)
	col.positive(p.key("dial_timeout"), u.DialTimeout)
	col.positive(p.key("idle_conn_timeout"), u.IdleConnTimeout)
	if u.MaxIdleConns < 0 {
		col.addf(p.key("max_idle_conns"), "must not be negative, got %d", u.MaxIdleConns)
	}
	if u.MaxConnsPerHost < 0 {
		col.addf(p.key("max_conns_per_host"), "must not be negative (0 means no cap), got %d", u.MaxConnsPerHost)
	}
}
