package upstream

import (
	"math"
	"net/http"
	"sync/atomic"
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

// Client is who a request was sent for, as outlier detection tells
// clients apart: an opaque key the caller derives (the gateway's: a
// verified account, else a client address, as its shared pools and rate
// limits key them). The zero Client is exgate's own requests (the market
// catalogue's fetch), one client.
type Client uint64

// Done ends a request Pick counted at the instance, with how it went, its
// kind and the client it was sent for.
func (i *Instance) Done(o Outcome, k Kind, who Client) {
	i.uncount()
	i.outcomes[o].Add(1)
	out := &i.svc.opts.Outlier
	switch o {
	case Success:
		if i.inRun.Load()&runBits(k) != 0 {
			i.endRuns(k)
		}
		if i.consecConnect.Load() != 0 {
			i.consecConnect.Store(0)
		}
	case ServerError:
		i.consecConnect.Store(0)
		if out.Consecutive5xx > 0 || out.FailurePercentage > 0 {
			if why := i.failed(k, who, out); why != ReasonNone {
				i.svc.eject(i, why)
			}
		}
	case ConnectFailure:
		if n := out.ConsecutiveConnectFailures; n > 0 && int(i.consecConnect.Add(1)) >= n {
			i.svc.eject(i, ReasonConnectFailure)
		}
	}
	if out.FailurePercentage > 0 && o <= ServerError && int(i.windows[k].requests.Add(1)) >= out.FailurePercentageRequestVolume &&
		i.judge(k, out) {
		i.svc.eject(i, ReasonFailurePercentage)
	}
}

// window is an instance's last requests of a kind, for failure-percentage
// ejection: how many ended (a success or a server error), and their
// failures with the clients who made them (guarded by runMu).
type window struct {
	requests atomic.Int32
	failures run
}

// judge ends the window of kind k once it holds
// FailurePercentageRequestVolume requests, and reports whether its
// instance is to be ejected: at least FailurePercentage percent of them
// failed, no client made more than two thirds of the failures, and at
// least two are of clients other than the one that failed most. A client
// whose requests fail everywhere (a poison order) makes most of an
// instance's failures, however many it sends: its window is not judged.
func (i *Instance) judge(k Kind, out *Outlier) bool {
	i.runMu.Lock()
	defer i.runMu.Unlock()
	w := &i.windows[k]
	r := int(w.requests.Load())
	if r < out.FailurePercentageRequestVolume {
		return false // another request ended it meanwhile
	}
	f := w.failures
	w.requests.Store(0)
	w.failures = run{}
	top := int(f.top())
	return int(f.n)*100 >= out.FailurePercentage*r && 3*top <= 2*int(f.n) && int(f.n)-top >= 2
}

// runOf is the index in Instance.runs of the run of kind k's requests
// (runs[0] is the run over all of them).
func runOf(k Kind) int { return 1 + int(k) }

// runBits are the bits of Instance.inRun of the runs a request of kind k
// counts in: the run over all and its kind's.
func runBits(k Kind) uint32 { return 1 | 1<<runOf(k) }

// endRuns ends the runs a success of kind k ends: the run over all and
// kind k's.
func (i *Instance) endRuns(k Kind) {
	i.runMu.Lock()
	i.runs[0], i.runs[runOf(k)] = run{}, run{}
	i.inRun.Store(i.inRun.Load() &^ runBits(k))
	i.runMu.Unlock()
}

// failed counts a server error of kind k, sent for who, in the runs it
// belongs to and its kind's window, and returns why the instance is to be
// ejected for a run (ReasonNone: it is not).
func (i *Instance) failed(k Kind, who Client, out *Outlier) Reason {
	i.runMu.Lock()
	defer i.runMu.Unlock()
	if out.FailurePercentage > 0 {
		i.windows[k].failures.add(who)
	}
	n := out.Consecutive5xx
	if n <= 0 {
		return ReasonNone
	}
	i.inRun.Store(i.inRun.Load() | runBits(k))
	all, ofKind := &i.runs[0], &i.runs[runOf(k)]
	all.add(who)
	ofKind.add(who)
	switch {
	case all.ejects(n):
		return ReasonConsecutive5xx
	case ofKind.ejects(n):
		return k.reason()
	}
	return ReasonNone
}

// endAllRuns ends every run of server errors and of failed connects, and
// every window (the instance is being ejected).
func (i *Instance) endAllRuns() {
	i.runMu.Lock()
	i.runs = [len(i.runs)]run{}
	i.inRun.Store(0)
	for k := range i.windows {
		i.windows[k].requests.Store(0)
		i.windows[k].failures = run{}
	}
	i.runMu.Unlock()
	i.consecConnect.Store(0)
}

// runClients is how many clients a run tells apart: past them, it counts
// as Space-Saving counts heavy hitters (Metwally, Agrawal and El Abbadi),
// in a fixed array of the instance, never a map.
const runClients = 4

// run is a run of server errors at an instance (or a window's failures):
// how many, and of which clients. A client whose requests make the
// backend fail (an order shape that trips a bug of the matching engine)
// fails on every instance: its own failures tell nothing of the instance,
// and one client must not eject the fleet for everyone.
//
// The counts of clients sum to n. A new client, once runClients are
// held, takes the place of the one with the fewest failures, with that
// count plus one: a client's count is never under its own failures, and
// any client that made more than n/runClients of them is held. So top
// is never under the failures of the client that failed most, and a
// client that makes most of a run's failures cannot pass for others'.
type run struct {
	n       int32
	used    int8
	clients [runClients]Client
	of      [runClients]int32
}

// add counts a failure of who's request.
func (r *run) add(who Client) {
	if r.n == math.MaxInt32 {
		return // one client alone, for ever: its count says no more
	}
	r.n++
	for j := range r.used {
		if r.clients[j] == who {
			r.of[j]++
			return
		}
	}
	if int(r.used) < runClients {
		r.clients[r.used], r.of[r.used] = who, 1
		r.used++
		return
	}
	least := 0
	for j := 1; j < runClients; j++ {
		if r.of[j] < r.of[least] {
			least = j
		}
	}
	r.clients[least] = who
	r.of[least]++
}

// ejects reports whether the run ejects its instance at n
// (Consecutive5xx): it holds n failures, and at least two of them (one,
// when n is 1 or 2) are of clients other than the one that failed most in
// it. One client's failures never eject alone, and with another client's
// they need two of that client's (or of others): a single failure of a
// well client's request, which a healthy backend answers now and then,
// does not complete a poisoning client's run.
func (r *run) ejects(n int) bool {
	return int(r.n) >= n && int(r.n-r.top()) >= min(2, max(n-1, 1))
}

// top returns the count of the client that failed most in the run: never
// under its failures (add).
func (r *run) top() int32 {
	top := int32(0)
	for j := range r.used {
		top = max(top, r.of[j])
	}
	return top
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
	inst.endAllRuns()
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
