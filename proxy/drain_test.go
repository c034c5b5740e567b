package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
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
			gw, err := newGateway(cfg, Options{})
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

// TestDrainingInterimAnswersCarryNoConnection: while draining, a
// backend's 103 Early Hints reaches the client without the Connection:
// close exgate puts on the final answer. HTTP/2 forbids a Connection
// field (RFC 9113 §8.2.2: nghttp2 and browsers reset the stream of a
// response carrying one), and net/http's HTTP/2 server takes it out of a
// final answer only; an interim answer closes nothing in HTTP/1 either.
// The final answer still closes the connection (HTTP/1) or sends a
// GOAWAY (HTTP/2).
func TestDrainingInterimAnswersCarryNoConnection(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</markets.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, "[]")
			}))
			t.Cleanup(bs.Close)
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			gw, err := newGateway(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			gw.SetDraining()
			front := httptest.NewUnstartedServer(gw)
			front.EnableHTTP2 = h2
			front.StartTLS()
			t.Cleanup(front.Close)
			var interim []textproto.MIMEHeader
			req, _ := http.NewRequest("GET", front.URL+"/api/v1/mkt/markets/", nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(_ int, h textproto.MIMEHeader) error { interim = append(interim, h); return nil },
			}))
			res, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
				t.Fatalf("%s %d", res.Proto, res.StatusCode)
			}
			if len(interim) != 1 || interim[0].Get("Link") == "" {
				t.Fatalf("interim answers %v, want the backend's 103 with its Link", interim)
			}
			if v, ok := interim[0]["Connection"]; ok {
				t.Errorf("the 103 carries Connection %q", v)
			}
			if !h2 && !res.Close {
				t.Error("the final answer keeps the connection while draining")
			}
		})
	}
}
