package edge

import (
	"crypto/tls"
	"net"
	"net/netip"
	"testing"

	"github.com/pires/go-proxyproto"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/share"
)

// TestMaxConnectionsDefault: without server.max_connections the pool is
// the process's file-descriptor limit less what is kept for the backend,
// Redis and files.
func TestMaxConnectionsDefault(t *testing.T) {
	cfg := config.Default()
	if n := MaxConnections(cfg); n < connReserve {
		t.Errorf("MaxConnections = %d, want at least %d", n, connReserve)
	}
	cfg.Server.MaxConnections = 500
	if n := MaxConnections(cfg); n != 500 {
		t.Errorf("MaxConnections = %d, want 500 as set", n)
	}
}

// TestPastShareUnwraps: a connection past its share is told as such under
// TLS and under the PROXY protocol, as net/http holds it.
func TestPastShareUnwraps(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	counted := &sharedConn{Conn: a, pool: share.NewPool(4)}
	past := &sharedConn{Conn: a, past: true}
	for _, tt := range []struct {
		name string
		conn net.Conn
		want bool
	}{
		{"plain, counted", counted, false},
		{"plain, past its share", past, true},
		{"TLS, past its share", tls.Server(past, &tls.Config{}), true},
		{"PROXY protocol, past its share", proxyproto.NewConn(past), true},
		{"TLS over the PROXY protocol, counted", tls.Server(proxyproto.NewConn(counted), &tls.Config{}), false},
		{"not shared", a, false},
	} {
		if got := PastShare(tt.conn); got != tt.want {
			t.Errorf("%s: PastShare = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// addrConn is a connection from a chosen peer address.
type addrConn struct {
	net.Conn
	peer net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.peer }

// peerListener accepts one connection from each address of peers in turn.
type peerListener struct {
	net.Listener
	peers []string
}

func (l *peerListener) Accept() (net.Conn, error) {
	if len(l.peers) == 0 {
		return nil, net.ErrClosed
	}
	a, b := net.Pipe()
	b.Close()
	peer := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(l.peers[0]))
	l.peers = l.peers[1:]
	return addrConn{Conn: a, peer: peer}, nil
}

// TestConnectionShareKeysClientsAsTheLimitsDo: a peer whose IPv6 address
// embeds an IPv4 one (IPv4-mapped, -translated, NAT64's 64:ff9b::/96,
// IPv4-compatible) is that IPv4 client, as the rate limits and the
// other pools key it (docs/limits.md, "Client address"), not one IPv6
// /64 with every other IPv4 client seen in that form; and a trusted
// proxy listed by its IPv4 address is not counted when it comes in such
// a form. With server.max_connections 4, the first client takes its two
// connections (its share), and the next peer's connection is counted
// when it is another client, past its share when it is the same one.
func TestConnectionShareKeysClientsAsTheLimitsDo(t *testing.T) {
	for _, tt := range []struct {
		name  string
		peers []string // the last one's connection is checked
		want  string   // counted, past its share, or exempt
	}{
		{"NAT64: two IPv4 clients", []string{"[64:ff9b::c633:6409]:1", "[64:ff9b::c633:6409]:2", "[64:ff9b::cb00:7107]:3"}, "counted"},
		{"NAT64: one IPv4 client", []string{"[64:ff9b::c633:6409]:1", "[64:ff9b::c633:6409]:2", "198.51.100.9:3"}, "past"},
		{"IPv4-translated: two IPv4 clients", []string{"[::ffff:0:c633:6409]:1", "[::ffff:0:c633:6409]:2", "[::ffff:0:cb00:7107]:3"}, "counted"},
		{"IPv4-compatible: two IPv4 clients", []string{"[::c633:6409]:1", "[::c633:6409]:2", "[::cb00:7107]:3"}, "counted"},
		{"IPv4-mapped: one IPv4 client", []string{"[::ffff:c633:6409]:1", "[::ffff:c633:6409]:2", "198.51.100.9:3"}, "past"},
		{"IPv6: one /64", []string{"[2001:db8::1]:1", "[2001:db8::2]:2", "[2001:db8::3]:3"}, "past"},
		{"IPv6: two /64s", []string{"[2001:db8::1]:1", "[2001:db8::2]:2", "[2001:db8:0:1::3]:3"}, "counted"},
		{"trusted proxy through NAT64", []string{"[64:ff9b::c633:6409]:1", "[64:ff9b::c633:6409]:2", "[64:ff9b::a00:1]:3"}, "exempt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.MaxConnections = 4
			cfg.ClientIP.TrustedProxies = []config.Prefix{{Prefix: netip.MustParsePrefix("10.0.0.1/32")}}
			ln := ShareConnections(&peerListener{peers: tt.peers}, cfg, nil)
			var c net.Conn
			for range tt.peers {
				var err error
				if c, err = ln.Accept(); err != nil {
					t.Fatal(err)
				}
			}
			got := "exempt"
			if sc, ok := c.(*sharedConn); ok {
				got = "counted"
				if PastShare(sc) {
					got = "past"
				}
			}
			if got != tt.want {
				t.Errorf("the connection from %s is %s, want %s", tt.peers[len(tt.peers)-1], got, tt.want)
			}
		})
	}
}

// TestBalancerConnectionsCountTheirClient: a connection from a PROXY
// protocol balancer (server.proxy_protocol.trusted_peers) is counted in
// the share of the client its header names, under TLS too, when its
// first request asks (PastShare); with server.max_connections 4 a client
// holds two. One whose header names no client, or a trusted proxy, is
// not counted.
func TestBalancerConnectionsCountTheirClient(t *testing.T) {
	const lb = "10.9.0.1:40000"
	for _, tt := range []struct {
		name    string
		clients []string // the client each connection's header names ("": no header)
		tls     bool
		want    string // of the last connection: counted, past, or exempt
	}{
		{"one client, a third connection", []string{"203.0.113.7:1", "203.0.113.7:2", "203.0.113.7:3"}, false, "past"},
		{"one client under TLS", []string{"203.0.113.7:1", "203.0.113.7:2", "203.0.113.7:3"}, true, "past"},
		{"IPv4-mapped: the same client", []string{"203.0.113.7:1", "203.0.113.7:2", "[::ffff:203.0.113.7]:3"}, false, "past"},
		{"another client", []string{"203.0.113.7:1", "203.0.113.7:2", "198.51.100.9:1"}, false, "counted"},
		{"no header", []string{"", "", ""}, false, "exempt"},
		{"a trusted proxy behind the balancer", []string{"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"}, false, "exempt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.MaxConnections = 4
			cfg.ClientIP.TrustedProxies = []config.Prefix{{Prefix: netip.MustParsePrefix("10.0.0.1/32")}}
			cfg.Server.ProxyProtocol.TrustedPeers = []config.Prefix{{Prefix: netip.MustParsePrefix("10.9.0.0/24")}}
			peers := make([]string, len(tt.clients))
			for i := range peers {
				peers[i] = lb
			}
			ln := ShareConnections(&headerListener{t: t, peers: peers, clients: tt.clients}, cfg, nil)
			got := ""
			for range tt.clients {
				c, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				var held net.Conn = proxyproto.NewConn(c)
				held.RemoteAddr() // the header is read, as net/http asks first
				if tt.tls {
					held = tls.Server(held, &tls.Config{})
				}
				got = "counted"
				if PastShare(held) {
					got = "past"
				} else if sc := c.(*sharedConn); sc.pool == nil {
					got = "exempt"
				}
			}
			if got != tt.want {
				t.Errorf("the last connection is %s, want %s", got, tt.want)
			}
		})
	}
}

// headerListener accepts one connection from each address of peers in
// turn, on which a PROXY protocol v2 header naming the client of the
// same index (none for "") arrives.
type headerListener struct {
	net.Listener
	t       *testing.T
	peers   []string
	clients []string
}

func (l *headerListener) Accept() (net.Conn, error) {
	if len(l.peers) == 0 {
		return nil, net.ErrClosed
	}
	a, b := net.Pipe()
	l.t.Cleanup(func() { a.Close(); b.Close() })
	peer := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(l.peers[0]))
	var header []byte
	if l.clients[0] != "" {
		src := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(l.clients[0]))
		dst := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443}
		if src.IP.To4() == nil {
			dst = &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}
		}
		var err error
		if header, err = proxyproto.HeaderProxyFromAddrs(2, src, dst).Format(); err != nil {
			l.t.Fatal(err)
		}
	}
	l.peers, l.clients = l.peers[1:], l.clients[1:]
	go func() { _, _ = b.Write(append(header, "GET / HTTP/1.1\r\n"...)) }()
	return addrConn{Conn: a, peer: peer}, nil
}
