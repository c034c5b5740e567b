package expiring

import (
	"testing"
)

func TestMapExpiresAndStaysBounded(t *testing.T) {
	m := New[string](640)
	m.Put(1, "a", 100, 0)
	if v, until, ok := m.Get(1, 99); !ok || v != "a" || until != 100 {
		t.Errorf("before it expires: %q %d %v", v, until, ok)
	}
	if _, _, ok := m.Get(1, 100); ok {
		t.Error("an entry is still there at its expiry")
	}
	m.Put(2, "b", 100, 0)
	m.Remove(2)
	if _, _, ok := m.Get(2, 0); ok {
		t.Error("a removed entry is still there")
	}
	for h := uint64(0); h < 10000; h++ {
		m.Put(h, "x", int64(h)+1000, 0)
	}
	if n := m.Len(); n > 640 {
		t.Errorf("%d entries, want at most 640", n)
	}
}
