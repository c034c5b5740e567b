package metrics

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the traffic listener's edge metrics (TLS, PROXY protocol,
// HTTP/2).
const (
	NameCertReloads  = "exgate_tls_certificate_reloads_total"
	NameCertNotAfter = "exgate_tls_certificate_not_after_timestamp_seconds"
	NameProxyRefused = "exgate_proxy_protocol_refused_total"
	NameHTTP2Errors  = "exgate_http2_errors_total"
	// The client connections' pool (server.max_connections).
	NameConnections        = "exgate_connections"
	NameConnectionClients  = "exgate_connection_clients"
	NameConnectionsRefused = "exgate_connections_refused_total"
	// The admin listener's connections (admin.max_connections).
	NameAdminConnectionsClosed = "exgate_admin_connections_closed_total"
	maxHTTP2ErrorKind          = 64
)

// ProxyRefusal is why a connection's PROXY protocol header was refused.
type ProxyRefusal int

// Reasons a PROXY protocol header is refused.
const (
	// ProxyUntrusted: a peer outside server.proxy_protocol.trusted_peers
	// sent a header.
	ProxyUntrusted ProxyRefusal = iota
	// ProxyMissing: a trusted peer sent no header (in time) under the
	// "required" policy.
	ProxyMissing
	// ProxyInvalid: the header could not be parsed.
	ProxyInvalid
	numProxyRefusals
)

// AdminClose is why the admin listener closed a connection for its
// address's share (edge.ShareAdminConnections).
type AdminClose int

// Reasons the admin listener closes a connection for its address's share.
const (
	// AdminIdleForNewer: an idle keep-alive connection closed for a newer
	// one of its address, at its share.
	AdminIdleForNewer AdminClose = iota
	// AdminPastShare: a connection past its address's share, its first
	// request answered 503 too_many_connections.
	AdminPastShare
	// AdminRefusedRoomFull: a connection past its address's share closed
	// unanswered at once, the refused connections' room full.
	AdminRefusedRoomFull
	numAdminCloses
)

// String returns the reason label value.
func (r AdminClose) String() string {
	return [...]string{"idle_for_newer", "past_share", "refused_room_full"}[r]
}

// String returns the reason label value.
func (r ProxyRefusal) String() string {
	switch r {
	case ProxyUntrusted:
		return "untrusted_peer"
	case ProxyMissing:
		return "missing_header"
	default:
		return "invalid_header"
	}
}

// Edge is the set of collectors of the traffic listener's edge: TLS
// certificate reloads and expiry, refused PROXY protocol headers, HTTP/2
// protocol errors, client connections' shares (the admin listener's
// too). Build it with NewEdge; every method is safe on a nil
// *Edge and then does nothing.
type Edge struct {
	reloads      *prometheus.CounterVec
	notAfter     prometheus.Gauge
	proxyRefused *prometheus.CounterVec
	http2Errors  *prometheus.CounterVec
	connRefused  prometheus.Counter
	connGauges   []prometheus.Collector
	connSource   atomic.Pointer[connSourceRef]

	reloadResults results
	refusals      [numProxyRefusals]prometheus.Counter
	adminClosed   *prometheus.CounterVec
	adminCloses   [numAdminCloses]prometheus.Counter

	mu         sync.Mutex
	http2Kinds map[string]prometheus.Counter
}

// NewEdge builds the edge collectors and registers them on reg. Like New,
// it unregisters what it registered when one fails.
func NewEdge(reg prometheus.Registerer) (*Edge, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	e := &Edge{http2Kinds: map[string]prometheus.Counter{}}
	e.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameCertReloads,
		Help: "TLS certificate reloads that found changed files, by result (success; failure: the last good certificates are kept).",
	}, []string{"result"})
	e.notAfter = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameCertNotAfter,
		Help: "Expiry (Unix seconds) of the served TLS certificate that expires first; 0 without TLS.",
	})
	e.proxyRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameProxyRefused,
		Help: "Connections closed for their PROXY protocol header, by reason (untrusted_peer, missing_header, invalid_header).",
	}, []string{"reason"})
	e.http2Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameHTTP2Errors,
		Help: "HTTP/2 protocol errors net/http counted on client connections, by kind (such as conn_enhance_your_calm_too_many_early_resets).",
	}, []string{"kind"})
	e.connRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameConnectionsRefused,
		Help: "Client connections accepted past their client's share of server.max_connections: each one's first request is answered 503 too_many_connections and the connection closed.",
	})
	e.adminClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameAdminConnectionsClosed,
		Help: "Admin listener connections closed for their address's share of admin.max_connections, by reason (idle_for_newer: an idle one, for a newer one of its address; past_share: answered 503 too_many_connections; refused_room_full: closed unanswered).",
	}, []string{"reason"})
	e.connGauges = e.connectionGauges()
	if err := register(reg, append([]prometheus.Collector{e.reloads, e.notAfter, e.proxyRefused, e.http2Errors, e.connRefused, e.adminClosed}, e.connGauges...)); err != nil {
		return nil, err
	}
	for r := range e.adminCloses {
		e.adminCloses[r] = e.adminClosed.WithLabelValues(AdminClose(r).String())
	}
	e.reloadResults = newResults(e.reloads)
	for r := range e.refusals {
		e.refusals[r] = e.proxyRefused.WithLabelValues(ProxyRefusal(r).String())
	}
	return e, nil
}

// EdgeNames lists the edge metric names.
func EdgeNames() []string {
	return []string{NameCertReloads, NameCertNotAfter, NameProxyRefused, NameHTTP2Errors,
		NameConnections, NameConnectionClients, NameConnectionsRefused, NameAdminConnectionsClosed}
}

// ConnectionSource reports the client connections' pool; the traffic
// listener's is one.
type ConnectionSource interface {
	Buffered() int64 // connections held
	Clients() int    // client addresses holding them
}

type connSourceRef struct{ s ConnectionSource }

// connectionGauges are the gauges of the client connections' pool, 0
// until SetConnectionSource.
func (e *Edge) connectionGauges() []prometheus.Collector {
	gauge := func(name, help string, f func(ConnectionSource) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if r := e.connSource.Load(); r != nil {
				return f(r.s)
			}
			return 0
		})
	}
	return []prometheus.Collector{
		gauge(NameConnections, "Client connections held, counted in their clients' shares of server.max_connections (connections from trusted proxies are not; a PROXY protocol balancer's is its client's from its first request).",
			func(s ConnectionSource) float64 { return float64(s.Buffered()) }),
		gauge(NameConnectionClients, "Client addresses holding connections; each may hold at most as many as are left free.",
			func(s ConnectionSource) float64 { return float64(s.Clients()) }),
	}
}

// SetConnectionSource makes the connection gauges read s.
func (e *Edge) SetConnectionSource(s ConnectionSource) {
	if e != nil {
		e.connSource.Store(&connSourceRef{s})
	}
}

// ConnectionRefused counts a connection accepted past its client's share.
func (e *Edge) ConnectionRefused() {
	if e != nil {
		e.connRefused.Inc()
	}
}

// AdminConnectionClosed counts an admin listener connection closed for
// its address's share, for reason r.
func (e *Edge) AdminConnectionClosed(r AdminClose) {
	if e != nil && r >= 0 && r < numAdminCloses {
		e.adminCloses[r].Inc()
	}
}

// CertReload counts a reload of changed certificate files.
func (e *Edge) CertReload(success bool) {
	if e == nil {
		return
	}
	e.reloadResults.of(success).Inc()
}

// SetCertNotAfter records the earliest expiry of the served certificates.
func (e *Edge) SetCertNotAfter(t time.Time) {
	if e == nil {
		return
	}
	e.notAfter.Set(float64(t.Unix()))
}

// ProxyRefused counts a connection closed for its PROXY protocol header.
func (e *Edge) ProxyRefused(r ProxyRefusal) {
	if e == nil || r < 0 || r >= numProxyRefusals {
		return
	}
	e.refusals[r].Inc()
}

// HTTP2Error counts an HTTP/2 error of kind errType (net/http's
// HTTP2Config.CountError: "conn_ENHANCE_YOUR_CALM_too_many_early_resets",
// "frame_data_stream_0", …), lower-cased. net/http names a fixed set of
// kinds; past maxHTTP2ErrorKind distinct ones they are counted as "other".
func (e *Edge) HTTP2Error(errType string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	c, ok := e.http2Kinds[errType]
	if !ok {
		if len(e.http2Kinds) >= maxHTTP2ErrorKind {
			errType = "other"
		}
		if c, ok = e.http2Kinds[errType]; !ok {
			c = e.http2Errors.WithLabelValues(strings.ToLower(errType))
			e.http2Kinds[errType] = c
		}
	}
	e.mu.Unlock()
	c.Inc()
}

// CertReloadCounter returns the reload counter of result success or
// failure, for tests.
func (e *Edge) CertReloadCounter(success bool) prometheus.Counter {
	return e.reloadResults.of(success)
}

// AdminClosedCounter returns the counter of the admin listener's
// connections closed for reason r, for tests.
func (e *Edge) AdminClosedCounter(r AdminClose) prometheus.Counter { return e.adminCloses[r] }

// ProxyRefusedCounter returns the refusal counter of reason r, for tests.
func (e *Edge) ProxyRefusedCounter(r ProxyRefusal) prometheus.Counter { return e.refusals[r] }

// HTTP2ErrorCounter returns the counter of HTTP/2 error kind errType,
// for tests.
func (e *Edge) HTTP2ErrorCounter(errType string) prometheus.Counter {
	return e.http2Errors.WithLabelValues(errType)
}
