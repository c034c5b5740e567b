package proxy

import (
	"net/netip"
	"strings"
)

// trustedPeer reports whether the TCP peer (an http.Request RemoteAddr) is
// one of the trusted proxies.
func (g *Gateway) trustedPeer(remoteAddr string) bool {
	if len(g.trusted) == 0 {
		return false
	}
	a, ok := peerAddr(remoteAddr)
	return ok && inPrefixes(a, g.trusted)
}

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
