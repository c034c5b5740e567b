package proxy

import (
	"net/netip"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/share"
)

// clientOf returns who st's request counts as in the pools exgate shares
// between clients (the body budget, the backend's slots and queue;
// docs/pools.md): its verified account, else its address (an IPv6
// address grouped by client_ip.ipv6_prefix, as the rate limits group
// it). The auth and client-address steps have run.
func clientOf(st *requestState, pl *requestPlan) share.Key {
	return clientKey(st.caller.id.Account, st.addr, pl)
}

// clientKey is clientOf's key for a request of account (none: "") from
// addr.
func clientKey(account string, addr netip.Addr, pl *requestPlan) share.Key {
	if account != "" {
		return share.AccountKey(account)
	}
	var a netip.Addr
	if addr.IsValid() {
		a = clientip.AddrGroup(addr, pl.v6Prefix)
	}
	return share.AddrKey(a)
}
