package upstream

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exgate/exgate/overload"
)

// ErrUnavailable is Pick's error when no instance of the service can be
// sent a request: it has none, or none accepts connections (every one
// fails its health check or was ejected for refused connects).
var ErrUnavailable = errors.New("upstream: the service has no available instance")

// Options configure a Service. The zero value is usable: no outlier
// ejection, no panic mode, and time.Now as the clock.
type Options struct {
	// Outlier configures passive outlier ejection.
	Outlier Outlier
	// PanicThreshold is the share of the fleet, in percent, below which
	// the healthy instances alone are not trusted with the load: the
	// service then balances across every instance that accepts
	// connections, ejected ones included (Envoy's healthy panic
	// threshold). 0 turns panic mode off.
	PanicThreshold int
	// RetryBudget bounds the requests retried on another instance.
	RetryBudget RetryBudget
	// Overload configures each instance's Controller (ConfigureOverload
	// changes it).
	Overload overload.Options
	// MaxConns is the most connections to each instance
	// (upstream.max_conns_per_host; 0: no cap). Over HTTP/1.1 (an http
	// instance, or an https one when HTTP2 is false) a connection
	// carries one request at a time, and the instance's Controller keeps
	// its limit within them (overload.Options.Conns, overloadOf).
	MaxConns int
	// HTTP2 is whether https instances are offered HTTP/2, which carries
	// many requests on a connection.
	HTTP2 bool
	// Transport reaches the service's instances when they are dialled
	// apart from the other services' (a tls block of their own: its CA,
	// client certificate and server name, in a connection pool of its
	// own). Nil means the fleet's Transport (Fleet.Run's, the gateway's).
	Transport http.RoundTripper
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnChange, when set, is called after an instance is ejected or
	// returned, fails or passes its health check, or the list changes,
	// with the service's state after it. It must not call back into the
	// Service's mutating methods.
	OnChange func(Event)
}

// Outlier configures passive outlier ejection: an instance that answers a
// run of server errors, or refuses a run of connections, is taken out of
// the rotation for a time that grows with each ejection.
type Outlier struct {
	// Consecutive5xx ejects an instance after this many server errors
	// (5xx answers, resets and timeouts after the request was sent) in a
	// row, counted over all its requests and over each Kind apart (its
	// writes' run goes on through successful reads, and the reverse),
	// once the run is not one client's alone: at least two of its
	// failures are of clients other than the one that failed most in it
	// (one, when Consecutive5xx is 1 or 2). 0 means never.
	Consecutive5xx int
	// ConsecutiveConnectFailures ejects an instance after this many
	// failed connects in a row. 0 means never.
	ConsecutiveConnectFailures int
	// BaseEjectionTime is how long a first ejection lasts; the n-th lasts
	// n times as long, up to MaxEjectionTime.
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps an ejection. Zero means 10 × BaseEjectionTime.
	MaxEjectionTime time.Duration
	// MaxEjectionPercent is the largest share of the fleet ejected at
	// once, in percent; at least one instance may be ejected while it is
	// above 0.
	MaxEjectionPercent int
	// FailurePercentage ejects an instance whose requests of a Kind
	// failed (server errors) in at least this share, in percent, of its
	// last FailurePercentageRequestVolume requests of that kind, once
	// those failures are not mostly one client's: no client made more
	// than two thirds of them, and at least two are of other clients. An
	// instance failing half of its orders at random, its successes ending
	// every run, is ejected so. 0 means never.
	FailurePercentage int
	// FailurePercentageRequestVolume is how many requests of a kind a
	// share is judged over (a connect failure or an abandoned request
	// counts in none).
	FailurePercentageRequestVolume int
}

// Service is a named set of backend instances and the state that chooses
// between them. It is safe for concurrent use.
type Service struct {
	name string
	opts Options
	now  func() time.Time

	active  atomic.Int64  // requests under way at the service's instances
	retries atomic.Int64  // of which retries
	retried atomic.Uint64 // retries made
	refused atomic.Uint64 // requests that found no instance

	mu        sync.Mutex
	overload  overload.Options // each instance's Controller's, guarded by mu
	instances []*Instance      // every instance of the current list, in its order
	byKey     map[string]*Instance
	// draining holds the instances that left the list with requests
	// under way, by URL, until those end: one named again meanwhile is
	// the same instance (reclaim).
	draining map[string]*Instance
	picks    atomic.Pointer[pickSet]

	// room is closed, and replaced, when an instance's Controller has
	// room for a cancel (its OnRoom: roomFreed) while a request watches
	// it (Watch, watched): a cancel waiting at another instance then
	// tries to take that slot (TakeOther).
	roomMu  sync.Mutex
	room    chan struct{}
	watched atomic.Bool
}

// NewService returns a service named name, with no instances until
// Update is called.
func NewService(name string, opts Options) *Service {
	s := &Service{name: name, opts: opts, now: opts.Now, byKey: map[string]*Instance{}, draining: map[string]*Instance{},
		overload: opts.Overload, room: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	s.picks.Store(&pickSet{})
	return s
}

// RoundTripper returns how the service's instances are reached: its own
// Transport (Options.Transport), else fleet, the fleet's.
func (s *Service) RoundTripper(fleet http.RoundTripper) http.RoundTripper {
	if s.opts.Transport != nil {
		return s.opts.Transport
	}
	return fleet
}

// Name returns the service's name.
func (s *Service) Name() string { return s.name }

// Instance is one backend instance of a service.
type Instance struct {
	// URL is the instance's base URL.
	URL *url.URL
	// Addr is the instance's host:port (the port of its scheme when the
	// URL names none): the operator's address of a backend, used as its
	// label in metrics and logs.
	Addr string
	// Host and Port are Addr's parts.
	Host string
	Port int

	// Controller is the instance's own adaptive concurrency limit (the
	// overload step takes a slot of it before a request goes), with each
	// client's share of it: an instance slower than its peers admits
	// fewer requests at once, and one instance's queue never holds
	// requests another could serve.
	Controller *overload.Controller

	svc *Service
	// weight is written under svc.mu (Update) and read without it by
	// Pick, through pick sets built before or after the write.
	weight atomic.Uint32
	active atomic.Int64
	// inRotation is whether the instance is in the pick set now, written
	// by rebuild under svc.mu.
	inRotation atomic.Bool

	// runs are the instance's runs of server errors, over all its
	// requests and over each Kind apart (runOf), with the clients whose
	// requests failed in them; guarded by runMu. inRun has bit i set while
	// runs[i] holds a failure, so that a success, the common case, ends
	// none without taking runMu.
	runMu         sync.Mutex
	runs          [1 + numKinds]run
	inRun         atomic.Uint32
	windows       [numKinds]window // of each Kind, for failure-percentage ejection
	consecConnect atomic.Int32
	outcomes      [numOutcomes]atomic.Uint64 // requests ended, by outcome
	ejectedTotal  [numReasons]atomic.Uint64  // ejections, by reason

	// guarded by svc.mu
	priority     uint16 // its level: Endpoint.Priority
	ejected      bool
	ejectedFor   Reason
	ejections    int       // how many times it was ejected; a healthy run ends the count
	returnedAt   time.Time // when its last ejection ended
	ejectedUntil time.Time
	checkFailed  bool // the active health check marks it down
	checkRun     int  // checks in a row whose result goes against checkFailed
	removed      bool
}

// Reason says why an instance was ejected.
type Reason uint8

// Ejection reasons.
const (
	ReasonNone              Reason = iota
	ReasonConsecutive5xx           // a run of server errors
	ReasonConnectFailure           // a run of refused or failed connects
	ReasonReads5xx                 // a run of server errors of its reads, its writes succeeding
	ReasonWrites5xx                // a run of server errors of its writes (orders), its reads succeeding
	ReasonFailurePercentage        // too large a share of its last requests of a kind failed
	numReasons
)

// String returns the reason's metric label.
func (r Reason) String() string {
	switch r {
	case ReasonConsecutive5xx:
		return "consecutive_5xx"
	case ReasonConnectFailure:
		return "connect_failure"
	case ReasonReads5xx:
		return "consecutive_5xx_reads"
	case ReasonWrites5xx:
		return "consecutive_5xx_writes"
	case ReasonFailurePercentage:
		return "failure_percentage"
	}
	return "none"
}

// Active returns the requests under way at the instance.
func (i *Instance) Active() int64 { return i.active.Load() }

// Service returns the service the instance belongs to.
func (i *Instance) Service() *Service { return i.svc }

// Update replaces the service's list of instances with eps. An instance
// whose URL is named again keeps its state (requests under way, failure
// counters, ejection, its concurrency limit and the slots taken of it);
// one no longer named leaves the rotation at once (its requests under
// way finish), and is the same instance again if named while any of them
// is still under way (a pod whose readiness flapped: the requests it
// serves still count against its limit and its load); a repeated URL
// counts once, with the weight of its first mention.
func (s *Service) Update(eps []Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make([]*Instance, 0, len(eps))
	keep := make(map[string]*Instance, len(eps))
	for _, ep := range eps {
		key := ep.URL.String()
		if _, dup := keep[key]; dup {
			continue
		}
		inst := s.byKey[key]
		if inst == nil {
			inst = s.reclaim(key, ep.URL)
		}
		inst.weight.Store(max(ep.Weight, 1))
		inst.priority = ep.Priority
		keep[key] = inst
		next = append(next, inst)
	}
	for key, inst := range s.draining {
		if inst.idle() {
			delete(s.draining, key)
		}
	}
	for key, inst := range s.byKey {
		if keep[key] == nil {
			inst.removed = true
			if !inst.idle() {
				s.draining[key] = inst
			}
		}
	}
	s.instances, s.byKey = next, keep
	s.rebuild()
	s.notify(Event{Kind: ListChanged})
}

// reclaim returns the instance at u named again: the one that left the
// list with requests still under way, if any is, with its state, else a
// new one. s.mu is held.
func (s *Service) reclaim(key string, u *url.URL) *Instance {
	inst := s.draining[key]
	if inst == nil || inst.idle() {
		return newInstance(s, u)
	}
	delete(s.draining, key)
	inst.removed = false
	inst.Controller.Configure(s.overloadOf(u)) // a reload's, if one came meanwhile
	return inst
}

// idle reports whether no request is under way at the instance: none
// counted from Pick to Done, and no slot of its limit taken.
func (i *Instance) idle() bool { return i.active.Load() == 0 && i.Controller.InFlight() == 0 }

// newInstance returns the instance of s at u.
func newInstance(s *Service, u *url.URL) *Instance {
	inst := &Instance{URL: u, Host: u.Hostname(), svc: s, Controller: overload.New(s.overloadOf(u))}
	inst.Port, _ = strconv.Atoi(u.Port())
	if inst.Port == 0 {
		inst.Port = 80
		if u.Scheme == "https" {
			inst.Port = 443
		}
	}
	inst.Addr = net.JoinHostPort(inst.Host, strconv.Itoa(inst.Port))
	return inst
}

// pickSet is the immutable set Pick chooses from, rebuilt whenever an
// instance enters or leaves the rotation.
type pickSet struct {
	inst  []*Instance
	cum   []uint64 // cumulative weights; nil when every weight is equal
	total uint64
	state State
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

// InRotation reports whether requests are sent to the instance now: it
// is in the rotation (Rotation). A request picked for it that has not yet
// gone (it waited for a slot of its limit) is better picked again
// elsewhere when it is not.
func (i *Instance) InRotation() bool { return i.inRotation.Load() }

// Unpick ends a request Pick counted at the instance that never went
// there (picked again elsewhere, Service.Pick, after its instance left
// the rotation while it waited): no outcome is counted.
func (i *Instance) Unpick() { i.uncount() }

// uncount takes a request Pick counted off the instance's and its
// service's counts of requests in flight.
func (i *Instance) uncount() {
	i.active.Add(-1)
	i.svc.active.Add(-1)
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

// Watch returns a channel closed when an instance of the service may
// have a slot free for a cancel (its Controller's OnRoom after Watch, or
// an instance entering the rotation): for a cancel waiting at a full
// instance, which then tries TakeOther (overload.Elsewhere).
func (s *Service) Watch() <-chan struct{} {
	s.roomMu.Lock()
	defer s.roomMu.Unlock()
	s.watched.Store(true)
	return s.room
}

// roomFreed closes the channel Watch returned, when any request watches
// it: an instance has room for a cancel. Every instance's Controller
// calls it on most releases (overload.Options.OnRoom): unwatched, it
// reads one atomic.
func (s *Service) roomFreed() {
	if !s.watched.Load() {
		return
	}
	s.roomMu.Lock()
	if s.watched.Swap(false) {
		close(s.room)
		s.room = make(chan struct{})
	}
	s.roomMu.Unlock()
}

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

// ConfigureOverload sets the options of every instance's Controller, and
// of those of instances to come.
func (s *Service) ConfigureOverload(o overload.Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.overload = o
	for _, inst := range s.instances {
		inst.Controller.Configure(s.overloadOf(inst.URL))
	}
}

// overloadOf returns the options of the Controller of the instance at u:
// the service's, its limit kept within the instance's connections when
// each carries one request (Options.MaxConns). s.mu is held.
func (s *Service) overloadOf(u *url.URL) overload.Options {
	o := s.overload
	o.OnRoom = s.roomFreed
	if s.opts.MaxConns > 0 && (u.Scheme != "https" || !s.opts.HTTP2) {
		o.Conns = s.opts.MaxConns
	}
	return o
}

// Retry moves a request of class c from prev, which failed it, to
// another instance of the rotation, within the retry budget: at most
// RetryBudget.Percent of the service's requests under way may be retries
// at once, and RetryBudget.Min whatever the share; a cancel may go over
// it by an eighth of it, at least one (cancelRetries), so that other
// requests' retries (a surge of reads moved off a failing instance) never
// leave a cancel that reached no instance refused. It returns nil when
// the budget is spent or no other instance is in the rotation; otherwise
// the request counts as a retry until EndRetry, and as under way at the
// instance returned until Done is called on it (as it must still be on
// prev).
func (s *Service) Retry(prev *Instance, c overload.Class) *Instance {
	b := s.opts.RetryBudget
	allowed := max(int64(b.Min), s.active.Load()*int64(b.Percent)/100)
	if c == overload.Cancel && allowed > 0 { // a budget of 0 retries nothing, cancels included
		allowed += max((allowed+cancelRetries-1)/cancelRetries, 1)
	}
	if s.retries.Add(1) > allowed {
		s.retries.Add(-1)
		return nil
	}
	inst := s.picks.Load().choose(prev)
	if inst == nil || inst == prev {
		s.retries.Add(-1)
		return nil
	}
	s.retried.Add(1)
	inst.active.Add(1)
	s.active.Add(1)
	return inst
}

// cancelRetries is the divisor of the retry budget that gives the
// retries only cancels take, over it: as the overload limit's cancels'
// headroom, an eighth.
const cancelRetries = 8

// EndRetry ends a retry Retry allowed, once its round trip has ended.
func (s *Service) EndRetry() { s.retries.Add(-1) }

// RetryBudget bounds the retries under way at a service at once.
type RetryBudget struct {
	// Percent is the share of the service's requests under way that may
	// be retries.
	Percent int
	// Min is how many retries may be under way whatever the share.
	Min int
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
