package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/edge"
)

// peer is what exgate knows of a connection's TCP peer, worked out once
// per connection (Server.ConnContext) rather than per request.
type peer struct {
	addr    netip.Addr // in client form
	ok      bool       // addr parsed
	trusted bool       // addr is one of the trusted proxies
	realIP  []string   // X-Real-IP value when the peer is the client; never modified
	// token is the last bearer token a request on the connection was
	// accepted with, and its id (tokenMemo), or nil.
	token atomic.Pointer[tokenMemo]
}

// peerKey is the context key of a connection's *connPeer.
type peerKey struct{}

// ConnContext records c for the requests that come on it: their peer, and
// whether c was accepted past its client's share, each worked out on
// first use — once per connection, not per request, and not here: the
// server calls ConnContext on its accept loop, and with the PROXY
// protocol the remote address is known only once the connection's
// goroutine has read the header. edge.NewServer calls it.
func (g *Gateway) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, &connPeer{conn: c, proxies: g.proxies})
}

// connPeer is a connection's peer, worked out on first use, and whether
// the connection was accepted past its client's share (edge.ShareConnections).
type connPeer struct {
	conn     net.Conn
	proxies  *clientip.Proxies
	once     sync.Once
	p        *peer
	pastOnce sync.Once
	past     bool
}

// pastShare reports whether the connection was accepted past its client's
// share, working it out on the first call.
func (c *connPeer) pastShare() bool {
	c.pastOnce.Do(func() { c.past = edge.PastShare(c.conn) })
	return c.past
}

// get returns the peer, working it out on the first call.
func (c *connPeer) get() *peer {
	c.once.Do(func() { c.p = newPeer(c.conn.RemoteAddr().String(), c.proxies) })
	return c.p
}

// newPeer works out the peer of a connection whose remote address is
// remoteAddr.
func newPeer(remoteAddr string, proxies *clientip.Proxies) *peer {
	p := &peer{}
	p.addr, p.ok = clientip.Peer(remoteAddr)
	if p.ok {
		p.trusted = proxies.Trusts(p.addr)
		p.realIP = []string{p.addr.String()}
	}
	return p
}

// peerOf returns the peer of r's connection: the one the server recorded
// (Server.ConnContext), else worked out from r.RemoteAddr.
func (g *Gateway) peerOf(r *http.Request) *peer {
	if p, ok := r.Context().Value(peerKey{}).(*connPeer); ok && p != nil {
		return p.get()
	}
	return newPeer(r.RemoteAddr, g.proxies)
}

// client derives the request's client address and its X-Real-IP value,
// from p, the connection's peer, and, when p is a trusted proxy, the
// configured forwarding header (client_ip.header).
func (g *Gateway) client(r *http.Request, p *peer) (netip.Addr, []string) {
	if !p.ok {
		return netip.Addr{}, nil
	}
	a := g.clientAddrOf(r, p)
	if a == p.addr {
		return a, p.realIP
	}
	return a, []string{a.String()}
}

// clientAddrOf is client's address alone, allocating nothing: p's, or,
// when p is a trusted proxy, the one read in client_ip.header; none when
// p has none.
func (g *Gateway) clientAddrOf(r *http.Request, p *peer) netip.Addr {
	switch {
	case !p.ok:
		return netip.Addr{}
	case !p.trusted:
		return p.addr
	}
	return g.proxies.Client(p.addr, r.Header)
}
