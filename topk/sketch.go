// Package topk finds who is hitting the rate limits: per route, the
// identities and client addresses with the most requests and the most
// refusals over the last 1, 5 and 15 minutes, in bounded memory.
//
// Counting is done with Space-Saving (Metwally, Agrawal and El Abbadi,
// "Efficient Computation of Frequent and Top-k Elements in Data
// Streams", 2005): a Sketch keeps k counters; a key not yet counted
// takes over the smallest counter when all are in use, inheriting its
// count as possible error. A reported count is never below the key's true
// count and overestimates it by at most N/k, where N is the total weight
// counted; any key whose true count exceeds N/k is guaranteed to be kept.
package topk

import "slices"

// Entry is one key of a Sketch with its count and the most by which the
// count may exceed the true one.
type Entry[K comparable] struct {
	Key   K
	Count int64
	Err   int64
}

// Sketch is a Space-Saving summary of a stream of keys: at most k
// counters in a min-heap by count, with an index from key to heap slot,
// so Add costs O(log k) and allocates only when a new key is inserted
// into the index. It is not safe for concurrent use.
type Sketch[K comparable] struct {
	k     int
	n     int64 // total weight added
	heap  []Entry[K]
	index map[K]int
}

// NewSketch returns a Sketch of k counters (k ≥ 1).
func NewSketch[K comparable](k int) *Sketch[K] {
	k = max(k, 1)
	return &Sketch[K]{k: k, heap: make([]Entry[K], 0, k), index: make(map[K]int, k)}
}

// Add counts w more for key.
func (s *Sketch[K]) Add(key K, w int64) {
	s.n += w
	if i, ok := s.index[key]; ok {
		s.heap[i].Count += w
		s.down(i)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, Entry[K]{Key: key, Count: w})
		s.index[key] = len(s.heap) - 1
		s.up(len(s.heap) - 1)
		return
	}
	// Replace the smallest counter: the newcomer may have been counted
	// up to that many times while it was not tracked.
	min := &s.heap[0]
	delete(s.index, min.Key)
	min.Key, min.Err, min.Count = key, min.Count, min.Count+w
	s.index[key] = 0
	s.down(0)
}

// Total returns the total weight added.
func (s *Sketch[K]) Total() int64 { return s.n }

// Bound returns the largest overestimate of any count: Total/k.
func (s *Sketch[K]) Bound() int64 { return s.n / int64(s.k) }

// Reset empties the sketch, keeping its memory.
func (s *Sketch[K]) Reset() {
	s.n = 0
	s.heap = s.heap[:0]
	clear(s.index)
}

// Each calls f with every counter.
func (s *Sketch[K]) Each(f func(Entry[K])) {
	for _, e := range s.heap {
		f(e)
	}
}

// Top returns up to n counters, largest first.
func (s *Sketch[K]) Top(n int) []Entry[K] {
	out := slices.Clone(s.heap)
	SortEntries(out)
	return out[:min(n, len(out))]
}

// SortEntries sorts entries by count, largest first, then by smaller
// error.
func SortEntries[K comparable](es []Entry[K]) {
	slices.SortStableFunc(es, func(a, b Entry[K]) int {
		switch {
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		case a.Err != b.Err:
			if a.Err < b.Err {
				return -1
			}
			return 1
		}
		return 0
	})
}

func (s *Sketch[K]) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if h[p].Count <= h[i].Count {
			break
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch[K]) down(i int) {
	h := s.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].Count < h[l].Count {
			m = r
		}
		if h[i].Count <= h[m].Count {
			return
		}
		s.swap(i, m)
		i = m
	}
}

func (s *Sketch[K]) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	s.index[h[i].Key] = i
	s.index[h[j].Key] = j
}
