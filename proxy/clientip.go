package proxy

import (
	"net/http"
	"net/netip"
	"strings"
)

// peerAddr parses an http.Request RemoteAddr ("ip:port").
func peerAddr(remoteAddr string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr derives the client's address: the TCP peer, unless the peer
// is a trusted proxy, in which case X-Forwarded-For is read right to left
// and the first address that is not a trusted proxy is the client. An
// X-Forwarded-For from an untrusted peer changes nothing. A malformed entry
// stops the walk at the last good address, so a client cannot hide behind
// garbage.
func clientAddr(remoteAddr string, xff []string, trusted []netip.Prefix) (netip.Addr, bool) {
	peer, ok := peerAddr(remoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if len(trusted) == 0 || !inPrefixes(peer, trusted) {
		return peer, true
	}
	client := peer
	for i := len(xff) - 1; i >= 0; i-- {
		h := xff[i]
		for h != "" {
			var entry string
			if j := strings.LastIndexByte(h, ','); j >= 0 {
				entry, h = h[j+1:], h[:j]
			} else {
				entry, h = h, ""
			}
			a, err := netip.ParseAddr(strings.TrimSpace(entry))
			if err != nil {
				return client, true
			}
			a = a.Unmap()
			client = a
			if !inPrefixes(a, trusted) {
				return client, true
			}
		}
	}
	return client, true
}

// peer is what exgate knows of a connection's TCP peer, worked out once
// per connection (Server.ConnContext) rather than per request.
type peer struct {
	addr    netip.Addr
	ok      bool     // addr parsed
	trusted bool     // addr is one of the trusted proxies
	realIP  []string // X-Real-IP value when the peer is the client; never modified
}

// peerKey is the context key of a connection's *connPeer.
type peerKey struct{}

// newPeer works out the peer of a connection whose remote address is
// remoteAddr.
func newPeer(remoteAddr string, trusted []netip.Prefix) *peer {
	p := &peer{}
	p.addr, p.ok = peerAddr(remoteAddr)
	if p.ok {
		p.trusted = inPrefixes(p.addr, trusted)
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
	return newPeer(r.RemoteAddr, g.trusted)
}

// client derives the request's client address and its X-Real-IP value,
// from the connection's peer.
func (g *Gateway) client(r *http.Request) (netip.Addr, []string) {
	p := g.peerOf(r)
	if !p.ok {
		return netip.Addr{}, nil
	}
	if !p.trusted {
		return p.addr, p.realIP
	}
	a, ok := clientAddr(r.RemoteAddr, r.Header["X-Forwarded-For"], g.trusted)
	if !ok {
		return netip.Addr{}, nil
	}
	return a, []string{a.String()}
}
