package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestDrainingClosesConnections: once the gateway drains (SetDraining,
// at a shutdown signal), every answer tells its client to close the
// connection — the backend's and exgate's own refusals alike — so that a
// client on a keep-alive connection (through an L4 balancer, whose
// connections stay with this replica) opens a new one, which the balancer
// sends to a ready replica, instead of sending its next order into a
// connection the shutdown closes under it. Before draining the same
// answers keep the connection open.
func TestDrainingClosesConnections(t *testing.T) {
	for _, tc := range []struct {
		name   string
		req    string
		status int
	}{
		{"a proxied read", "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusOK},
		{"an order refused by exgate", "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", http.StatusUnauthorized},
		{"a path refused by exgate", "GET /api/v1/mkt/markets/%2F/ HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := httptest.NewServer(&backend{})
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			gw, err := New(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(gw)
			t.Cleanup(srv.Close)
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			send := func(when string, wantClose bool) {
				t.Helper()
				if _, err := io.WriteString(c, tc.req); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status {
					t.Fatalf("%s: status %d, want %d", when, res.StatusCode, tc.status)
				}
				if res.Close != wantClose {
					t.Fatalf("%s: the answer closes the connection: %v (Connection %q), want %v",
						when, res.Close, strings.Join(res.Header.Values("Connection"), ", "), wantClose)
				}
			}
			send("before draining", false)
			gw.SetDraining()
			send("while draining", true)
		})
	}
}
