package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
)

// TestConnectionShares: client connections are shared between addresses:
// an address alone may hold half of server.max_connections; a connection
// past its share is accepted, its first request answered 503
// too_many_connections and the connection closed, while another address
// still connects and is served; a closed connection gives its place back.
func TestConnectionShares(t *testing.T) {
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.MaxConnections = 8
	gw, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, gw, zap.NewNop(), nil)
	go func() { _ = srv.Serve(ShareConnections(ln, cfg, nil)) }()
	t.Cleanup(func() { _ = srv.Close() })

	get := func(c net.Conn) *http.Response {
		t.Helper()
		if _, err := fmt.Fprintf(c, "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res // its body is read by the caller, or left: the test ends
	}
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for i := range 4 { // half of 8: each served
		c := dial("127.0.0.1")
		if res := get(c); res.StatusCode != http.StatusOK {
			t.Fatalf("connection %d of one address: %d, want 200", i, res.StatusCode)
		}
		held = append(held, c)
	}
	past := dial("127.0.0.1")
	res := get(past)
	assertError(t, res, http.StatusServiceUnavailable, "too_many_connections")
	if !res.Close || res.Header.Get("Retry-After") != "1" {
		t.Errorf("too_many_connections: closed %v, Retry-After %q", res.Close, res.Header.Get("Retry-After"))
	}
	if res := get(dial("127.0.0.2")); res.StatusCode != http.StatusOK {
		t.Fatalf("another address while the first holds its share: %d, want 200", res.StatusCode)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := get(dial("127.0.0.1"))
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection closed did not give its place back: %d", res.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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
	counted := &sharedConn{Conn: a, pool: newSharedPool(4)}
	past := &sharedConn{Conn: a}
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
		if got := pastShare(tt.conn); got != tt.want {
			t.Errorf("%s: pastShare = %v, want %v", tt.name, got, tt.want)
		}
	}
}
