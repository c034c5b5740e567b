package edge

import (
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/share"
)

// The admin listener's connections are a pool of admin.max_connections
// (docs/pools.md), shared between client addresses by the same dynamic
// threshold as the traffic listener's: one caller that leaves its
// connections idle (a leaky script, a curl loop without reuse) or stalls
// in its headers holds at most half of the share pool, and Prometheus and
// the probes from another address still find room. Callers on one host
// often share one address (127.0.0.1: the probes, a Prometheus sidecar,
// an operator's script), and a share cannot tell them apart; so a new
// connection of an address at its share first closes the oldest of that
// address's idle keep-alive connections (between two requests, as
// server.idle_timeout would close it later), and is refused (503
// too_many_connections at its first request, then closed) only when the
// address has none idle. The connections an address keeps busy (requests
// under way, headers being read) are never closed for another: a
// keep-alive connection is idle from its answer until the first bytes of
// its next request are read (sharedConn.Read), where net/http tells
// StateActive only once that request's header is whole.
//
// A connection refused still holds a place of the listener until its
// first request is answered (at most server.read_header_timeout), so the
// refused ones have a room of their own, a quarter of
// admin.max_connections (adminRefusedRoom), which the share pool leaves
// free: one caller stalling refused connections fills only that room, and
// a connection past its share beyond it is closed unanswered at once. The
// listener thus never holds more than admin.max_connections: the share
// pool's and the refused ones' together.

// adminRefusedRoom is the room for refused connections the admin
// listener keeps out of max connections: a quarter (none below 4).
func adminRefusedRoom(max int) int64 { return int64(max / 4) }

// ShareAdminConnections returns ln, whose connections are shared between
// the client addresses they come from (keyed as ShareConnections keys
// them, no address exempt: no proxy stands before the admin listener) in
// a pool of admin.max_connections less the refused connections' room, and
// the ConnState hook of the server that serves it, which tells the
// listener its idle connections. Wrap the listener that bounds the
// connections held (netutil.LimitListener at admin.max_connections): a
// connection closed for a newer one gives its place back at once. m
// counts the connections closed for the share; it may be nil.
func ShareAdminConnections(ln net.Listener, cfg *config.Config, m *metrics.Edge) (net.Listener, func(net.Conn, http.ConnState)) {
	room := adminRefusedRoom(cfg.Admin.MaxConnections)
	ac := &adminConns{idle: map[share.Key][]*sharedConn{}, refusedMax: room, metrics: m}
	l := &sharedListener{Listener: ln, pool: share.NewPool(int64(cfg.Admin.MaxConnections) - room),
		v6Prefix: cfg.ClientIP.IPv6Prefix, admin: ac}
	return l, ac.connState
}

// adminConns are the admin listener's idle keep-alive connections, by
// client address, oldest first (those its new connections may close),
// and the count of the connections it refuses.
type adminConns struct {
	mu   sync.Mutex
	idle map[share.Key][]*sharedConn
	// refused counts the connections held past their share, at most
	// refusedMax.
	refused    atomic.Int64
	refusedMax int64
	metrics    *metrics.Edge
}

// connState lists c while it is idle (http.StateIdle) and unlists it when
// it is anything else: a request under way, closed, hijacked.
func (ac *adminConns) connState(c net.Conn, s http.ConnState) {
	sc, ok := c.(*sharedConn)
	if !ok || sc.pool == nil {
		return // not counted in a share (past it): nothing to close for others
	}
	if s != http.StateIdle {
		ac.unlist(sc)
		return
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if !sc.listed.Load() {
		sc.listed.Store(true)
		ac.idle[sc.key] = append(ac.idle[sc.key], sc)
	}
}

// unlist takes sc off the idle connections: its next request has begun
// (sharedConn.Read), or it is busy or closed (connState).
func (ac *adminConns) unlist(sc *sharedConn) {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if !sc.listed.Load() {
		return
	}
	sc.listed.Store(false)
	list := ac.idle[sc.key]
	if i := slices.Index(list, sc); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(ac.idle, sc.key)
	} else {
		ac.idle[sc.key] = list
	}
}

// closeOldest closes the oldest idle connection of client k, giving its
// place back, and reports whether k had one.
func (ac *adminConns) closeOldest(k share.Key) bool {
	ac.mu.Lock()
	list := ac.idle[k]
	if len(list) == 0 {
		ac.mu.Unlock()
		return false
	}
	oldest := list[0]
	oldest.listed.Store(false)
	if len(list) == 1 {
		delete(ac.idle, k)
	} else {
		ac.idle[k] = list[1:]
	}
	ac.mu.Unlock()
	_ = oldest.Close() // its goroutine, waiting for a request, ends
	ac.metrics.AdminConnectionClosed(metrics.AdminIdleForNewer)
	return true
}

// refuse marks sc past its share, in a place of the refused connections'
// room given back when sc closes, and reports false when the room is
// full: sc is then to be closed unanswered.
func (ac *adminConns) refuse(sc *sharedConn) bool {
	if ac.refused.Add(1) > ac.refusedMax {
		ac.refused.Add(-1)
		ac.metrics.AdminConnectionClosed(metrics.AdminRefusedRoomFull)
		return false
	}
	sc.refusedOf, sc.past = ac, true // answered and closed at its first request
	ac.metrics.AdminConnectionClosed(metrics.AdminPastShare)
	return true
}
