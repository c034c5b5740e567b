package edge

import (
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/share"
)

// Client connections are a pool too (docs/pools.md): every one holds a
// file descriptor, a goroutine and its buffers. ShareConnections shares
// them between client addresses as the other pools are shared (a
// share.Pool: a client may open a connection only while it holds fewer
// than are left free). A connection past its client's share is still
// accepted — so that its client gets an answer, not a reset — but its
// first request is answered 503 too_many_connections and the connection
// closed (the gateway asks PastShare): it lives no longer than its first request, at
// most server.read_header_timeout.

// connReserve is how many file descriptors the default connection pool
// leaves for the backend's and Redis's connections and for files.
const connReserve = 1024

// MaxConnections returns the size of the client connection pool for cfg:
// server.max_connections, or by default the process's file-descriptor
// limit less connReserve (at least connReserve).
func MaxConnections(cfg *config.Config) int64 {
	if n := cfg.Server.MaxConnections; n > 0 {
		return int64(n)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 2*connReserve {
		return connReserve
	}
	return int64(lim.Cur) - connReserve
}

// ShareConnections returns ln, whose connections are shared between the
// client addresses they come from, in the form the rate limits key them
// (limiter.ClientForm: an embedded IPv4 address is that IPv4 client),
// grouped by client_ip.ipv6_prefix. A
// connection from a trusted proxy (client_ip.trusted_proxies,
// server.proxy_protocol.trusted_peers) carries many clients and is not
// counted. Wrap the listener the kernel accepts on, before the PROXY
// protocol: the peer is then known at once. m counts and shows them; it
// may be nil.
func ShareConnections(ln net.Listener, cfg *config.Config, m *metrics.Edge) net.Listener {
	l := &sharedListener{Listener: ln, pool: share.NewPool(MaxConnections(cfg)), v6Prefix: cfg.ClientIP.IPv6Prefix, metrics: m}
	for _, p := range cfg.ClientIP.TrustedProxies {
		l.exempt = append(l.exempt, p.Prefix)
	}
	for _, p := range cfg.Server.ProxyProtocol.TrustedPeers {
		l.exempt = append(l.exempt, p.Prefix)
	}
	m.SetConnectionSource(l.pool)
	return l
}

type sharedListener struct {
	net.Listener
	pool     *share.Pool
	exempt   []netip.Prefix
	v6Prefix int
	metrics  *metrics.Edge
}

// Accept returns the next connection, counted in its client's share, or
// marked as past it.
func (l *sharedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return c, nil // not an IP peer (a test's pipe): nothing to share
	}
	addr := limiter.ClientForm(ap.Addr()) // as the gateway keys the client and compares its proxies
	for _, p := range l.exempt {
		if p.Contains(addr) {
			return c, nil
		}
	}
	k := share.AddrKey(limiter.AddrGroup(addr, l.v6Prefix))
	sc := &sharedConn{Conn: c, pool: l.pool, key: k}
	if !l.pool.Take(k, 1) {
		sc.pool = nil // past its share: answered and closed at its first request
		l.metrics.ConnectionRefused()
	}
	return sc, nil
}

// sharedConn is a client connection counted in its client's share (pool
// set) or past it (pool nil).
type sharedConn struct {
	net.Conn
	pool *share.Pool
	key  share.Key
	once sync.Once
}

// Close closes the connection and gives its place back.
func (c *sharedConn) Close() error {
	c.once.Do(func() {
		if c.pool != nil {
			c.pool.Give(c.key, 1)
		}
	})
	return c.Conn.Close()
}

// PastShare reports whether c, a connection as net/http holds it (under
// TLS and the PROXY protocol), was accepted past its client's share: its
// first request is to be answered 503 too_many_connections and the
// connection closed.
func PastShare(c net.Conn) bool {
	for {
		switch v := c.(type) {
		case *sharedConn:
			return v.pool == nil
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		case interface{ Raw() net.Conn }: // a PROXY protocol connection
			c = v.Raw()
		default:
			return false
		}
	}
}
