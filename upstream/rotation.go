package upstream

import (
	"cmp"
	"slices"
)

// pickSet is the immutable set Pick chooses from, rebuilt whenever an
// instance enters or leaves the rotation.
type pickSet struct {
	inst  []*Instance
	cum   []uint64 // cumulative weights; nil when every weight is equal
	total uint64
	state State
}

// newPickSet returns the pick set of set, with the service's state st.
func newPickSet(set []*Instance, st State) *pickSet {
	ps := &pickSet{inst: set, state: st}
	var equal = true
	for _, inst := range set {
		ps.total += uint64(inst.weight.Load())
		equal = equal && inst.weight.Load() == set[0].weight.Load()
	}
	if !equal {
		ps.cum = make([]uint64, len(set))
		var c uint64
		for i, inst := range set {
			c += uint64(inst.weight.Load())
			ps.cum[i] = c
		}
	}
	return ps
}

// State is a service's health at a moment.
type State struct {
	// Instances is the size of the fleet.
	Instances int
	// Healthy counts the instances in the rotation: passing their health
	// check and not ejected.
	Healthy int
	// Ejected counts the instances ejected by outlier detection.
	Ejected int
	// Down counts the instances failing their active health check.
	Down int
	// Panic is true while the service balances across every instance
	// of its level in use that accepts connections, because too few are
	// healthy.
	Panic bool
	// Failover is true while the service sends requests to instances of
	// a higher priority than its lowest (SRV backups), because no lower
	// level is healthy enough; Priority is the level in use.
	Failover bool
	Priority uint16
}

// Available reports whether the service has an instance a request may
// be sent to.
func (st State) Available() bool { return st.Healthy > 0 || st.Panic }

// State returns the service's health now.
func (s *Service) State() State { return s.picks.Load().state }

// Instances returns the service's instances now, in the order of its
// list.
func (s *Service) Instances() []*Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Instance(nil), s.instances...)
}

// Rotation returns the instances requests are sent to now: the level in
// use, its healthy instances (every one that accepts connections in
// panic mode). Instances of other levels, ejected or down ones are not
// in it.
func (s *Service) Rotation() []*Instance {
	return slices.Clone(s.picks.Load().inst)
}

// rebuild computes the pick set from the instances' states. s.mu is held.
//
// The rotation is one level of instances, the lowest priority that is
// healthy enough: one with a healthy instance, and at least
// PanicThreshold percent of its instances healthy. When no level is, it
// is the lowest level with an instance that accepts connections, and
// there, as with a single level, panic mode balances across every
// instance that accepts connections when too few are healthy.
func (s *Service) rebuild() {
	st := State{Instances: len(s.instances)}
	levels := s.levels(&st)
	var in *level
	for i := range levels {
		if l := &levels[i]; len(l.healthy) > 0 && len(l.healthy)*100 >= s.opts.PanicThreshold*l.n {
			in = l
			break
		}
	}
	for i := 0; in == nil && i < len(levels); i++ {
		if len(levels[i].reachable) > 0 {
			in = &levels[i]
		}
	}
	var set []*Instance
	if in != nil {
		set, st.Priority, st.Failover = in.healthy, in.priority, in.priority != levels[0].priority
		if len(in.healthy)*100 < s.opts.PanicThreshold*in.n && len(in.reachable) > len(in.healthy) {
			st.Panic, set = true, in.reachable
		}
	}
	was := s.picks.Load().inst
	joined := false
	for _, inst := range set {
		if !inst.inRotation.Load() {
			inst.Controller.Readmit()
			inst.inRotation.Store(true)
			joined = true
		}
	}
	s.picks.Store(newPickSet(set, st))
	s.retire(was, set)
	if joined { // its slots may be free: a cancel waiting elsewhere may take one
		s.roomFreed()
	}
}

// retire takes the instances of was that are not in set out of the
// rotation, after the pick set without them is published. An instance
// that leaves it (ejected, down, gone from the list, its level no longer
// in use) ends the waits of the requests queued at its limit and queues
// none until it is back (overload.Controller.Evict): nothing of them has
// left exgate, and their callers pick another instance for them
// (Instance.InRotation), from the new set. s.mu is held.
func (s *Service) retire(was, set []*Instance) {
	for _, inst := range was {
		if !slices.Contains(set, inst) && inst.inRotation.Swap(false) {
			inst.Controller.Evict()
		}
	}
}

// level is the instances of one priority: how many, those that are
// healthy, and those that accept connections (healthy, or ejected for
// server errors).
type level struct {
	priority           uint16
	n                  int
	healthy, reachable []*Instance
}

// levels sorts the instances into their levels, lowest priority first,
// and counts them by state into st. s.mu is held.
func (s *Service) levels(st *State) []level {
	var ls []level
	for _, inst := range s.instances {
		i := slices.IndexFunc(ls, func(l level) bool { return l.priority == inst.priority })
		if i < 0 {
			ls, i = append(ls, level{priority: inst.priority}), len(ls)
		}
		l := &ls[i]
		l.n++
		switch {
		case inst.checkFailed:
			st.Down++
			continue
		case inst.ejected:
			st.Ejected++
			if inst.ejectedFor == ReasonConnectFailure {
				continue // refuses connections: not even in panic
			}
		default:
			st.Healthy++
			l.healthy = append(l.healthy, inst)
		}
		l.reachable = append(l.reachable, inst)
	}
	slices.SortFunc(ls, func(a, b level) int { return cmp.Compare(a.priority, b.priority) })
	return ls
}

// Event is a change of a service's state, for OnChange.
type Event struct {
	Kind    EventKind
	Service *Service
	// Instance is the instance that changed; nil when the list did.
	Instance *Instance
	// Reason says why Instance was ejected (Kind Ejected).
	Reason Reason
	// State is the service's state after the change.
	State State
}

// EventKind says what changed.
type EventKind uint8

// Event kinds.
const (
	ListChanged EventKind = iota // Update replaced the list
	Ejected                      // outlier detection ejected Instance
	Returned                     // Instance's ejection ended
	MarkedDown                   // Instance failed its health checks
	MarkedUp                     // Instance passed its health checks again
)

// String returns the kind's log and metric label.
func (k EventKind) String() string {
	return [...]string{"list_changed", "ejected", "returned", "marked_down", "marked_up"}[k]
}
