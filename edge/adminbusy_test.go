package edge

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/exgate/exgate/config"
)

// TestAdminNextRequestKept: a keep-alive connection whose next request's
// header is being read is busy, though net/http tells StateActive only
// once that header is whole: a newer connection of its address at its
// share is refused rather than close it (and lose the request). Between
// two requests, nothing read, it is idle and closed for the newer one.
func TestAdminNextRequestKept(t *testing.T) {
	const next = "GET / HTTP/1.1\r\nHost: admin\r\n\r\n"
	for _, tt := range []struct {
		name     string
		partial  string // of next, sent on the first connection once it is idle
		wantKept bool   // the first connection answers its next request
		wantNew  int    // the newer connection's answer
	}{
		{"idle, nothing sent", "", false, http.StatusOK},
		{"next request's first bytes read", "GET /", true, http.StatusServiceUnavailable},
		{"next request's header half read", "GET / HTTP/1.1\r\nHost: admin\r\n", true, http.StatusServiceUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			reads := make(chan struct{}, 64)
			cfg := config.Default()
			cfg.Admin.MaxConnections = 8 // 127.0.0.1 alone holds 3
			ln, hook := ShareAdminConnections(&readsListener{Listener: inner, reads: reads}, cfg, nil)
			idle := make(chan struct{}, 64)
			srv := &http.Server{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if PastShare(r.Context().Value(connCtxKey{}).(net.Conn)) {
						w.WriteHeader(http.StatusServiceUnavailable)
					}
				}),
				ConnContext: withConnCtx,
				ConnState: func(c net.Conn, s http.ConnState) {
					hook(c, s)
					if s == http.StateIdle {
						idle <- struct{}{}
					}
				},
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			first := dial(t, inner.Addr())
			br := bufio.NewReader(first)
			if code := ask(t, first, br, next); code != http.StatusOK {
				t.Fatalf("first request: %d", code)
			}
			<-idle
			drain(reads)
			if tt.partial != "" {
				if _, err := io.WriteString(first, tt.partial); err != nil {
					t.Fatal(err)
				}
				<-reads // the server has read them and asks for the rest
			}
			dial(t, inner.Addr()) // two more, no request sent: 127.0.0.1 at its share
			dial(t, inner.Addr())
			newer := dial(t, inner.Addr())
			if code := ask(t, newer, bufio.NewReader(newer), "GET / HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"); code != tt.wantNew {
				t.Errorf("the newer connection answered %d, want %d", code, tt.wantNew)
			}
			_, err = io.WriteString(first, next[len(tt.partial):])
			if err == nil {
				_, err = http.ReadResponse(br, nil)
			}
			if kept := err == nil; kept != tt.wantKept {
				t.Errorf("first connection answered its next request: %v (%v), want %v", kept, err, tt.wantKept)
			}
		})
	}
}

// connCtxKey keys a request's connection in its context (the admin
// server's withConn).
type connCtxKey struct{}

func withConnCtx(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connCtxKey{}, c)
}

// dial connects to addr, closed at the test's end.
func dial(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends req on c and returns its answer's status.
func ask(t *testing.T, c net.Conn, br *bufio.Reader, req string) int {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// drain empties ch.
func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// readsListener's connections tell reads when the server asks for more
// after a Read that returned bytes: what wraps them has seen those bytes.
type readsListener struct {
	net.Listener
	reads chan struct{}
}

func (l *readsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &readsConn{Conn: c, reads: l.reads}, nil
}

type readsConn struct {
	net.Conn
	reads chan struct{}
	got   bool // the last Read returned bytes
}

func (c *readsConn) Read(p []byte) (int, error) {
	if c.got {
		select {
		case c.reads <- struct{}{}:
		default:
		}
	}
	n, err := c.Conn.Read(p)
	c.got = n > 0
	return n, err
}
