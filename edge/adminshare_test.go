package edge

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/metrics"
)

// TestAdminConnectionShare: with admin.max_connections 8 the admin
// listener's share pool is 6 (2 kept for refused connections), so an
// address alone holds 3. A new connection of an address at its share
// closes the address's oldest idle connection and takes its place; with
// none idle it is refused (answered at its first request), within the
// refused connections' room, and past that room closed unanswered at
// once. Another address's connections are never closed for it, nor a busy
// one, and another address still finds room.
func TestAdminConnectionShare(t *testing.T) {
	const a, b = "192.0.2.1", "198.51.100.2"
	idle, busy, none := http.StateIdle, http.StateActive, http.StateNew
	for _, tt := range []struct {
		name  string
		peers []string
		state []http.ConnState // each connection's state once accepted
		want  []string         // counted, closed (for a newer one), past, or dropped
	}{
		{"under its share", []string{a, a, a}, []http.ConnState{idle, idle, idle},
			[]string{"counted", "counted", "counted"}},
		{"the oldest idle closed first", []string{a, a, a, a, a}, []http.ConnState{idle, busy, idle, none, none},
			[]string{"closed", "counted", "closed", "counted", "counted"}},
		{"busy ones kept, the next refused", []string{a, a, a, a}, []http.ConnState{busy, none, busy, none},
			[]string{"counted", "counted", "counted", "past"}},
		{"idle again, then busy: kept", []string{a, a, a, a}, []http.ConnState{busy, idle, busy, none},
			[]string{"counted", "closed", "counted", "counted"}},
		{"another address's idle ones kept", []string{b, b, a, a, a}, []http.ConnState{idle, idle, busy, busy, none},
			[]string{"counted", "counted", "counted", "counted", "past"}}, // b holds 2: a may hold 2
		{"refused room full: dropped", []string{a, a, a, a, a, a, b}, []http.ConnState{busy, busy, busy, none, none, none, none},
			[]string{"counted", "counted", "counted", "past", "past", "dropped", "counted"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Admin.MaxConnections = 8
			tl := &trackListener{peers: tt.peers}
			m, err := metrics.NewEdge(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ln, hook := ShareAdminConnections(tl, cfg, m)
			var accepted []net.Conn
			for {
				c, err := ln.Accept()
				if err != nil {
					break
				}
				accepted = append(accepted, c)
				hook(c, http.StateNew)
				st := tt.state[slices.Index(tl.conns, c.(*sharedConn).Conn.(*trackedConn))]
				hook(c, st)
				if st == busy { // busy again after a request: idle, then busy
					hook(c, idle)
					hook(c, busy)
				}
			}
			got := make([]string, len(tl.conns))
			for i, tc := range tl.conns {
				j := slices.IndexFunc(accepted, func(c net.Conn) bool { return c.(*sharedConn).Conn == tc })
				switch {
				case j < 0 && tc.closed.Load():
					got[i] = "dropped"
				case j < 0:
					got[i] = "not closed, not accepted"
				case tc.closed.Load():
					got[i] = "closed"
				case PastShare(accepted[j]):
					got[i] = "past"
				default:
					got[i] = "counted"
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("connections %v, want %v", got, tt.want)
			}
			for want, r := range map[string]metrics.AdminClose{"closed": metrics.AdminIdleForNewer, "past": metrics.AdminPastShare, "dropped": metrics.AdminRefusedRoomFull} {
				n := 0
				for _, g := range tt.want {
					if g == want {
						n++
					}
				}
				if c := testutil.ToFloat64(m.AdminClosedCounter(r)); c != float64(n) {
					t.Errorf("exgate_admin_connections_closed_total{reason=%q} = %v, want %d", r, c, n)
				}
			}
		})
	}
}

// TestAdminRefusedRoomGivenBack: a refused connection gives its place in
// the refused connections' room back when it closes.
func TestAdminRefusedRoomGivenBack(t *testing.T) {
	cfg := config.Default()
	cfg.Admin.MaxConnections = 4 // a share pool of 3, one refused at once
	const a = "192.0.2.1"
	tl := &trackListener{peers: []string{a, a, a, a}}
	ln, _ := ShareAdminConnections(tl, cfg, nil)
	var past []net.Conn
	for range 3 {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if PastShare(c) {
			past = append(past, c)
		}
	}
	if len(past) != 1 {
		t.Fatalf("%d connections past the share, want 1 (an address alone holds 2 of 3)", len(past))
	}
	past[0].Close()
	c, err := ln.Accept()
	if err != nil || !PastShare(c) {
		t.Fatalf("once the refused one closed, the next: %v, past its share %v; want refused again", err, err == nil && PastShare(c))
	}
}

// trackedConn is a connection from a chosen peer whose Close is recorded.
type trackedConn struct {
	net.Conn
	peer   net.Addr
	closed atomic.Bool
}

func (c *trackedConn) RemoteAddr() net.Addr { return c.peer }

func (c *trackedConn) Close() error {
	c.closed.Store(true)
	return nil
}

// trackListener accepts one connection from each address of peers in
// turn, keeping them.
type trackListener struct {
	net.Listener
	peers []string
	conns []*trackedConn
}

func (l *trackListener) Accept() (net.Conn, error) {
	if len(l.conns) == len(l.peers) {
		return nil, net.ErrClosed
	}
	ap := netip.AddrPortFrom(netip.MustParseAddr(l.peers[len(l.conns)]), uint16(1000+len(l.conns)))
	c := &trackedConn{peer: net.TCPAddrFromAddrPort(ap)}
	l.conns = append(l.conns, c)
	return c, nil
}
