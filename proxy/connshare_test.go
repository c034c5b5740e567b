package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
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
	gw, err := newGateway(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := edge.NewServer(cfg, gw, zap.NewNop(), nil)
	go func() { _ = srv.Serve(edge.ShareConnections(ln, cfg, nil)) }()
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
