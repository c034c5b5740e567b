package edge

import (
	"crypto/tls"
	"net"
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
		if got := PastShare(tt.conn); got != tt.want {
			t.Errorf("%s: PastShare = %v, want %v", tt.name, got, tt.want)
		}
	}
}
