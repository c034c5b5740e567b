package upstream

import (
	"errors"
	"net/http"
	"net/url"
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
	// instance, an https one when HTTP2 is false, or one offered HTTP/2
	// that answers in HTTP/1.1: Instance.Answered) a connection
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
	retries retryShares   // of which retries, by client
	retried atomic.Uint64 // retries made
	refused atomic.Uint64 // requests that found no instance
	// retryRefused counts the retries Retry refused, by why.
	retryRefused [numRetryRefusals]atomic.Uint64

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
	inst.Controller.Configure(s.overloadOf(inst.multiplexed.Load())) // a reload's, if one came meanwhile
	return inst
}
