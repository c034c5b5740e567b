package upstream

import (
	"fmt"
	"hash/fnv"
	"testing"
)

// TestSplitWeights draws many requests and counts where they went: each
// service's share is its weight's, within generous bounds (the draws are
// random, not timed).
func TestSplitWeights(t *testing.T) {
	stable, canary, none := NewService("stable", Options{}), NewService("canary", Options{}), NewService("none", Options{})
	for _, tt := range []struct {
		name    string
		targets []SplitTarget
		want    map[*Service]float64
	}{
		{"90/10", []SplitTarget{{stable, 90}, {canary, 10}}, map[*Service]float64{stable: 0.9, canary: 0.1}},
		{"50/50", []SplitTarget{{stable, 1}, {canary, 1}}, map[*Service]float64{stable: 0.5, canary: 0.5}},
		{"a weight of 0", []SplitTarget{{none, 0}, {stable, 3}, {canary, 1}}, map[*Service]float64{stable: 0.75, canary: 0.25, none: 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSplit(tt.targets)
			const n = 100_000
			got := map[*Service]int{}
			for range n {
				got[s.Pick()]++
			}
			for svc, share := range tt.want {
				// A binomial count's standard deviation is at most 158
				// here; 1,000 is more than six of them.
				if c := got[svc]; float64(c) < share*n-1000 || float64(c) > share*n+1000 {
					t.Errorf("%s got %d of %d, want about %.0f", svc.Name(), c, n, share*n)
				}
			}
		})
	}
}

// TestSplitSticky: one key always goes to one service; over many keys
// the shares follow the weights; moving weight between the two keeps
// every key the canary had.
func TestSplitSticky(t *testing.T) {
	stable, canary := NewService("stable", Options{}), NewService("canary", Options{})
	s := NewSplit([]SplitTarget{{stable, 95}, {canary, 5}})
	const accounts = 20_000
	before := map[string]*Service{}
	inCanary := 0
	for i := range accounts {
		key := fmt.Sprintf("account-%d", i)
		first := s.PickSticky(key)
		for range 5 {
			if got := s.PickSticky(key); got != first {
				t.Fatalf("%s went to %s, then to %s", key, first.Name(), got.Name())
			}
		}
		before[key] = first
		if first == canary {
			inCanary++
		}
	}
	if inCanary < accounts*5/100-400 || inCanary > accounts*5/100+400 {
		t.Errorf("%d of %d accounts in the canary of weight 5/100, want about %d", inCanary, accounts, accounts*5/100)
	}
	wider := NewSplit([]SplitTarget{{stable, 90}, {canary, 10}})
	moved := 0
	for key, svc := range before {
		now := wider.PickSticky(key)
		if svc == canary && now != canary {
			t.Fatalf("%s left the canary when its weight grew", key)
		}
		if now != svc {
			moved++
		}
	}
	if moved == 0 || moved > accounts*10/100 {
		t.Errorf("%d accounts moved when the canary went from 5 to 10 of 100, want about %d", moved, accounts*5/100)
	}
}

func TestFNV1a(t *testing.T) {
	for _, key := range []string{"", "a", "account-42", "7f3a9c"} {
		h := fnv.New64a()
		h.Write([]byte(key))
		if got, want := fnv1a(key), h.Sum64(); got != want {
			t.Errorf("fnv1a(%q) = %x, want hash/fnv's %x", key, got, want)
		}
	}
}

func BenchmarkSplitPickSticky(b *testing.B) {
	s := NewSplit([]SplitTarget{{NewService("stable", Options{}), 95}, {NewService("canary", Options{}), 5}})
	b.ReportAllocs()
	for b.Loop() {
		s.PickSticky("a3f9c2d1e0b7")
	}
}
