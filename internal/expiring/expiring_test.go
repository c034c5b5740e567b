package expiring

import (
	"sync"
	"sync/atomic"
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

// TestAdvance: Advance is a GCRA bucket of limit/step calls, refilled one
// call a step, decided under the lock: callers at one instant get
// exactly its depth between them, whatever their number.
func TestAdvance(t *testing.T) {
	const step, limit = 10, 50 // a bucket of 5
	cases := []struct {
		name string
		at   []int64 // the instants of the calls
		want int     // how many are allowed
	}{
		{"a burst of its depth", []int64{0, 0, 0, 0, 0, 0, 0}, 5},
		{"one back a step later", []int64{0, 0, 0, 0, 0, 0, 10, 10}, 6},
		{"full again once expired", []int64{0, 0, 0, 0, 0, 1000, 1000, 1000, 1000, 1000, 1000}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := New[struct{}](100)
			got := 0
			for _, at := range tc.at {
				if m.Advance(1, at, step, limit) {
					got++
				}
			}
			if got != tc.want {
				t.Fatalf("%d allowed, want %d", got, tc.want)
			}
		})
	}
	t.Run("concurrent callers", func(t *testing.T) {
		m := New[struct{}](100)
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					if m.Advance(7, 0, step, limit) {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n.Load() != 5 {
			t.Fatalf("%d allowed at one instant, want the depth, 5", n.Load())
		}
	})
}
