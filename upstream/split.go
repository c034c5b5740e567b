package upstream

import "math/rand/v2"

// SplitTarget is one service of a split and its weight.
type SplitTarget struct {
	// Service is the service; nil (one the process did not start) makes
	// Pick and PickSticky return nil for its share.
	Service *Service
	Weight  uint32
}

// Split divides a route's requests between services by weight: a canary
// taking a small share of the traffic beside the service in place. Its
// zero value is not usable; build one with NewSplit. It is safe for
// concurrent use and never allocates.
type Split struct {
	targets []SplitTarget
	bounds  []uint64 // bounds[i]: the sum of the weights of targets 0..i
	total   uint64
}

// NewSplit returns the split of targets, in their order; targets of
// weight 0 get nothing. At least one target must weigh more than 0.
func NewSplit(targets []SplitTarget) *Split {
	s := &Split{targets: targets, bounds: make([]uint64, len(targets))}
	for i, t := range targets {
		s.total += uint64(t.Weight)
		s.bounds[i] = s.total
	}
	return s
}

// Pick returns a service drawn at random by weight (nil for the share of
// a target without one).
func (s *Split) Pick() *Service { return s.at(rand.Uint64N(s.total)) }

// PickSticky returns the service key always goes to while the weights
// stay as they are: its place among the weights is a hash of key
// (FNV-1a, the same in every exgate process, so that replicas agree).
// Moving weight between two targets while the total stays (a canary
// from 5/95 to 10/90) moves only the keys between the old and the new
// bound: the canary keeps the accounts it had and gains as many again.
func (s *Split) PickSticky(key string) *Service {
	return s.at(fnv1a(key) % s.total)
}

// fnv1a is the 64-bit FNV-1a hash of key (hash/fnv's, without its
// allocations).
func fnv1a(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// at returns the target whose share of the weights holds point.
func (s *Split) at(point uint64) *Service {
	for i, b := range s.bounds {
		if point < b {
			return s.targets[i].Service
		}
	}
	return s.targets[len(s.targets)-1].Service
}
