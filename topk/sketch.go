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
// counters, a min-heap of them by count, and an index from key to
// counter. A counter keeps its place while the heap moves only its number,
// so Add costs O(log k), writes the index only when a key is inserted or
// replaced, and allocates only when the index grows. It is not safe for
// concurrent use.
type Sketch[K comparable] struct {
	k     int
	n     int64 // total weight added
	floor int64 // the most a key not counted here may have been counted
	slots []Entry[K]
	heap  []int32 // slot numbers, the smallest count first
	pos   []int32 // heap position of each slot
	index map[K]int32
}

// NewSketch returns a Sketch of k counters (k ≥ 1).
func NewSketch[K comparable](k int) *Sketch[K] {
	k = max(k, 1)
	return &Sketch[K]{
		k:     k,
		slots: make([]Entry[K], 0, k),
		heap:  make([]int32, 0, k),
		pos:   make([]int32, 0, k),
		index: make(map[K]int32, k),
	}
}

// Add counts w more for key.
func (s *Sketch[K]) Add(key K, w int64) {
	s.n += w
	if i, ok := s.index[key]; ok {
		s.slots[i].Count += w
		s.down(s.pos[i])
		return
	}
	if len(s.slots) < s.k {
		i := int32(len(s.slots))
		s.slots = append(s.slots, Entry[K]{Key: key, Count: w})
		s.heap = append(s.heap, i)
		s.pos = append(s.pos, i)
		s.index[key] = i
		s.up(i)
		return
	}
	// Replace the smallest counter: the newcomer may have been counted
	// up to that many times while it was not tracked, and so may any key
	// no longer tracked.
	i := s.heap[0]
	min := &s.slots[i]
	delete(s.index, min.Key)
	s.floor = max(s.floor, min.Count)
	min.Key, min.Err, min.Count = key, min.Count, min.Count+w
	s.index[key] = i
	s.down(0)
}

// Merge counts into s what o counted, keeping s's k counters: a key's
// count becomes the sum of its counts in both, each sketch that does not
// hold the key adding its Floor (as count and as error), and when more
// than k keys result only the k largest stay, the largest count dropped
// becoming the floor. Counts stay at least the true ones, and the error
// of every count, and the floor, at most Total/k (the mergeable
// Space-Saving of Agarwal et al., "Mergeable Summaries", 2012). Merging
// sketches that never dropped a key, into no more than k keys, adds
// exact counts exactly.
func (s *Sketch[K]) Merge(o *Sketch[K]) {
	if o.n == 0 {
		return
	}
	s.n += o.n
	for i := range s.slots {
		e := &s.slots[i]
		if j, ok := o.index[e.Key]; ok {
			e.Count, e.Err = e.Count+o.slots[j].Count, e.Err+o.slots[j].Err
		} else {
			e.Count, e.Err = e.Count+o.floor, e.Err+o.floor
		}
	}
	for _, e := range o.slots {
		if _, ok := s.index[e.Key]; !ok {
			s.slots = append(s.slots, Entry[K]{Key: e.Key, Count: e.Count + s.floor, Err: e.Err + s.floor})
		}
	}
	s.floor += o.floor
	if len(s.slots) > s.k {
		SortEntries(s.slots)
		s.floor = max(s.floor, s.slots[s.k].Count)
		s.slots = s.slots[:s.k]
	}
	clear(s.index)
	s.heap, s.pos = s.heap[:0], s.pos[:0]
	for i, e := range s.slots {
		s.index[e.Key] = int32(i)
		s.heap = append(s.heap, int32(i))
		s.pos = append(s.pos, int32(i))
	}
	for i := int32(len(s.heap)/2 - 1); i >= 0; i-- {
		s.down(i)
	}
}

// Total returns the total weight added.
func (s *Sketch[K]) Total() int64 { return s.n }

// Bound returns the largest overestimate of any count: Total/k.
func (s *Sketch[K]) Bound() int64 { return s.n / int64(s.k) }

// Floor returns the most a key the sketch does not hold may have been
// counted: zero until a key was dropped, and at most every count held.
func (s *Sketch[K]) Floor() int64 { return s.floor }

// Reset empties the sketch, keeping its memory.
func (s *Sketch[K]) Reset() {
	s.n, s.floor = 0, 0
	s.slots, s.heap, s.pos = s.slots[:0], s.heap[:0], s.pos[:0]
	clear(s.index)
}

// Each calls f with every counter.
func (s *Sketch[K]) Each(f func(Entry[K])) {
	for _, e := range s.slots {
		f(e)
	}
}

// Top returns up to n counters, largest first.
func (s *Sketch[K]) Top(n int) []Entry[K] {
	out := slices.Clone(s.slots)
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

func (s *Sketch[K]) up(i int32) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if s.slots[h[p]].Count <= s.slots[h[i]].Count {
			break
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch[K]) down(i int32) {
	h := s.heap
	n := int32(len(h))
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.slots[h[r]].Count < s.slots[h[l]].Count {
			m = r
		}
		if s.slots[h[i]].Count <= s.slots[h[m]].Count {
			return
		}
		s.swap(i, m)
		i = m
	}
}

func (s *Sketch[K]) swap(i, j int32) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	s.pos[h[i]] = i
	s.pos[h[j]] = j
}
