package share

import "testing"

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
