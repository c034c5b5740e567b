package proxy

import (
	"hash/maphash"

	"github.com/exgate/exgate/limiter"
)

// clientKey is who a request counts as in the pools exgate shares between
// clients (the body budget, the backend's slots and queue; docs/pools.md):
// its verified account, else its address (an IPv6 address grouped by
// client_ip.ipv6_prefix, as the rate limits group it), hashed. An opaque
// token is not a client: anyone can invent one.
type clientKey uint64

// clientSeed seeds the keys of this process.
var clientSeed = maphash.MakeSeed()

// clientOf returns the key of st's client; the auth and client-address
// steps have run.
func clientOf(st *requestState, pl *plan) clientKey {
	k := struct {
		account string
		addr    [16]byte
	}{account: st.caller.id.Account}
	if k.account == "" && st.addr.IsValid() {
		k.addr = limiter.AddrGroup(st.addr, pl.v6Prefix).As16()
	}
	return clientKey(maphash.Comparable(clientSeed, k))
}
