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
	held holdings
}

// NewPool returns a pool of size units.
func NewPool(size int64) *Pool {
	return &Pool{size: size, held: holdings{slots: make([]holding, minHoldings)}}
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
	i := b.held.find(c)
	h := b.held.slots[i].n + n
	if free < 0 || h > free+1 {
		return false
	}
	b.used += n
	b.held.set(i, c, h)
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
	i := b.held.find(c)
	switch h := b.held.slots[i].n - n; {
	case h > 0:
		b.held.slots[i].n = h
	case b.held.slots[i].n != 0:
		b.held.remove(i)
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
	return b.held.count
}

// holdings are the units each client holds, more than none, in a table
// of open addressing probed linearly from the slot a Key's low bits name:
// a Key is a hash already (maphash, seeded per process), so it is not
// hashed again, and a Take or a Give finds its client's count in one
// probe, where a Go map looked the count up and stored it, hashing the
// Key twice (about 700 instructions of an order's four).
type holdings struct {
	slots []holding // a power of two long, at most half full
	count int       // slots in use
}

// holding is a slot of holdings: a client's key and the units it holds;
// n == 0: free.
type holding struct {
	key Key
	n   int64
}

// minHoldings is the length holdings start at.
const minHoldings = 8

// find returns the index of k's slot, or of the free slot it would take.
func (h *holdings) find(k Key) int {
	mask := len(h.slots) - 1
	i := int(uint64(k)) & mask
	for h.slots[i].n != 0 && h.slots[i].key != k {
		i = (i + 1) & mask
	}
	return i
}

// set makes k, whose slot find returned as i, hold n units (none: k is
// not added), and grows the table past half full.
func (h *holdings) set(i int, k Key, n int64) {
	if n == 0 {
		return
	}
	if h.slots[i].n == 0 {
		h.count++
	}
	h.slots[i] = holding{key: k, n: n}
	if 2*h.count > len(h.slots) {
		old := h.slots
		h.slots = make([]holding, 2*len(old))
		for _, s := range old {
			if s.n != 0 {
				h.slots[h.find(s.key)] = s
			}
		}
	}
}

// remove frees slot i and moves back each slot after it, up to a free
// one, that its probe would no longer reach (backward-shift deletion):
// no slot's probe from its home meets a free slot before it.
func (h *holdings) remove(i int) {
	mask := len(h.slots) - 1
	for j := (i + 1) & mask; h.slots[j].n != 0; j = (j + 1) & mask {
		home := int(uint64(h.slots[j].key)) & mask
		// The slot at j stays unless its home lies cyclically outside
		// (i, j]: then its probe passes i, which is to be free.
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			h.slots[i] = h.slots[j]
			i = j
		}
	}
	h.slots[i] = holding{}
	h.count--
}
