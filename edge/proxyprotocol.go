package edge

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// ProxyProtocolListener wraps ln so that connections from the load
// balancers of pp.TrustedPeers may (policy "optional") or must (policy
// "required") open with a PROXY protocol header, v1 or v2
// (github.com/pires/go-proxyproto), whose source address then is the
// connection's RemoteAddr. A connection from any other peer that opens
// with a header is closed without an answer; one without a header is
// served as it is. The header must arrive within headerTimeout (the
// server's read-header timeout); the deadline is lifted once it has, so a
// keep-alive connection is not cut by it later.
//
// The header is read on the connection's own goroutine (when net/http
// first asks for the remote address or reads), never in Accept, so a peer
// that sends nothing cannot hold up other connections. With
// pp.TrustedPeers empty, ln is returned as it is. m may be nil.
func ProxyProtocolListener(ln net.Listener, pp config.ProxyProtocol, headerTimeout time.Duration, m *metrics.Edge) net.Listener {
	if len(pp.TrustedPeers) == 0 {
		return ln
	}
	trusted := make([]netip.Prefix, len(pp.TrustedPeers))
	for i, p := range pp.TrustedPeers {
		trusted[i] = p.Prefix
	}
	listed := proxyproto.USE
	if pp.Policy != config.ProxyOptional {
		listed = proxyproto.REQUIRE
	}
	return &proxyListener{
		Listener: &proxyproto.Listener{
			Listener:          ln,
			ConnPolicy:        connPolicy(trusted, listed),
			ValidateHeader:    tcpOnly,
			ReadHeaderTimeout: headerTimeout,
		},
		metrics: m,
	}
}

// connPolicy returns the library's policy for a connection: listed for
// a peer inside trusted, else REJECT, under which a header fails the
// connection and its absence serves it normally. (The library's
// "strict" allow-list helpers differ: some drop every unlisted peer,
// others admit an unlisted peer that sends no header; exgate states its
// own.) A peer address that cannot be read is refused, without stopping
// the accept loop.
func connPolicy(trusted []netip.Prefix, listed proxyproto.Policy) proxyproto.ConnPolicyFunc {
	return func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
		a, ok := netAddrIP(o.Upstream)
		if !ok {
			return proxyproto.REJECT, fmt.Errorf("%w: peer address %v", proxyproto.ErrInvalidUpstream, o.Upstream)
		}
		if clientip.InPrefixes(a, trusted) {
			return listed, nil
		}
		return proxyproto.REJECT, nil
	}
}

// errNotTCP refuses a header that names something other than a TCP
// client: a UDP or Unix socket address is no client address.
var errNotTCP = errors.New("proxy protocol: the header names no TCP client address")

// tcpOnly accepts headers that carry a TCP over IPv4 or IPv6 client, and
// those that carry none (LOCAL, as in a balancer's health check, and v1's
// UNKNOWN), which leave the balancer as the peer.
func tcpOnly(h *proxyproto.Header) error {
	if h.Command.IsLocal() {
		return nil
	}
	switch h.TransportProtocol {
	case proxyproto.TCPv4, proxyproto.TCPv6, proxyproto.UNSPEC:
		return nil
	}
	return errNotTCP
}

// netAddrIP returns the IP address of a TCP peer in the form the gateway
// compares with its trusted proxies (clientip.ClientForm: an embedded IPv4
// address, IPv4-mapped or NAT64's, as that IPv4 address).
func netAddrIP(a net.Addr) (netip.Addr, bool) {
	switch t := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(t.IP)
		return clientip.ClientForm(ip), ok
	case nil:
		return netip.Addr{}, false
	}
	return clientip.Peer(a.String())
}

// proxyListener counts the connections refused for their header.
type proxyListener struct {
	*proxyproto.Listener
	metrics *metrics.Edge
}

// Accept returns the next connection, wrapped so that a refused header
// is counted once.
func (l *proxyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pc, ok := c.(*proxyproto.Conn)
	if !ok || l.metrics == nil {
		return c, nil
	}
	return &proxyConn{Conn: pc, metrics: l.metrics}, nil
}

// proxyConn is a PROXY protocol connection whose header error is
// counted on the first read that returns it.
type proxyConn struct {
	*proxyproto.Conn
	metrics *metrics.Edge
	counted atomic.Bool
}

// Read reads from the connection, counting a refused header once.
func (c *proxyConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.counted.CompareAndSwap(false, true) {
		if r, ok := proxyRefusal(err); ok {
			c.metrics.ProxyRefused(r)
		}
	}
	return n, err
}

// proxyRefusal classifies a read error of a PROXY protocol connection.
func proxyRefusal(err error) (metrics.ProxyRefusal, bool) {
	switch {
	case errors.Is(err, proxyproto.ErrSuperfluousProxyHeader):
		return metrics.ProxyUntrusted, true
	case errors.Is(err, proxyproto.ErrNoProxyProtocol):
		return metrics.ProxyMissing, true
	case errors.Is(err, errNotTCP), isHeaderError(err):
		return metrics.ProxyInvalid, true
	}
	return 0, false
}

// isHeaderError reports whether err is one of the library's header
// parsing errors (as opposed to an ordinary network error).
func isHeaderError(err error) bool {
	for _, e := range []error{
		proxyproto.ErrCantReadVersion1Header, proxyproto.ErrVersion1HeaderTooLong,
		proxyproto.ErrLineMustEndWithCrlf, proxyproto.ErrCantReadProtocolVersionAndCommand,
		proxyproto.ErrCantReadAddressFamilyAndProtocol, proxyproto.ErrCantReadLength,
		proxyproto.ErrCantResolveSourceUnixAddress, proxyproto.ErrCantResolveDestinationUnixAddress,
		proxyproto.ErrNoProxyProtocol, proxyproto.ErrUnknownProxyProtocolVersion,
		proxyproto.ErrUnsupportedProtocolVersionAndCommand, proxyproto.ErrUnsupportedAddressFamilyAndProtocol,
		proxyproto.ErrInvalidLength, proxyproto.ErrInvalidAddress, proxyproto.ErrInvalidPortNumber,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
