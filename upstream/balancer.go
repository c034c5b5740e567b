package upstream

import (
	"math/rand/v2"
)

// Pick chooses the instance for a request and counts the request as under
// way there until Done is called on it: two instances drawn at random (by
// weight, when weights differ), the one with fewer requests under way per
// unit of weight. It returns ErrUnavailable when no instance is in the
// rotation. Pick does not allocate.
func (s *Service) Pick() (*Instance, error) {
	inst := s.picks.Load().choose(nil)
	if inst == nil {
		s.refused.Add(1)
		return nil, ErrUnavailable
	}
	inst.active.Add(1)
	s.active.Add(1)
	return inst, nil
}

// Peek returns the instance Pick would choose now, without counting a
// request there, or nil when none is in the rotation: for a decision made
// before the request is sent (the overload step's early shedding), whose
// request then goes there (PickPeeked).
func (s *Service) Peek() *Instance { return s.picks.Load().choose(nil) }

// PickPeeked is Pick for a request a decision was made for at peeked, an
// instance Peek returned: the request goes there, so that the instance
// that decided is the one it is sent to, and counts as under way there
// until Done; when peeked has left the rotation meanwhile, it is Pick.
// It does not allocate.
func (s *Service) PickPeeked(peeked *Instance) (*Instance, error) {
	for _, inst := range s.picks.Load().inst {
		if inst == peeked {
			inst.active.Add(1)
			s.active.Add(1)
			return inst, nil
		}
	}
	return s.Pick()
}

// PickOther moves a request counted at from (Pick, PickPeeked) to the
// instance of the rotation, other than from, that room reports true for
// and that has the fewest requests under way per unit of weight: for a
// request whose instance has no slot for it now while another has (the
// balancer compares loads, not limits, and an instance whose limit
// shrank may be full with fewer requests under way than a peer with
// room). It returns nil, the request still counted at from, when none
// has room.
func (s *Service) PickOther(from *Instance, room func(*Instance) bool) *Instance {
	best := s.other(from, room)
	if best == nil {
		return nil
	}
	s.move(from, best)
	return best
}

// TakeOther is PickOther for a request that takes a slot where it goes:
// of the instances room reports true for, the one PickOther would
// choose, when take (its Controller's TryAcquire) takes a slot there. It
// returns nil, the request still counted at from, when none has room or
// the chosen one's slot went to another request first.
func (s *Service) TakeOther(from *Instance, room, take func(*Instance) bool) *Instance {
	best := s.other(from, room)
	if best == nil || !take(best) {
		return nil
	}
	s.move(from, best)
	return best
}

// other returns the instance of the rotation, other than from, that room
// reports true for and that has the fewest requests under way per unit
// of weight, or nil.
func (s *Service) other(from *Instance, room func(*Instance) bool) *Instance {
	var best *Instance
	for _, inst := range s.picks.Load().inst {
		if inst == from || !room(inst) {
			continue
		}
		if best == nil || inst.active.Load()*int64(best.weight.Load()) < best.active.Load()*int64(inst.weight.Load()) {
			best = inst
		}
	}
	return best
}

// move counts a request counted at from as under way at to instead.
func (s *Service) move(from, to *Instance) {
	to.active.Add(1)
	s.active.Add(1)
	from.uncount()
}

// choose draws two distinct candidates and keeps the less loaded one by
// weight; avoid, when set and not alone, is never returned.
func (ps *pickSet) choose(avoid *Instance) *Instance {
	n := len(ps.inst)
	switch {
	case n == 0:
		return nil
	case n == 1:
		return ps.inst[0]
	}
	a := ps.draw(avoid, nil)
	b := ps.draw(avoid, a)
	// Fewer requests under way per unit of weight wins: a.active/a.weight
	// < b.active/b.weight, multiplied out. At a tie (an idle fleet) the
	// first draw wins, so that idle shares follow the weights.
	if b.active.Load()*int64(a.weight.Load()) < a.active.Load()*int64(b.weight.Load()) {
		return b
	}
	return a
}

// draw returns an instance at random, by weight, other than avoid and
// other (a few tries, then the first such in order); when there is no
// such instance, any other than avoid.
func (ps *pickSet) draw(avoid, other *Instance) *Instance {
	for range 4 {
		if inst := ps.drawOne(); inst != avoid && inst != other {
			return inst
		}
	}
	for _, inst := range ps.inst {
		if inst != avoid && inst != other {
			return inst
		}
	}
	if other != nil && other != avoid {
		return other
	}
	return ps.inst[0]
}

func (ps *pickSet) drawOne() *Instance {
	if ps.cum == nil {
		return ps.inst[rand.IntN(len(ps.inst))]
	}
	r := rand.Uint64N(ps.total)
	lo, hi := 0, len(ps.cum)-1
	for lo < hi {
		m := (lo + hi) / 2
		if ps.cum[m] > r {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return ps.inst[lo]
}
