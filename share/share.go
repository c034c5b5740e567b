// Package share shares a pool between clients by a dynamic threshold, the
// scheme of shared-memory switch buffers (Choudhury and Hahne): a client
// may take a unit only while it holds fewer than are left free. exgate's
// pools (docs/pools.md) use it: the bytes of request bodies held whole,
// a route's requests at the backend, client connections.
package share

import (
	"hash/maphash"
	"net/netip"
	"sync"
)

// Key is who a unit is charged to: a verified account, else a client
// address (grouped as the rate limits group it), hashed. An opaque token
// is not a client: anyone can invent one.
type Key uint64

// seed seeds the keys of this process.
var seed = maphash.MakeSeed()

// id is what a Key hashes: an account, else an address.
type id struct {
	account string
	addr    [16]byte
}

// AccountKey returns the key of a verified account.
func AccountKey(account string) Key {
	return Key(maphash.Comparable(seed, id{account: account}))
}

// AddrKey returns the key of the client address a (already grouped); the
// zero Addr is one client, that of requests with no address.
func AddrKey(a netip.Addr) Key {
	var k id
	if a.IsValid() {
		k.addr = a.As16()
	}
	return Key(maphash.Comparable(seed, k))
}

// Pool is a quantity shared between clients: a client may take a unit
// only while it holds fewer than are left free (n units are taken as n
// such units in a row; the backend's slots follow the same rule,
// overload.Client). A client alone holds at most half of the pool; n
// clients taking all they can hold at most 1/(n+1) of it each and leave
// as much free, so a client that holds nothing always finds room, and a
// client's excess is refused to it alone.
type Pool struct {
	mu   sync.Mutex
	size int64
	used int64
	held map[Key]int64
}

// NewPool returns a pool of size units.
func NewPool(size int64) *Pool {
	return &Pool{size: size, held: make(map[Key]int64)}
}

// Resize sets the pool's size to size. The units held stay held: a pool
// resized below them refuses every Take until enough are given back.
func (b *Pool) Resize(size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.size = size
}

// Take charges n units to client c, reporting false (and taking nothing)
// when c's share has no room for them.
func (b *Pool) Take(c Key, n int64) bool {
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

// Give gives back n units client c took.
func (b *Pool) Give(c Key, n int64) {
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
func (b *Pool) Buffered() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Clients returns how many clients hold units.
func (b *Pool) Clients() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}
