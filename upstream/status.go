package upstream

import "time"

// InstanceStatus is an instance's state at a moment, for metrics and the
// console.
type InstanceStatus struct {
	// Addr is the instance's host:port.
	Addr string
	// State is "healthy", "ejected" or "down" (failing its health check).
	State string
	// Reason is why it is ejected, or "".
	Reason string
	// EjectedUntil is when its ejection ends, or zero.
	EjectedUntil time.Time
	// Priority is its level (Endpoint.Priority).
	Priority uint16
	// Weight is its weight; Active its requests under way; Limit its
	// concurrency limit now.
	Weight uint32
	Active int64
	Limit  int
	// Requests counts the requests it ended, by outcome label.
	Requests map[string]uint64
	// Ejections counts its ejections, by reason label.
	Ejections map[string]uint64
}

// Counts are a service's counters.
type Counts struct {
	// Retries counts the requests moved to another instance.
	Retries uint64
	// Unavailable counts the requests that found no instance.
	Unavailable uint64
	// RetriesOverBudget and RetriesOverShare count the requests refused
	// a move to another instance: the retry budget was spent, or their
	// client held its share of it.
	RetriesOverBudget, RetriesOverShare uint64
}

// Counts returns the service's counters.
func (s *Service) Counts() Counts {
	return Counts{Retries: s.retried.Load(), Unavailable: s.refused.Load(),
		RetriesOverBudget: s.retryRefused[retryOverBudget].Load(), RetriesOverShare: s.retryRefused[retryOverShare].Load()}
}

// Status returns the state of each instance, in the order of the list.
func (s *Service) Status() []InstanceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]InstanceStatus, len(s.instances))
	for i, inst := range s.instances {
		st := InstanceStatus{Addr: inst.Addr, State: "healthy", Priority: inst.priority, Weight: inst.weight.Load(), Active: inst.active.Load(), Limit: inst.Controller.Limit(),
			Requests: map[string]uint64{}, Ejections: map[string]uint64{}}
		switch {
		case inst.checkFailed:
			st.State = "down"
		case inst.ejected:
			st.State, st.Reason = "ejected", inst.ejectedFor.String()
			st.EjectedUntil = inst.ejectedUntil
		}
		for o := Outcome(0); o < numOutcomes; o++ {
			st.Requests[o.String()] = inst.outcomes[o].Load()
		}
		for r := ReasonConsecutive5xx; r < numReasons; r++ {
			st.Ejections[r.String()] = inst.ejectedTotal[r].Load()
		}
		out[i] = st
	}
	return out
}
