package share

import (
	"math/rand/v2"
	"testing"
)

// TestPoolShares: a client may take a unit only while it holds fewer
// than are left free: alone, half the pool; with others taking all they
// can, less, and a client that holds nothing always finds room.
func TestPoolShares(t *testing.T) {
	b := NewPool(1000)
	fill := func(c Key) int64 {
		var n int64
		for b.Take(c, 10) {
			n += 10
		}
		return n
	}
	if got := fill(1); got != 500 {
		t.Errorf("a client alone took %d of 1000, want 500", got)
	}
	if got := fill(2); got != 250 {
		t.Errorf("a second client took %d of the 500 left, want 250", got)
	}
	if got := fill(3); got != 120 {
		t.Errorf("a third client took %d of the 250 left, want 120", got)
	}
	if !b.Take(4, 10) {
		t.Error("a client that holds nothing found no room")
	}
	if b.Take(1, 1) || b.Take(2, 1) {
		t.Error("a client at its share took more")
	}
	b.Give(1, 500)
	if !b.Take(2, 10) || b.Clients() != 3 || b.Buffered() != 390 {
		t.Errorf("after the first client left: %d clients hold %d bytes, want 3 and 390", b.Clients(), b.Buffered())
	}
	if b.Take(5, 1001) {
		t.Error("a body larger than the budget was taken")
	}
}

// TestPoolAsAMap: the pool's holdings (a table of its own, probed from a
// Key's low bits) answer every Take, Give and count as a Go map of the
// units each client holds did, through growth and removals, with keys
// that share their low bits (one slot's probe runs through the others)
// and keys that do not, whose probes run past the table's end.
func TestPoolAsAMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(i uint64) Key
	}{
		{"spread", func(i uint64) Key { return Key(i * 0x9e3779b97f4a7c15) }},
		{"low bits shared", func(i uint64) Key { return Key(i<<20 | 5) }},
		{"low bits near", func(i uint64) Key { return Key(i<<20 | i%3) }},
		{"probes past the end", func(i uint64) Key { return Key(i<<20 | (0xfffff - i%3)) }},
		{"mixed", func(i uint64) Key { return Key(i<<20 | (0xfffff-i%3)*(i%2)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			b := NewPool(10000)
			held, used := map[Key]int64{}, int64(0) // the model
			for op := range 200000 {
				c := tc.key(rng.Uint64N(64))
				n := 1 + rng.Int64N(300)
				if rng.IntN(2) == 0 {
					free := b.size - used - n
					want := free >= 0 && held[c]+n <= free+1
					if got := b.Take(c, n); got != want {
						t.Fatalf("op %d: Take(%x, %d) = %v, want %v", op, c, n, got, want)
					}
					if want {
						used += n
						held[c] += n
					}
				} else if h := held[c]; h > 0 {
					n = min(n, h)
					b.Give(c, n)
					used -= n
					if held[c] -= n; held[c] == 0 {
						delete(held, c)
					}
				}
				if b.Clients() != len(held) || b.Buffered() != used {
					t.Fatalf("op %d: %d clients hold %d, want %d and %d", op, b.Clients(), b.Buffered(), len(held), used)
				}
			}
			for c, h := range held {
				b.Give(c, h)
			}
			if b.Clients() != 0 || b.Buffered() != 0 {
				t.Errorf("all given back: %d clients hold %d", b.Clients(), b.Buffered())
			}
		})
	}
}
