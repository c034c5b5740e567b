package upstream

import (
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exgate/exgate/overload"
)

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
	// multiplexed is whether the instance carries many requests on a
	// connection: an https one offered HTTP/2, until it answers in
	// HTTP/1.1 (Answered). Written under svc.mu.
	multiplexed atomic.Bool

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

// newInstance returns the instance of s at u.
func newInstance(s *Service, u *url.URL) *Instance {
	inst := &Instance{URL: u, Host: u.Hostname(), svc: s}
	inst.multiplexed.Store(u.Scheme == "https" && s.opts.HTTP2)
	inst.Controller = overload.New(s.overloadOf(inst.multiplexed.Load()))
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

// idle reports whether no request is under way at the instance: none
// counted from Pick to Done, and no slot of its limit taken.
func (i *Instance) idle() bool { return i.active.Load() == 0 && i.Controller.InFlight() == 0 }

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

// Answered tells the instance the HTTP major version of an answer it
// gave. An https instance offered HTTP/2 that answers in HTTP/1.1 (ALPN
// fell back: a TLS terminator without h2 in front of it) carries one
// request on each connection, as an http one does, and its limit is then
// kept within upstream.max_conns_per_host, the cancels' headroom
// included (Options.MaxConns); one that answers in HTTP/2 again gets its
// own limit back: with a limit past its connections, reads holding them
// would leave a cancel that took its headroom's slot waiting in the
// connection pool's queue. It does not allocate; it locks only when the
// protocol changes.
func (i *Instance) Answered(major int) {
	m := major >= 2
	s := i.svc
	if i.multiplexed.Load() == m || s.opts.MaxConns == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i.multiplexed.Load() != m {
		i.multiplexed.Store(m)
		i.Controller.Configure(s.overloadOf(m))
	}
}
