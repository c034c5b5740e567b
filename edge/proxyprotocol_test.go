package edge

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/exgate/exgate/config"
)

// pipeListener hands out one end of in-memory connections whose peer is
// a given address.
type pipeListener struct {
	conns chan net.Conn
}

func (l *pipeListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443} }

// peerConn is a net.Pipe end with a TCP peer address.
type peerConn struct {
	net.Conn
	peer *net.TCPAddr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }

// FuzzProxyProtocolHeader sends arbitrary opening bytes through the
// PROXY protocol listener from a trusted balancer and from another peer.
// Another peer's connection always keeps its own address, whatever it
// sends; a balancer's carries its own address or a TCP client address
// the header named, never a UDP or Unix one; nothing panics or hangs.
func FuzzProxyProtocolHeader(f *testing.F) {
	for _, seed := range []string{
		"PROXY TCP4 203.0.113.7 192.0.2.1 51000 443\r\nGET / HTTP/1.1\r\n\r\n",
		"PROXY TCP6 2001:db8::7 2001:db8::1 1 443\r\n",
		"PROXY UNKNOWN\r\n",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\xcb\x00\x71\x07\xc0\x00\x02\x01\xc7\x38\x01\xbb",
		"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00",
		"GET / HTTP/1.1\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
		"PROXY TCP4 1.1.1.1 2.2.2.2 99999 1\r\n",
		// v2 over UDP, and AF_UNIX.
		"\r\n\r\n\x00\r\nQUIT\n\x21\x12\x00\x0c\xcb\x00\x71\x07\xc0\x00\x02\x01\xc7\x38\x01\xbb",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x31\x00\xd8" + strings.Repeat("a", 216),
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	lb := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 40000}
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 40001}
	pp := config.ProxyProtocol{TrustedPeers: []config.Prefix{{Prefix: netip.MustParsePrefix("127.0.0.2/32")}}, Policy: config.ProxyOptional}
	f.Fuzz(func(t *testing.T, opening []byte, fromBalancer bool) {
		peer := other
		if fromBalancer {
			peer = lb
		}
		pl := &pipeListener{conns: make(chan net.Conn, 1)}
		ln := ProxyProtocolListener(pl, pp, 100*time.Millisecond, nil)
		server, client := net.Pipe()
		pl.conns <- peerConn{Conn: server, peer: peer}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			_, _ = client.Write(opening)
			_ = client.Close()
		}()
		ra, ok := c.RemoteAddr().(*net.TCPAddr)
		_, _ = c.Read(make([]byte, 64))
		if !ok {
			t.Fatalf("address %#v (not TCP) from %q", c.RemoteAddr(), opening)
		}
		if !fromBalancer && (!ra.IP.Equal(other.IP) || ra.Port != other.Port) {
			t.Fatalf("a peer outside trusted_peers got address %v from %q", ra, opening)
		}
	})
}

// TestConnPolicy pins exgate's policy per peer, and the library
// behaviour it is written against: the library's strict-sounding
// allow-list helper answers REJECT for an unlisted peer, which refuses a
// header but admits a connection that sends none. exgate wants exactly
// that for direct clients (their own address counts), but says so itself
// rather than through a name that suggests unlisted peers are refused.
func TestConnPolicy(t *testing.T) {
	lb := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}
	addr := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, tc := range []struct {
		name    string
		listed  proxyproto.Policy
		peer    net.Addr
		want    proxyproto.Policy
		wantErr bool
	}{
		{"balancer, required", proxyproto.REQUIRE, addr("10.0.3.4:5000"), proxyproto.REQUIRE, false},
		{"balancer, optional", proxyproto.USE, addr("10.0.3.4:5000"), proxyproto.USE, false},
		{"balancer, IPv4-mapped", proxyproto.REQUIRE, addr("[::ffff:10.0.3.4]:5000"), proxyproto.REQUIRE, false},
		{"balancer, NAT64", proxyproto.REQUIRE, addr("[64:ff9b::a00:304]:5000"), proxyproto.REQUIRE, false},
		{"direct client, NAT64", proxyproto.REQUIRE, addr("[64:ff9b::cb00:7107]:5000"), proxyproto.REJECT, false},
		{"direct client", proxyproto.REQUIRE, addr("203.0.113.7:5000"), proxyproto.REJECT, false},
		{"unreadable peer", proxyproto.REQUIRE, &net.UnixAddr{Name: "@x", Net: "unix"}, proxyproto.REJECT, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := connPolicy(lb, tc.listed)(proxyproto.ConnPolicyOptions{Upstream: tc.peer})
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("policy %v, err %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, proxyproto.ErrInvalidUpstream) {
				t.Fatalf("error %v does not wrap ErrInvalidUpstream: the accept loop would stop", err)
			}
		})
	}
	strict, err := proxyproto.ConnStrictWhiteListPolicy([]string{"10.0.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := strict(proxyproto.ConnPolicyOptions{Upstream: addr("203.0.113.7:5000")}); got != proxyproto.REJECT || err != nil {
		t.Fatalf("the library's strict allow-list now answers %v, %v for an unlisted peer; re-read its semantics", got, err)
	}
}
