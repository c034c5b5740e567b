package proxy

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/share"
)

// withinLogShare charges the access log line of a request exgate refused
// itself (ownRefusal) to its client's share of such lines
// (log.refusals_per_client, docs/pools.md) and reports whether it is
// within it. A line past it is counted, not written: the share writes a
// summary of the client's lines not written every 10 s.
func (g *Gateway) withinLogShare(st *requestState, r *http.Request, now time.Time) bool {
	k, addr := g.logClient(st, r)
	if g.logShare.Allow(k, now) {
		return true
	}
	account := ""
	if a := st.caller.id.Account; a != "" {
		account = a[:12] // as the access log writes it: an HMAC prefix, never the user id
	}
	g.logShare.Suppress(k, now, st.rw.status, st.code, addr, account)
	return false
}

// logClient returns the request's client as the shared pools count it
// (clientOf) and its address as the rate limits group it; for a request
// refused before its address was derived (setClientAddress: a 400 of its
// head, a 401 of its token), derived here from its connection's peer, as
// setClientAddress derives it. A request refused before its token was
// read (a 400 invalid_path, a 404, a 405) is its address's, even when its
// token would verify: the address is all exgate knows then, a token not
// verified names no one (anyone could spend another account's share with
// it), and verifying one only to choose whose share a line goes to
// would make every such refusal cost a signature check.
func (g *Gateway) logClient(st *requestState, r *http.Request) (share.Key, netip.Addr) {
	a := st.addr
	if st.client == 0 || !a.IsValid() {
		p := st.peer
		if p == nil {
			p = g.peerOf(r)
		}
		if p.ok {
			a = g.clientAddrOf(r, p)
		}
	}
	k := st.client
	if k == 0 {
		k = clientKey(st.caller.id.Account, a, st.plan)
	}
	if a.IsValid() {
		a = clientip.AddrGroup(a, st.plan.v6Prefix)
	}
	return k, a
}

// FlushLogShare writes the summaries of the refusal lines not written
// since the last ones (log.refusals_per_client); the process calls it at
// shutdown, before its last line, so that none is lost.
func (g *Gateway) FlushLogShare() { g.logShare.Flush() }
