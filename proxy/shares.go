package proxy

import (
	"hash/maphash"
	"net/netip"
	"sync"

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
	if a := st.caller.id.Account; a != "" {
		return clientKey(maphash.Comparable(clientSeed, clientID{account: a}))
	}
	var a netip.Addr
	if st.addr.IsValid() {
		a = limiter.AddrGroup(st.addr, pl.v6Prefix)
	}
	return addrKey(a)
}

// addrKey returns the key of the client address a (already grouped).
func addrKey(a netip.Addr) clientKey {
	var id clientID
	if a.IsValid() {
		id.addr = a.As16()
	}
	return clientKey(maphash.Comparable(clientSeed, id))
}

// clientID is what a clientKey hashes: an account, else an address.
type clientID struct {
	account string
	addr    [16]byte
}

// sharedPool is a quantity shared between clients by a dynamic
// threshold, the scheme of shared-memory switch buffers (Choudhury and
// Hahne): a client may take a unit only while it holds fewer than are
// left free (n units are taken as n such units in a row; the backend's
// slots follow the same rule, overload.Client). A client alone holds at
// most half of the pool;
// n clients taking all they can hold at most 1/(n+1) of it each and leave
// as much free, so a client that holds nothing always finds room, and a
// client's excess is refused to it alone. It bounds the bytes of request
// bodies held whole at once (server.max_buffered_bytes: the bytes that
// have arrived, never more) and a route's requests at the backend
// (max_in_flight).
type sharedPool struct {
	mu   sync.Mutex
	size int64
	used int64
	held map[clientKey]int64
}

func newSharedPool(size int64) *sharedPool {
	return &sharedPool{size: size, held: make(map[clientKey]int64)}
}

// take charges n units to client c, reporting false (and taking nothing)
// when c's share has no room for them.
func (b *sharedPool) take(c clientKey, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	free := b.size - b.used - n // once taken
	h := b.held[c] + n
	if free < 0 || h > free+1 {
		return false
	}
	b.used += n
	b.held[c] = h
	return true
}

// give gives back n units client c took.
func (b *sharedPool) give(c clientKey, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if h := b.held[c] - n; h > 0 {
		b.held[c] = h
	} else {
		delete(b.held, c)
	}
}

// Buffered returns the units held (of the body budget: bytes).
func (b *sharedPool) Buffered() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Clients returns how many clients hold units.
func (b *sharedPool) Clients() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}
