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

import (
	"hash/maphash"
	"math/bits"
	"slices"
)

// Entry is one key of a Sketch with its count and the most by which the
// count may exceed the true one.
type Entry[K comparable] struct {
	Key   K
	Count int64
	Err   int64
}

// Sketch is a Space-Saving summary of a stream of keys: at most k
// counters, a min-heap of them by count, and an index from key to
// counter (open addressing by the key's hash, which the caller may have
// computed already: AddHashed). A counter keeps its place while the heap
// moves only its number, so Add costs O(log k) and allocates nothing
// once the sketch holds k keys. It is not safe for concurrent use.
type Sketch[K comparable] struct {
	k     int
	n     int64 // total weight added
	floor int64 // the most a key not counted here may have been counted
	slots []counter[K]
	heap  []int32 // slot numbers, the smallest count first
	pos   []int32 // heap position of each slot
	index []int32 // slot number + 1 at the key's hash's place (0: free), linear probing
	shift uint    // 64 − log2(len(index)): a hash's place is its top bits
}

// counter is an Entry with its key's hash.
type counter[K comparable] struct {
	Entry[K]
	hash uint64
}

// seed hashes the keys of Add.
var seed = maphash.MakeSeed()

// NewSketch returns a Sketch of k counters (k ≥ 1).
func NewSketch[K comparable](k int) *Sketch[K] {
	k = max(k, 1)
	b := bits.Len(uint(2*k - 1)) // the index has 2k to 4k places
	return &Sketch[K]{
		k:     k,
		slots: make([]counter[K], 0, k),
		heap:  make([]int32, 0, k),
		pos:   make([]int32, 0, k),
		index: make([]int32, 1<<b),
		shift: uint(64 - b),
	}
}

// Add counts w more for key.
func (s *Sketch[K]) Add(key K, w int64) { s.AddHashed(key, maphash.Comparable(seed, key), w) }

// AddHashed counts w more for key, whose hash is h. Every key of a
// sketch, and of the sketches merged with it, must be hashed alike:
// either all by Add or all by AddHashed with one hash function.
func (s *Sketch[K]) AddHashed(key K, h uint64, w int64) {
	s.n += w
	i, at := s.find(key, h)
	if i >= 0 {
		s.slots[i].Count += w
		s.down(s.pos[i])
		return
	}
	if len(s.slots) < s.k {
		i := int32(len(s.slots))
		s.slots = append(s.slots, counter[K]{Entry[K]{Key: key, Count: w}, h})
		s.heap = append(s.heap, i)
		s.pos = append(s.pos, i)
		s.index[at] = i + 1
		s.up(i)
		return
	}
	// Replace the smallest counter: the newcomer may have been counted
	// up to that many times while it was not tracked, and so may any key
	// no longer tracked.
	i = s.heap[0]
	min := &s.slots[i]
	s.unindex(i)
	s.floor = max(s.floor, min.Count)
	min.Key, min.Err, min.Count, min.hash = key, min.Count, min.Count+w, h
	s.reindex(i)
	s.down(0)
}

// find returns the slot of key, or -1 and the free place of the index
// where it goes.
func (s *Sketch[K]) find(key K, h uint64) (slot int32, at uint64) {
	mask := uint64(len(s.index) - 1)
	for at = h >> s.shift; ; at = (at + 1) & mask {
		j := s.index[at] - 1
		if j < 0 {
			return -1, at
		}
		if s.slots[j].hash == h && s.slots[j].Key == key {
			return j, at
		}
	}
}

// reindex puts slot i in the index.
func (s *Sketch[K]) reindex(i int32) {
	mask := uint64(len(s.index) - 1)
	at := s.slots[i].hash >> s.shift
	for s.index[at] != 0 {
		at = (at + 1) & mask
	}
	s.index[at] = i + 1
}

// unindex takes slot i out of the index, moving back the places that
// followed it so that every key stays reachable from its hash's place.
func (s *Sketch[K]) unindex(i int32) {
	mask := uint64(len(s.index) - 1)
	at := s.slots[i].hash >> s.shift
	for s.index[at] != i+1 {
		at = (at + 1) & mask
	}
	free := at
	for j := (free + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		home := s.slots[s.index[j]-1].hash >> s.shift
		// j's key may fill the free place unless its home lies
		// cyclically after the free place, up to j.
		if (j-home)&mask >= (j-free)&mask {
			s.index[free], s.index[j] = s.index[j], 0
			free = j
		}
	}
	s.index[free] = 0
}

// Merge counts into s what o counted, keeping s's k counters: a key's
// count becomes the sum of its counts in both, each sketch that does not
// hold the key adding its Floor (as count and as error), and when more
// than k keys result only the k largest stay, the largest count dropped
// becoming the floor. Counts stay at least the true ones, and the error
// of every count, and the floor, at most Total/k (the mergeable
// Space-Saving of Agarwal et al., "Mergeable Summaries", 2012). Merging
// sketches that never dropped a key, into no more than k keys, adds
// exact counts exactly. Both must hash keys alike (AddHashed).
func (s *Sketch[K]) Merge(o *Sketch[K]) {
	if o.n == 0 {
		return
	}
	s.n += o.n
	for i := range s.slots {
		e := &s.slots[i]
		if j, _ := o.find(e.Key, e.hash); j >= 0 {
			e.Count, e.Err = e.Count+o.slots[j].Count, e.Err+o.slots[j].Err
		} else {
			e.Count, e.Err = e.Count+o.floor, e.Err+o.floor
		}
	}
	for _, e := range o.slots {
		if i, _ := s.find(e.Key, e.hash); i < 0 {
			e.Count, e.Err = e.Count+s.floor, e.Err+s.floor
			s.slots = append(s.slots, e)
		}
	}
	s.floor += o.floor
	if len(s.slots) > s.k {
		s.prune()
	}
	clear(s.index)
	s.heap, s.pos = s.heap[:0], s.pos[:0]
	for i := range s.slots {
		s.reindex(int32(i))
		s.heap = append(s.heap, int32(i))
		s.pos = append(s.pos, int32(i))
	}
	for i := int32(len(s.heap)/2 - 1); i >= 0; i-- {
		s.down(i)
	}
}

// prune keeps the k largest counts, the largest dropped becoming the
// floor.
func (s *Sketch[K]) prune() {
	slices.SortStableFunc(s.slots, func(a, b counter[K]) int { return compareEntries(a.Entry, b.Entry) })
	s.floor = max(s.floor, s.slots[s.k].Count)
	s.slots = s.slots[:s.k]
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
		f(e.Entry)
	}
}

// Top returns up to n counters, largest first.
func (s *Sketch[K]) Top(n int) []Entry[K] {
	out := make([]Entry[K], len(s.slots))
	for i, e := range s.slots {
		out[i] = e.Entry
	}
	SortEntries(out)
	return out[:min(n, len(out))]
}

// SortEntries sorts entries by count, largest first, then by smaller
// error.
func SortEntries[K comparable](es []Entry[K]) { slices.SortStableFunc(es, compareEntries[K]) }

func compareEntries[K comparable](a, b Entry[K]) int {
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
