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

// TestLiveUntilTheLastEntryExpires checks that Live is true while an entry
// put may hold, through shorter entries put after a longer one, and
// false from the latest expiry on, when every Get misses.
func TestLiveUntilTheLastEntryExpires(t *testing.T) {
	m := New[int](64)
	steps := []struct {
		name string
		put  int64 // an entry's until; 0: none
		at   int64
		live bool
	}{
		{name: "empty", at: 0, live: false},
		{name: "one entry", put: 100, at: 99, live: true},
		{name: "a shorter one after it", put: 50, at: 60, live: true},
		{name: "at the longest expiry", at: 100, live: false},
		{name: "a new one", put: 200, at: 150, live: true},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.put != 0 {
				m.Put(uint64(i), i, s.put, 0)
			}
			if got := m.Live(s.at); got != s.live {
				t.Errorf("Live(%d) = %v, want %v", s.at, got, s.live)
			}
			if s.live {
				return
			}
			for h := range uint64(len(steps)) {
				if _, _, ok := m.Get(h, s.at); ok {
					t.Errorf("Live(%d) is false, but Get(%d) found an entry", s.at, h)
				}
			}
		})
	}
}
