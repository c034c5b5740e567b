package edge

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
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
// (clientip.ClientForm: an embedded IPv4 address is that IPv4 client),
// grouped by client_ip.ipv6_prefix. A connection from a trusted proxy
// (client_ip.trusted_proxies) carries many clients and is not counted. A
// connection from a balancer of server.proxy_protocol.trusted_peers
// carries the one client its PROXY header names, known only once the
// header is read on the connection's own goroutine: it is counted in that
// client's share when its first request asks (PastShare), and not at all
// when its header names no client (none, LOCAL) or a trusted proxy. Wrap
// the listener the kernel accepts on, before the PROXY protocol: the peer
// is then known at once. m counts and shows them; it may be nil.
func ShareConnections(ln net.Listener, cfg *config.Config, m *metrics.Edge) net.Listener {
	l := &sharedListener{Listener: ln, pool: share.NewPool(MaxConnections(cfg)), v6Prefix: cfg.ClientIP.IPv6Prefix, metrics: m}
	for _, p := range cfg.ClientIP.TrustedProxies {
		l.exempt = append(l.exempt, p.Prefix)
	}
	for _, p := range cfg.Server.ProxyProtocol.TrustedPeers {
		l.balancers = append(l.balancers, p.Prefix)
	}
	m.SetConnectionSource(l.pool)
	return l
}

type sharedListener struct {
	net.Listener
	pool      *share.Pool
	exempt    []netip.Prefix // client_ip.trusted_proxies
	balancers []netip.Prefix // server.proxy_protocol.trusted_peers
	v6Prefix  int
	metrics   *metrics.Edge
	// admin, when set, are the admin listener's rules
	// (ShareAdminConnections): a client at its share closes its idle
	// connections, oldest first, before it is refused, and the
	// connections refused are bounded.
	admin *adminConns
}

// Accept returns the next connection, counted in its client's share, or
// marked as past it; a balancer's is counted at its first request.
func (l *sharedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr, ok := clientip.Peer(c.RemoteAddr().String()) // as the gateway keys the client and compares its proxies
		if !ok {
			return c, nil // not an IP peer (a test's pipe): nothing to share
		}
		sc := &sharedConn{Conn: c}
		switch {
		case clientip.InPrefixes(addr, l.balancers):
			sc.from = l
		case clientip.InPrefixes(addr, l.exempt):
			return c, nil
		case !l.count(sc, addr):
			_ = c.Close() // past its share, and no room left to answer it
			continue
		}
		return sc, nil
	}
}

// count takes sc's place in the share of client addr, or marks it past
// its share (on the admin listener, once addr has no idle connection
// left to close). It reports false when sc is past its share and the
// listener has no room left for the connections it refuses: sc is to be
// closed unanswered.
func (l *sharedListener) count(sc *sharedConn, addr netip.Addr) bool {
	k := share.AddrKey(clientip.AddrGroup(addr, l.v6Prefix))
	for !l.pool.Take(k, 1) {
		if l.admin != nil && l.admin.closeOldest(k) {
			continue // its place is free again
		}
		if l.admin != nil {
			return l.admin.refuse(sc)
		}
		sc.past = true // answered and closed at its first request
		l.metrics.ConnectionRefused()
		return true
	}
	sc.pool, sc.key, sc.idleOf = l.pool, k, l.admin
	return true
}

// sharedConn is a client connection counted in its client's share (pool
// set), past it (past), or from a balancer and not counted yet (from set).
type sharedConn struct {
	net.Conn
	pool *share.Pool
	key  share.Key
	past bool
	// from is the listener of a balancer's connection whose client is
	// counted at its first request (countClient); nil once it has been.
	from *sharedListener
	// refusedOf is the admin listener whose room for refused connections
	// this one takes (adminConns.takeRefused), or nil.
	refusedOf *adminConns
	// idleOf is the admin listener that lists this connection while it
	// is idle (adminConns.connState), or nil; listed tells whether it is.
	idleOf *adminConns
	listed atomic.Bool
	mu     sync.Mutex
	closed bool
}

// Read reads from the connection. An idle admin connection that reads
// bytes has its next request under way: it is no longer idle, though
// net/http tells StateActive only once that request's header is whole.
func (c *sharedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.listed.Load() {
		c.idleOf.unlist(c)
	}
	return n, err
}

// Close closes the connection and gives its place back.
func (c *sharedConn) Close() error {
	c.mu.Lock()
	if !c.closed && c.pool != nil {
		c.pool.Give(c.key, 1)
	}
	if !c.closed && c.refusedOf != nil {
		c.refusedOf.refused.Add(-1)
	}
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

// countClient counts a balancer's connection, once, in the share of the
// client whose address the PROXY protocol layer pc names (its
// RemoteAddr; pc nil: the connection is no PROXY protocol connection),
// and reports whether it is past the share. A client that is a balancer
// (no header, or LOCAL: the balancer's own address) or a trusted proxy is
// not counted.
func (c *sharedConn) countClient(pc net.Conn) bool {
	c.mu.Lock()
	pending := c.from != nil && pc != nil
	c.mu.Unlock()
	var client net.Addr
	if pending {
		client = pc.RemoteAddr() // read already: net/http asked first
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.from; l != nil && client != nil && !c.closed {
		c.from = nil
		if a, ok := netAddrIP(client); ok && !clientip.InPrefixes(a, l.balancers) && !clientip.InPrefixes(a, l.exempt) {
			l.count(c, a)
		}
	}
	return c.past
}

// PastShare reports whether c, a connection as net/http holds it (under
// TLS and the PROXY protocol), was accepted past its client's share: its
// first request is to be answered 503 too_many_connections and the
// connection closed. A balancer's connection is counted in the share of
// the client its PROXY header names on the first call, which must come
// after the header was read (the connection's RemoteAddr asked).
func PastShare(c net.Conn) bool {
	var pc net.Conn // the PROXY protocol layer
	for {
		switch v := c.(type) {
		case *sharedConn:
			return v.countClient(pc)
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		case interface{ Raw() net.Conn }: // a PROXY protocol connection
			if pc == nil {
				pc = c
			}
			c = v.Raw()
		default:
			return false
		}
	}
}
