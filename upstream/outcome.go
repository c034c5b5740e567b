package upstream

import (
	"net/http"
	"time"
)

// Outcome is how a request to an instance ended, as passive outlier
// detection reads it.
type Outcome uint8

// Outcomes.
const (
	// Success: the instance answered with a status below 500.
	Success Outcome = iota
	// ServerError: the instance answered 5xx, or failed (reset, timeout)
	// after the request reached it.
	ServerError
	// ConnectFailure: no connection to the instance could be made (refused,
	// timed out, DNS): nothing of the request reached it.
	ConnectFailure
	// Abandoned: the request ended for a reason of its own (the client
	// went away, the body failed): it says nothing of the instance.
	Abandoned
	numOutcomes
)

// String returns the outcome's metric label.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case ServerError:
		return "server_error"
	case ConnectFailure:
		return "connect_failure"
	}
	return "abandoned"
}

// Kind is which of an instance's paths a request took: its reads or its
// writes. Outlier detection counts an instance's server errors of each
// apart as well as together, so that an instance whose order path fails
// (its link to the matching engine down) while its reads succeed is
// ejected: the reads' successes would end a single run of failures.
type Kind uint8

// Kinds.
const (
	// Read is a GET or HEAD: market data, balances, an order's status.
	Read Kind = iota
	// Write is any other method: orders, cancels.
	Write
	numKinds
)

// KindOf returns the kind of a request of the method.
func KindOf(method string) Kind {
	if method == http.MethodGet || method == http.MethodHead {
		return Read
	}
	return Write
}

// Done ends a request Pick counted at the instance, with how it went and
// its kind.
func (i *Instance) Done(o Outcome, k Kind) {
	i.active.Add(-1)
	i.svc.active.Add(-1)
	i.outcomes[o].Add(1)
	out := &i.svc.opts.Outlier
	switch o {
	case Success:
		if i.consec5xx.Load() != 0 {
			i.consec5xx.Store(0)
		}
		if i.consec5xxOf[k].Load() != 0 {
			i.consec5xxOf[k].Store(0)
		}
		if i.consecConnect.Load() != 0 {
			i.consecConnect.Store(0)
		}
	case ServerError:
		i.consecConnect.Store(0)
		n := out.Consecutive5xx
		if n <= 0 {
			break
		}
		all, ofKind := i.consec5xx.Add(1), i.consec5xxOf[k].Add(1)
		switch {
		case int(all) >= n:
			i.svc.eject(i, ReasonConsecutive5xx)
		case int(ofKind) >= n:
			i.svc.eject(i, k.reason())
		}
	case ConnectFailure:
		if n := out.ConsecutiveConnectFailures; n > 0 && int(i.consecConnect.Add(1)) >= n {
			i.svc.eject(i, ReasonConnectFailure)
		}
	}
}

// reason is the ejection reason of a run of server errors of kind k.
func (k Kind) reason() Reason {
	if k == Read {
		return ReasonReads5xx
	}
	return ReasonWrites5xx
}

// eject takes inst out of the rotation for BaseEjectionTime times the
// number of its ejections (capped at MaxEjectionTime), unless that would
// eject more of the fleet than MaxEjectionPercent allows.
func (s *Service) eject(inst *Instance, why Reason) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst.ejected || inst.removed {
		return
	}
	inst.consec5xx.Store(0)
	for k := range inst.consec5xxOf {
		inst.consec5xxOf[k].Store(0)
	}
	inst.consecConnect.Store(0)
	out := &s.opts.Outlier
	ejected := 0
	for _, o := range s.instances {
		if o.ejected {
			ejected++
		}
	}
	if out.MaxEjectionPercent <= 0 || (ejected+1)*100 > out.MaxEjectionPercent*len(s.instances) && ejected > 0 {
		return
	}
	maxD := out.MaxEjectionTime
	if maxD <= 0 {
		maxD = 10 * out.BaseEjectionTime
	}
	if inst.ejections > 0 && s.now().Sub(inst.returnedAt) > maxD {
		inst.ejections = 0 // back and well for longer than any ejection: the count starts again
	}
	inst.ejected, inst.ejectedFor = true, why
	inst.ejections++
	inst.ejectedTotal[why].Add(1)
	d := min(out.BaseEjectionTime*time.Duration(inst.ejections), maxD)
	inst.ejectedUntil = s.now().Add(d)
	time.AfterFunc(d, func() { s.unEject(inst) })
	s.rebuild()
	s.notify(Event{Kind: Ejected, Instance: inst, Reason: why})
}

// unEject returns inst to the rotation when its ejection ends. An
// instance no longer listed ends its ejection too, unseen, in case it is
// named again while it drains (Update).
func (s *Service) unEject(inst *Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !inst.ejected {
		return
	}
	inst.ejected, inst.ejectedFor, inst.ejectedUntil = false, ReasonNone, time.Time{}
	inst.returnedAt = s.now()
	if inst.removed {
		return
	}
	s.rebuild()
	s.notify(Event{Kind: Returned, Instance: inst})
}

// notify reports ev, with the service's state after it, to OnChange.
// s.mu is held.
func (s *Service) notify(ev Event) {
	if s.opts.OnChange != nil {
		ev.Service, ev.State = s, s.picks.Load().state
		s.opts.OnChange(ev)
	}
}
