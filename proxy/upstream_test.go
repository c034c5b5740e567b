package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
)

// rawBackend is a backend scripted byte by byte: each connection it
// accepts is served by its serve function, which reads requests with
// next and writes whatever it wants.
type rawBackend struct {
	url      string
	ln       net.Listener
	serve    func(c *rawConn)
	accepted atomic.Int32 // connections accepted
	requests atomic.Int32 // requests read
	ended    atomic.Int32 // connections whose client end closed (EOF or reset) while the backend waited for a request
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// rawConn is one connection of a rawBackend.
type rawConn struct {
	net.Conn
	b  *rawBackend
	br *bufio.Reader
	n  int32 // 1 for the first connection accepted
}

// startRaw starts a rawBackend serving each connection with serve; the
// connection is closed when serve returns.
func startRaw(t *testing.T, serve func(c *rawConn)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{url: "http://" + ln.Addr().String(), ln: ln, serve: serve}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rc := &rawConn{Conn: c, b: b, br: bufio.NewReader(c), n: b.accepted.Add(1)}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				b.serve(rc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// next reads one request and its body; false when the client closed the
// connection (or it broke).
func (c *rawConn) next() (*http.Request, bool) {
	req, err := http.ReadRequest(c.br)
	if err != nil {
		c.b.ended.Add(1)
		return nil, false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	c.b.requests.Add(1)
	return req, true
}

func (c *rawConn) send(s string) { _, _ = io.WriteString(c.Conn, s) }

// waitEnd waits until the client closes the connection.
func (c *rawConn) waitEnd() {
	_, _ = io.Copy(io.Discard, c.br)
	c.b.ended.Add(1)
}

// answer serves every request on a connection with reply.
func answer(reply string) func(c *rawConn) {
	return func(c *rawConn) {
		for {
			if _, ok := c.next(); !ok {
				return
			}
			c.send(reply)
		}
	}
}

// countingFallback counts what UpstreamTransport hands to its fallback.
type countingFallback struct {
	rt     http.RoundTripper
	n      atomic.Int32
	closed atomic.Int32
	last   atomic.Value // context.Context of the last request
}

func (f *countingFallback) RoundTrip(r *http.Request) (*http.Response, error) {
	f.n.Add(1)
	f.last.Store(r.Context())
	return f.rt.RoundTrip(r)
}

func (f *countingFallback) CloseIdleConnections() {
	f.closed.Add(1)
	if c, ok := f.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// newUpstream returns an UpstreamTransport with the default upstream
// settings changed by mut, in front of a counting http.Transport.
func newUpstream(t *testing.T, mut func(*config.Upstream)) (*UpstreamTransport, *countingFallback) {
	t.Helper()
	u := config.Default().Upstream
	if mut != nil {
		mut(&u)
	}
	fb := &countingFallback{rt: NewTransport(u)}
	tr := NewUpstreamTransport(u, fb)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, fb
}

// fetch sends one request through tr and reads the whole body.
func fetch(ctx context.Context, tr http.RoundTripper, method, url string, mod func(*http.Request)) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, "", err
	}
	if mod != nil {
		mod(req)
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body), err
}

// mustFetch is fetch without a deadline, failing the test on an error.
func mustFetch(t *testing.T, tr http.RoundTripper, method, url string) (*http.Response, string) {
	t.Helper()
	res, body, err := fetch(context.Background(), tr, method, url, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return res, body
}

// idleConns and openConns look into the pool.
func idleConns(tr *UpstreamTransport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, hp := range tr.hosts {
		n += len(hp.idle)
	}
	return n
}

func openConns(tr *UpstreamTransport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, hp := range tr.hosts {
		n += hp.conns
	}
	return n
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUpstreamKeepAlive(t *testing.T) {
	var conns atomic.Int32
	bs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	bs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	bs.Start()
	defer bs.Close()
	tr, fb := newUpstream(t, nil)
	for i := range 50 {
		p := fmt.Sprintf("/r/%d", i)
		if res, body := mustFetch(t, tr, "GET", bs.URL+p); res.StatusCode != 200 || body != p {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 sequential GETs used %d connections, want 1", n)
	}
	if fb.n.Load() != 0 {
		t.Fatal("a GET went to the fallback")
	}
	if idleConns(tr) != 1 || openConns(tr) != 1 {
		t.Fatalf("pool: %d idle, %d open; want 1, 1", idleConns(tr), openConns(tr))
	}
}

// TestUpstreamReuse sends two requests to a backend answering each with
// the same bytes and checks the answer and whether the connection was
// kept.
func TestUpstreamReuse(t *testing.T) {
	large := strings.Repeat("L", 3<<20) // more than the header cap: the cap ends with the headers
	tests := []struct {
		name        string
		method      string
		mod         func(*http.Request)
		reply       string
		closeAfter  bool // the backend closes after answering
		wantStatus  int
		wantBody    string
		wantLength  int64 // res.ContentLength
		wantTrailer string
		reused      bool
	}{
		{name: "Content-Length body", reply: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			wantBody: "hello", wantLength: 5, reused: true},
		{name: "Content-Length 0", reply: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			reused: true},
		{name: "chunked body", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
			wantBody: "hello world", wantLength: -1, reused: true},
		{name: "chunked body with trailer", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 42\r\n\r\n",
			wantBody: "ok", wantLength: -1, wantTrailer: "42", reused: true},
		{name: "Connection: close from the backend, which closes",
			reply: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", closeAfter: true,
			wantBody: "ok", wantLength: 2},
		{name: "Connection: close from the backend, which keeps it open",
			reply:    "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			wantBody: "ok", wantLength: 2},
		{name: "Connection: close from the request (Close)", mod: func(r *http.Request) { r.Close = true },
			reply: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantLength: 2},
		{name: "Connection: close from the request (header)", mod: func(r *http.Request) { r.Header.Set("Connection", "close") },
			reply: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantBody: "ok", wantLength: 2},
		{name: "HTTP/1.0 response", reply: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
			wantBody: "ok", wantLength: 2},
		{name: "HTTP/1.0 response with keep-alive", reply: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
			wantBody: "ok", wantLength: 2, reused: true},
		{name: "body without length, read to the close", reply: "HTTP/1.1 200 OK\r\n\r\nuntil the end", closeAfter: true,
			wantBody: "until the end", wantLength: -1},
		{name: "HEAD with Content-Length", method: "HEAD", reply: "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
			wantLength: 1234, reused: true},
		{name: "HEAD with chunked", method: "HEAD", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
			wantLength: -1, reused: true},
		{name: "OPTIONS", method: "OPTIONS", reply: "HTTP/1.1 204 No Content\r\nAllow: GET\r\n\r\n",
			wantStatus: 204, reused: true},
		{name: "204", reply: "HTTP/1.1 204 No Content\r\n\r\n", wantStatus: 204, reused: true},
		{name: "304", reply: "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", wantStatus: 304, reused: true},
		{name: "100 before the answer", reply: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			wantBody: "ok", wantLength: 2, reused: true},
		{name: "103 before the answer", reply: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
			wantStatus: 201, wantBody: "ok", wantLength: 2, reused: true},
		{name: "several 1xx before the answer", reply: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			wantBody: "ok", wantLength: 2, reused: true},
		{name: "bytes after the body", reply: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
			wantBody: "ok", wantLength: 2},
		{name: "backend error status", reply: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
			wantStatus: 503, wantBody: "busy", wantLength: 4, reused: true},
		{name: "large Content-Length body", reply: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(large), large),
			wantBody: large, wantLength: int64(len(large)), reused: true},
		{name: "large chunked body", reply: fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(large), large),
			wantBody: large, wantLength: -1, reused: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be := startRaw(t, func(c *rawConn) {
				for {
					if _, ok := c.next(); !ok {
						return
					}
					c.send(tc.reply)
					if tc.closeAfter {
						return
					}
				}
			})
			tr, fb := newUpstream(t, nil)
			method := tc.method
			if method == "" {
				method = "GET"
			}
			wantStatus := tc.wantStatus
			if wantStatus == 0 {
				wantStatus = 200
			}
			for i := range 2 {
				res, body, err := fetch(context.Background(), tr, method, be.url+"/x", tc.mod)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if res.StatusCode != wantStatus || body != tc.wantBody || res.ContentLength != tc.wantLength {
					t.Fatalf("request %d: %d %.40q length %d; want %d %.40q length %d",
						i, res.StatusCode, body, res.ContentLength, wantStatus, tc.wantBody, tc.wantLength)
				}
				if got := res.Trailer.Get("X-Sum"); got != tc.wantTrailer {
					t.Fatalf("trailer X-Sum = %q, want %q", got, tc.wantTrailer)
				}
				if i == 0 {
					want := 0
					if tc.reused {
						want = 1
					}
					if n := idleConns(tr); n != want {
						t.Fatalf("after the first answer %d idle connections, want %d", n, want)
					}
				}
			}
			wantConns := int32(2)
			if tc.reused {
				wantConns = 1
			}
			if n := be.accepted.Load(); n != wantConns {
				t.Fatalf("%d connections, want %d", n, wantConns)
			}
			if n := be.requests.Load(); n != 2 {
				t.Fatalf("backend read %d requests, want 2", n)
			}
			if fb.n.Load() != 0 {
				t.Fatal("the fallback was used")
			}
			if !tc.reused {
				waitFor(t, "no connection left open", func() bool { return openConns(tr) == 0 })
			}
		})
	}
}

// TestUpstreamWire checks what reaches the backend: the request line,
// Host and headers as net/http writes them, nothing added.
func TestUpstreamWire(t *testing.T) {
	got := make(chan *http.Request, 1)
	be := startRaw(t, func(c *rawConn) {
		for {
			req, ok := c.next()
			if !ok {
				return
			}
			got <- req
			c.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	tr, _ := newUpstream(t, nil)
	_, _, err := fetch(context.Background(), tr, "GET", be.url+"/api/v1/mkt/markets/?page=2&x=%20y", func(r *http.Request) {
		r.Header.Set("User-Agent", "") // as ReverseProxy does when the client sent none
		r.Header.Set("X-Request-Id", "abc")
		r.Header.Set("Accept-Encoding", "gzip")
	})
	if err != nil {
		t.Fatal(err)
	}
	req := <-got
	if req.Method != "GET" || req.RequestURI != "/api/v1/mkt/markets/?page=2&x=%20y" || req.Proto != "HTTP/1.1" ||
		req.Host != strings.TrimPrefix(be.url, "http://") {
		t.Fatalf("request line or host: %s %s %s host %s", req.Method, req.RequestURI, req.Proto, req.Host)
	}
	want := http.Header{"X-Request-Id": {"abc"}, "Accept-Encoding": {"gzip"}}
	if fmt.Sprint(req.Header) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v", req.Header, want)
	}
}

func TestUpstreamInformationalTrace(t *testing.T) {
	be := startRaw(t, answer("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	tr, _ := newUpstream(t, nil)
	t.Run("delivered to the trace", func(t *testing.T) {
		var codes []int
		var link string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				codes = append(codes, code)
				link = h.Get("Link")
				return nil
			},
		})
		res, body, err := fetch(ctx, tr, "GET", be.url+"/", nil)
		if err != nil || res.StatusCode != 200 || body != "ok" {
			t.Fatalf("%v %v %q", err, res, body)
		}
		if fmt.Sprint(codes) != "[103]" || link != "</a.css>; rel=preload" {
			t.Fatalf("trace saw %v, Link %q", codes, link)
		}
	})
	t.Run("an error from the trace fails the request", func(t *testing.T) {
		boom := errors.New("boom")
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(int, textproto.MIMEHeader) error { return boom },
		})
		if _, _, err := fetch(ctx, tr, "GET", be.url+"/", nil); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	})
}

// TestUpstreamBadResponses: answers that are errors, on a new connection,
// sent once and never again.
func TestUpstreamBadResponses(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	var hugeHeaders, hugeInformational strings.Builder
	hugeHeaders.WriteString("HTTP/1.1 200 OK\r\n")
	for i := 0; hugeHeaders.Len() <= maxResponseHeaderBytes; i++ {
		fmt.Fprintf(&hugeHeaders, "X-H%d: %s\r\n", i, big)
	}
	hugeHeaders.WriteString("Content-Length: 0\r\n\r\n")
	for range 3 { // 3 × 400 KiB of 103s: each under the cap, together over it
		hugeInformational.WriteString("HTTP/1.1 103 Early Hints\r\n")
		for i := range 6 {
			fmt.Fprintf(&hugeInformational, "X-H%d: %s\r\n", i, big)
		}
		hugeInformational.WriteString("\r\n")
	}
	hugeInformational.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

	tests := []struct {
		name, reply string
		want        error // nil: any error
	}{
		{"headers over the cap", hugeHeaders.String(), errUpstreamHeaderTooLarge},
		{"1xx headers over the cap together", hugeInformational.String(), errUpstreamHeaderTooLarge},
		{"malformed status line", "HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n", nil},
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n\r\n", nil},
		{"status under 100", "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", nil},
		{"101 without an upgrade", "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", errUpstreamSwitching},
		{"bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx", nil},
		{"unknown transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", nil},
		{"status line cut short", "HTTP/1.1 200", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			be := startRaw(t, func(c *rawConn) {
				if _, ok := c.next(); ok {
					c.send(tc.reply)
				}
			})
			tr, _ := newUpstream(t, nil)
			res, _, err := fetch(context.Background(), tr, "GET", be.url+"/", nil)
			if err == nil {
				t.Fatalf("no error; status %d", res.StatusCode)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if be.accepted.Load() != 1 || be.requests.Load() != 1 {
				t.Fatalf("%d connections, %d requests; want 1, 1 (no retry)", be.accepted.Load(), be.requests.Load())
			}
			if openConns(tr) != 0 {
				t.Fatalf("%d connections left open", openConns(tr))
			}
		})
	}
}

// TestUpstreamStaleConnection: the backend closes a connection while it
// is idle in the pool; the next GET is sent once more on a new
// connection, POST never comes near this transport.
func TestUpstreamStaleConnection(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	tests := []struct {
		name  string
		close func(c *rawConn)
	}{
		{"closed (FIN)", func(c *rawConn) { c.Close() }},
		{"reset (RST)", func(c *rawConn) {
			_ = c.Conn.(*net.TCPConn).SetLinger(0)
			c.Close()
		}},
		{"408 then closed", func(c *rawConn) {
			c.send("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			c.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idle := make(chan struct{})
			closed := make(chan struct{})
			be := startRaw(t, func(c *rawConn) {
				if _, ok := c.next(); !ok {
					return
				}
				c.send(ok)
				if c.n == 1 { // the first connection goes stale
					<-idle
					tc.close(c)
					close(closed)
					return
				}
				for {
					if _, ok := c.next(); !ok {
						return
					}
					c.send(ok)
				}
			})
			tr, fb := newUpstream(t, nil)
			mustFetch(t, tr, "GET", be.url+"/1")
			if idleConns(tr) != 1 {
				t.Fatal("the connection was not kept")
			}
			close(idle)
			<-closed
			time.Sleep(20 * time.Millisecond) // let the close arrive
			res, body, err := fetch(context.Background(), tr, "GET", be.url+"/2", nil)
			if err != nil || res.StatusCode != 200 || body != "ok" {
				t.Fatalf("GET on a stale connection: %v %v %q", err, res, body)
			}
			if be.accepted.Load() != 2 || be.requests.Load() != 2 {
				t.Fatalf("%d connections, %d requests; want 2, 2", be.accepted.Load(), be.requests.Load())
			}
			// A POST goes to the fallback, whatever the pool holds.
			req, _ := http.NewRequest("POST", be.url+"/orders", strings.NewReader(`{"a":1}`))
			res, err = tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if fb.n.Load() != 1 || be.accepted.Load() != 3 {
				t.Fatalf("POST: fallback used %d times, %d connections; want 1 and 3", fb.n.Load(), be.accepted.Load())
			}
		})
	}
}

// TestUpstreamNoRetry: failures that must not send the request again.
func TestUpstreamNoRetry(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	t.Run("new connection closed after the request", func(t *testing.T) {
		be := startRaw(t, func(c *rawConn) { c.next() })
		tr, _ := newUpstream(t, nil)
		_, _, err := fetch(context.Background(), tr, "GET", be.url+"/", nil)
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want an unexpected EOF", err)
		}
		if be.accepted.Load() != 1 || be.requests.Load() != 1 {
			t.Fatalf("%d connections, %d requests; want 1, 1", be.accepted.Load(), be.requests.Load())
		}
	})
	t.Run("new connection reset after the request", func(t *testing.T) {
		be := startRaw(t, func(c *rawConn) {
			c.next()
			_ = c.Conn.(*net.TCPConn).SetLinger(0)
		})
		tr, _ := newUpstream(t, nil)
		if _, _, err := fetch(context.Background(), tr, "GET", be.url+"/", nil); err == nil {
			t.Fatal("no error")
		}
		if be.accepted.Load() != 1 || be.requests.Load() != 1 {
			t.Fatalf("%d connections, %d requests; want 1, 1", be.accepted.Load(), be.requests.Load())
		}
	})
	t.Run("reused connection closed after part of the answer", func(t *testing.T) {
		be := startRaw(t, func(c *rawConn) {
			if _, ok2 := c.next(); ok2 {
				c.send(ok)
			}
			if _, ok2 := c.next(); ok2 {
				c.send("HTTP/1.1 200 OK\r\nContent-Le")
			}
		})
		tr, _ := newUpstream(t, nil)
		mustFetch(t, tr, "GET", be.url+"/1")
		if _, _, err := fetch(context.Background(), tr, "GET", be.url+"/2", nil); err == nil {
			t.Fatal("no error")
		}
		if be.accepted.Load() != 1 || be.requests.Load() != 2 {
			t.Fatalf("%d connections, %d requests; want 1, 2", be.accepted.Load(), be.requests.Load())
		}
	})
	t.Run("stale connection, then the retry fails too", func(t *testing.T) {
		be := startRaw(t, func(c *rawConn) {
			if _, ok2 := c.next(); ok2 && c.n == 1 {
				c.send(ok)
				c.waitEnd() // until the transport closes it
			}
			// later connections: closed after the request
		})
		tr, _ := newUpstream(t, nil)
		mustFetch(t, tr, "GET", be.url+"/1")
		// Make the pooled connection stale by closing it under the pool.
		tr.mu.Lock()
		for _, hp := range tr.hosts {
			for _, pc := range hp.idle {
				_ = pc.nc.(*net.TCPConn).CloseRead()
			}
		}
		tr.mu.Unlock()
		if _, _, err := fetch(context.Background(), tr, "GET", be.url+"/2", nil); err == nil {
			t.Fatal("no error")
		}
		if n := be.accepted.Load(); n != 2 {
			t.Fatalf("%d connections, want 2 (one retry only)", n)
		}
		if openConns(tr) != 0 {
			t.Fatalf("%d connections left open", openConns(tr))
		}
	})
	t.Run("408 on a new connection is the answer", func(t *testing.T) {
		be := startRaw(t, answer("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		tr, _ := newUpstream(t, nil)
		res, _ := mustFetch(t, tr, "GET", be.url+"/")
		if res.StatusCode != 408 || be.accepted.Load() != 1 {
			t.Fatalf("status %d, %d connections; want 408, 1", res.StatusCode, be.accepted.Load())
		}
	})
}

// deadlineContexts are the two kinds of context whose deadline
// UpstreamTransport enforces: one that ends at its deadline, and the
// gateway's routeContext, which only reports it.
var deadlineContexts = []struct {
	name string
	with func(d time.Duration) (context.Context, context.CancelFunc)
}{
	{"WithTimeout", func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), d)
	}},
	{"routeContext", func(d time.Duration) (context.Context, context.CancelFunc) {
		return &routeContext{Context: context.Background(), deadline: time.Now().Add(d)}, func() {}
	}},
}

func TestUpstreamDeadline(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	release := make(chan struct{})
	defer close(release)
	be := startRaw(t, func(c *rawConn) {
		for {
			req, ok2 := c.next()
			if !ok2 {
				return
			}
			switch req.URL.Path {
			case "/slow-headers":
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
				return
			case "/slow-body":
				c.send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
				c.waitEnd()
				return
			default:
				c.send(ok)
			}
		}
	})
	tr, _ := newUpstream(t, nil)

	for _, dc := range deadlineContexts {
		t.Run(dc.name, func(t *testing.T) {
			t.Run("slow headers", func(t *testing.T) {
				start := time.Now()
				ctx, cancel := dc.with(150 * time.Millisecond)
				defer cancel()
				_, _, err := fetch(ctx, tr, "GET", be.url+"/slow-headers", nil)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want context.DeadlineExceeded", err)
				}
				if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
					t.Fatalf("failed after %v, want about 150ms", d)
				}
				if openConns(tr) != 0 {
					t.Fatal("the timed-out connection was kept")
				}
			})
			t.Run("slow body", func(t *testing.T) {
				ctx, cancel := dc.with(150 * time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", be.url+"/slow-body", nil)
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				body, err := io.ReadAll(res.Body) // the deadline bounds the caller's reads
				res.Body.Close()
				if string(body) != "abc" || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("read %q, %v; want abc, context.DeadlineExceeded", body, err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("read failed after %v", d)
				}
				if openConns(tr) != 0 {
					t.Fatal("the timed-out connection was kept")
				}
			})
			t.Run("an expired deadline does not outlive its request", func(t *testing.T) {
				tr, _ := newUpstream(t, nil)
				before := be.accepted.Load()
				ctx, cancel := dc.with(100 * time.Millisecond)
				if _, _, err := fetch(ctx, tr, "GET", be.url+"/fast", nil); err != nil {
					t.Fatal(err)
				}
				cancel()
				time.Sleep(150 * time.Millisecond) // past the first request's deadline
				if _, body := mustFetch(t, tr, "GET", be.url+"/fast"); body != "ok" {
					t.Fatalf("body %q", body)
				}
				if n := be.accepted.Load() - before; n != 1 {
					t.Fatalf("%d connections, want 1", n)
				}
			})
			t.Run("already expired", func(t *testing.T) {
				ctx, cancel := dc.with(-time.Second)
				defer cancel()
				before := be.accepted.Load()
				if _, _, err := fetch(ctx, tr, "GET", be.url+"/fast", nil); err != context.DeadlineExceeded {
					t.Fatalf("err = %v", err)
				}
				if be.accepted.Load() != before {
					t.Fatal("dialled for an expired request")
				}
			})
		})
	}
}

func TestUpstreamCancel(t *testing.T) {
	be := startRaw(t, func(c *rawConn) {
		req, ok := c.next()
		if !ok {
			return
		}
		if req.URL.Path == "/body" {
			c.send("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc")
		}
		c.waitEnd()
	})
	tr, _ := newUpstream(t, nil)
	for _, path := range []string{"/headers", "/body"} {
		t.Run("waiting for "+path[1:], func(t *testing.T) {
			ended := be.ended.Load()
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			_, body, err := fetch(ctx, tr, "GET", be.url+path, nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if want := map[string]string{"/headers": "", "/body": "abc"}[path]; body != want {
				t.Fatalf("body %q, want %q", body, want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("cancelled after %v", d)
			}
			waitFor(t, "the backend to see the connection close", func() bool { return be.ended.Load() == ended+1 })
			if openConns(tr) != 0 {
				t.Fatal("the cancelled connection was kept")
			}
		})
	}
}

func TestUpstreamBodyClosedEarly(t *testing.T) {
	big := strings.Repeat("b", 1<<20)
	small := strings.Repeat("s", 100)
	replies := map[string]string{
		"/big":     fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(big), big),
		"/small":   fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(small), small),
		"/chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + small + "\r\n0\r\n\r\n",
	}
	be := startRaw(t, func(c *rawConn) {
		for {
			req, ok := c.next()
			if !ok {
				return
			}
			c.send(replies[req.URL.Path])
		}
	})
	tests := []struct {
		path string
		read int
		kept bool
	}{
		{"/big", 10, false},     // the rest is on the wire: closed, never waited for
		{"/small", 10, true},    // the rest is buffered: read, connection kept
		{"/small", 0, true},     // closed unread, all buffered
		{"/chunked", 10, false}, // unknown rest: closed
		{"/small", len(small), true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s read %d", tc.path, tc.read), func(t *testing.T) {
			tr, _ := newUpstream(t, nil)
			before := be.accepted.Load()
			req, _ := http.NewRequest("GET", be.url+tc.path, nil)
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.kept {
				// the whole small answer has arrived
				waitFor(t, "the answer to be buffered", func() bool {
					return res.Body.(*upBody).pc.br.Buffered() >= len(small)-tc.read || tc.read == len(small)
				})
			}
			buf := make([]byte, tc.read)
			if _, err := io.ReadFull(res.Body, buf); err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if _, err := res.Body.Read(buf[:cap(buf)]); len(buf) > 0 && !errors.Is(err, errUpstreamBodyClosed) && err != io.EOF {
				t.Fatalf("read after close: %v", err)
			}
			if got := idleConns(tr) == 1; got != tc.kept {
				t.Fatalf("kept = %v, want %v", got, tc.kept)
			}
			if !tc.kept && openConns(tr) != 0 {
				t.Fatal("connection left open")
			}
			res, body := mustFetch(t, tr, "GET", be.url+"/small")
			if res.StatusCode != 200 || body != small {
				t.Fatalf("next request: %d %q", res.StatusCode, body)
			}
			want := int32(2)
			if tc.kept {
				want = 1
			}
			if n := be.accepted.Load() - before; n != want {
				t.Fatalf("%d connections, want %d", n, want)
			}
		})
	}
}

// TestUpstreamCloseDuringRead: Close from another goroutine makes a Read
// blocked on the backend return, and frees the connection's slot.
func TestUpstreamCloseDuringRead(t *testing.T) {
	be := startRaw(t, func(c *rawConn) {
		req, ok := c.next()
		if !ok {
			return
		}
		if req.URL.Path == "/stall" {
			c.send("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc")
			c.waitEnd()
			return
		}
		c.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.waitEnd()
	})
	tr, _ := newUpstream(t, func(u *config.Upstream) { u.MaxConnsPerHost = 1 })
	req, _ := http.NewRequest("GET", be.url+"/stall", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(res.Body)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	res.Body.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the read ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt the Read")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, body, err := fetch(ctx, tr, "GET", be.url+"/next", nil); err != nil || body != "ok" {
		t.Fatalf("next request (the slot must be free): %v %q", err, body)
	}
}

func TestUpstreamMaxConnsPerHost(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	var inHandler atomic.Int32
	var conns atomic.Int32
	bs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		if r.URL.Path == "/wait" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	bs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	bs.Start()
	defer bs.Close()
	tr, _ := newUpstream(t, func(u *config.Upstream) { u.MaxConnsPerHost = 2 })

	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, body, err := fetch(context.Background(), tr, "GET", bs.URL+"/wait", nil)
			if err == nil && body != "ok" {
				err = fmt.Errorf("body %q", body)
			}
			errc <- err
		}()
	}
	waitFor(t, "two requests at the backend", func() bool { return inHandler.Load() == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := inHandler.Load(); n != 2 {
		t.Fatalf("%d requests at the backend, want 2 (the third waits)", n)
	}
	// A waiting request gives up at its deadline.
	for _, dc := range deadlineContexts {
		ctx, cancel := dc.with(100 * time.Millisecond)
		start := time.Now()
		if _, _, err := fetch(ctx, tr, "GET", bs.URL+"/fast", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: waiting request: err = %v, want context.DeadlineExceeded", dc.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%s: waiting request gave up after %v, want about 100ms", dc.name, d)
		}
		cancel()
	}
	once.Do(func() { close(release) })
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	if n := openConns(tr); n != 2 {
		t.Fatalf("%d connections counted open, want 2", n)
	}
	// Under the cap, work goes on as usual.
	for range 10 {
		mustFetch(t, tr, "GET", bs.URL+"/fast")
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestUpstreamMaxConnsChurn: many requests waiting for one connection,
// many of them giving up as it is handed over; no slot may be lost.
func TestUpstreamMaxConnsChurn(t *testing.T) {
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Microsecond)
		_, _ = io.WriteString(w, "ok")
	}))
	defer bs.Close()
	tr, _ := newUpstream(t, func(u *config.Upstream) { u.MaxConnsPerHost = 1 })
	var wg sync.WaitGroup
	var ok, gaveUp atomic.Int32
	for g := range 6 {
		wg.Go(func() {
			for i := range 150 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(200+(g*150+i)%7*150)*time.Microsecond)
				_, body, err := fetch(ctx, tr, "GET", bs.URL+"/", nil)
				cancel()
				switch {
				case err == nil && body == "ok":
					ok.Add(1)
				case errors.Is(err, context.DeadlineExceeded) || isTimeout(err): // a dial cut short is a *net.OpError
					gaveUp.Add(1)
				default:
					t.Errorf("%v %q", err, body)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d answered, %d gave up", ok.Load(), gaveUp.Load())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, body, err := fetch(ctx, tr, "GET", bs.URL+"/", nil); err != nil || body != "ok" {
		t.Fatalf("after the churn: %v %q (a slot was lost)", err, body)
	}
	if o, i := openConns(tr), idleConns(tr); o > 1 || o != i {
		t.Fatalf("pool: %d open, %d idle; want at most 1, all idle", o, i)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, hp := range tr.hosts {
		if len(hp.waiters) != 0 {
			t.Fatalf("%d waiters left", len(hp.waiters))
		}
	}
}

// TestUpstreamStaleDropsOlder: when the newest idle connection turns out
// stale, the older ones are dropped without being tried.
func TestUpstreamStaleDropsOlder(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	restart := make(chan struct{})
	var closed sync.WaitGroup
	closed.Add(3)
	be := startRaw(t, func(c *rawConn) {
		if _, ok2 := c.next(); !ok2 {
			return
		}
		c.send(ok)
		if c.n <= 3 { // the backend "restarts": the first three connections close while idle
			<-restart
			c.Close()
			closed.Done()
			return
		}
		for {
			if _, ok2 := c.next(); !ok2 {
				return
			}
			c.send(ok)
		}
	})
	tr, _ := newUpstream(t, nil)
	holdThenRelease(t, tr, be.url+"/", 3)
	if idleConns(tr) != 3 {
		t.Fatalf("%d idle, want 3", idleConns(tr))
	}
	close(restart)
	closed.Wait()
	time.Sleep(20 * time.Millisecond)
	for range 3 {
		if _, body := mustFetch(t, tr, "GET", be.url+"/"); body != "ok" {
			t.Fatalf("body %q", body)
		}
	}
	if n := be.accepted.Load(); n != 4 {
		t.Fatalf("%d connections, want 4: one retry, then the new connection reused", n)
	}
	if o := openConns(tr); o != 1 {
		t.Fatalf("%d connections open, want 1", o)
	}
}

// doneAfterFirstCheck is a context that reports itself cancelled from
// the second call of Err on: RoundTrip checks it once before sending, so
// it is done by the time a failure is looked at.
type doneAfterFirstCheck struct {
	context.Context
	calls atomic.Int32
}

func (c *doneAfterFirstCheck) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// TestUpstreamNoRetryWhenDone: a stale connection found after the request
// was cancelled is not retried.
func TestUpstreamNoRetryWhenDone(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	stale, closed := make(chan struct{}), make(chan struct{})
	be := startRaw(t, func(c *rawConn) {
		for {
			if _, ok2 := c.next(); !ok2 {
				return
			}
			c.send(ok)
			if c.n == 1 {
				<-stale
				c.Close()
				close(closed)
				return
			}
		}
	})
	tr, _ := newUpstream(t, nil)
	mustFetch(t, tr, "GET", be.url+"/")
	close(stale)
	<-closed
	time.Sleep(20 * time.Millisecond)
	ctx := &doneAfterFirstCheck{Context: context.Background()}
	if _, _, err := fetch(ctx, tr, "GET", be.url+"/", nil); err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := be.accepted.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 (no retry)", n)
	}
}

// handOverOnDone is a context, already cancelled, that hands a connection
// to the request waiting under MaxConnsPerHost as the request looks at
// Done: both are ready when it chooses.
type handOverOnDone struct {
	context.Context
	once sync.Once
	hand func()
	done chan struct{}
}

func (c *handOverOnDone) Done() <-chan struct{} {
	c.once.Do(c.hand)
	return c.done
}

func (c *handOverOnDone) Err() error { return context.Canceled }

// TestUpstreamWaiterGivesBack: a waiting request whose context ends just
// as a connection is handed to it puts the connection back.
func TestUpstreamWaiterGivesBack(t *testing.T) {
	tr, _ := newUpstream(t, func(u *config.Upstream) { u.MaxConnsPerHost = 1 })
	done := make(chan struct{})
	close(done)
	gaveBack := 0
	for range 30 { // select picks either ready case: both paths are taken
		c1, c2 := net.Pipe()
		defer c1.Close()
		defer c2.Close()
		tr.mu.Lock()
		hp := &hostPool{key: "busy.invalid:80", conns: 1} // its one connection is busy
		tr.hosts[hp.key] = hp
		tr.mu.Unlock()
		pc := &upConn{t: tr, hp: hp, nc: c1}
		ctx := &handOverOnDone{Context: context.Background(), done: done, hand: func() { tr.put(pc) }}
		got, reused, err := tr.acquire(ctx, hp.key)
		tr.mu.Lock()
		idle, conns, waiters := len(hp.idle), hp.conns, len(hp.waiters)
		tr.mu.Unlock()
		switch {
		case err == nil:
			if got != pc || !reused || idle != 0 || conns != 1 {
				t.Fatalf("took %p (reused %v), want %p; pool %d idle, %d open", got, reused, pc, idle, conns)
			}
		case errors.Is(err, context.Canceled):
			gaveBack++
			if idle != 1 || conns != 1 || waiters != 0 {
				t.Fatalf("given back: pool %d idle, %d open, %d waiters; want 1, 1, 0", idle, conns, waiters)
			}
		default:
			t.Fatal(err)
		}
		tr.mu.Lock()
		delete(tr.hosts, hp.key)
		tr.mu.Unlock()
	}
	if gaveBack == 0 {
		t.Fatal("the give-back path was never taken")
	}
}

// TestUpstreamCancelledWithBodyBuffered: a request cancelled after its
// answer arrived still reads the buffered body, but its connection (whose
// deadline the cancellation expired) is not kept.
func TestUpstreamCancelledWithBodyBuffered(t *testing.T) {
	be := startRaw(t, answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	tr, _ := newUpstream(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", be.url+"/", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(20 * time.Millisecond) // the cancellation has expired the connection
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(body) != "ok" {
		t.Fatalf("%q %v", body, err)
	}
	if idleConns(tr) != 0 || openConns(tr) != 0 {
		t.Fatalf("pool: %d idle, %d open; want none", idleConns(tr), openConns(tr))
	}
	if _, body := mustFetch(t, tr, "GET", be.url+"/"); body != "ok" {
		t.Fatalf("next request: %q", body)
	}
}

func TestUpstreamIdleTimeout(t *testing.T) {
	be := startRaw(t, answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	t.Run("swept", func(t *testing.T) {
		tr, _ := newUpstream(t, func(u *config.Upstream) { u.IdleConnTimeout = 100 * time.Millisecond })
		before, ended := be.accepted.Load(), be.ended.Load()
		mustFetch(t, tr, "GET", be.url+"/")
		if idleConns(tr) != 1 {
			t.Fatal("not kept")
		}
		// No request comes: the sweep closes it.
		waitFor(t, "the backend to see the idle connection closed", func() bool { return be.ended.Load() == ended+1 })
		if idleConns(tr) != 0 || openConns(tr) != 0 {
			t.Fatalf("pool: %d idle, %d open", idleConns(tr), openConns(tr))
		}
		mustFetch(t, tr, "GET", be.url+"/")
		if n := be.accepted.Load() - before; n != 2 {
			t.Fatalf("%d connections, want 2", n)
		}
	})
	t.Run("checked when taken", func(t *testing.T) {
		tr, _ := newUpstream(t, func(u *config.Upstream) { u.IdleConnTimeout = time.Hour })
		before := be.accepted.Load()
		// Three idle connections, then all of them an hour old.
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 3 {
			wg.Go(func() {
				<-gate
				req, _ := http.NewRequest("GET", be.url+"/", nil)
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(50 * time.Millisecond) // hold it so that each needs its own connection
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			})
		}
		close(gate)
		wg.Wait()
		if idleConns(tr) != 3 {
			t.Fatalf("%d idle, want 3", idleConns(tr))
		}
		tr.mu.Lock()
		for _, hp := range tr.hosts {
			for _, pc := range hp.idle {
				pc.idleSince = pc.idleSince.Add(-2 * time.Hour)
			}
		}
		tr.mu.Unlock()
		mustFetch(t, tr, "GET", be.url+"/")
		if n := be.accepted.Load() - before; n != 4 {
			t.Fatalf("%d connections, want 4 (expired ones not reused)", n)
		}
		if idleConns(tr) != 1 || openConns(tr) != 1 {
			t.Fatalf("pool: %d idle, %d open; want 1, 1", idleConns(tr), openConns(tr))
		}
	})
}

// holdThenRelease has n GETs of url under way at once on tr (each holds
// its connection until its body is read), then reads and closes them all.
func holdThenRelease(t *testing.T, tr http.RoundTripper, url string, n int) {
	t.Helper()
	var held []*http.Response
	for range n {
		req, _ := http.NewRequest("GET", url, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, res)
	}
	for _, res := range held {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

func TestUpstreamMaxIdleConns(t *testing.T) {
	be := startRaw(t, answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	tr, _ := newUpstream(t, func(u *config.Upstream) { u.MaxIdleConns = 2 })
	holdThenRelease(t, tr, be.url+"/", 4)
	if idleConns(tr) != 2 || openConns(tr) != 2 {
		t.Fatalf("pool: %d idle, %d open; want 2, 2", idleConns(tr), openConns(tr))
	}
}

func TestUpstreamCloseIdleConnections(t *testing.T) {
	be := startRaw(t, answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	tr, fb := newUpstream(t, nil)
	mustFetch(t, tr, "GET", be.url+"/")
	tr.CloseIdleConnections()
	if fb.closed.Load() != 1 {
		t.Fatal("the fallback's idle connections were not closed")
	}
	waitFor(t, "the backend to see the connection closed", func() bool { return be.ended.Load() == 1 })
	if idleConns(tr) != 0 || openConns(tr) != 0 || len(tr.hosts) != 0 {
		t.Fatalf("pool not empty: %d idle, %d open, %d hosts", idleConns(tr), openConns(tr), len(tr.hosts))
	}
	mustFetch(t, tr, "GET", be.url+"/")
	if be.accepted.Load() != 2 {
		t.Fatalf("%d connections, want 2", be.accepted.Load())
	}
}

func TestUpstreamDialRefused(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	tr, _ := newUpstream(t, nil)
	_, _, err := fetch(context.Background(), tr, "GET", "http://"+dead+"/", nil)
	if err == nil {
		t.Fatal("no error")
	}
	var op *net.OpError
	if !idempotency.NotSent(err) || !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err = %#v: not recognised as never sent", err)
	}
	if openConns(tr) != 0 || len(tr.hosts) != 0 {
		t.Fatal("a failed dial left a slot taken")
	}
}

// TestUpstreamServesItself: which requests this transport sends and which
// go to the fallback.
func TestUpstreamServesItself(t *testing.T) {
	var conns atomic.Int32
	bs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	bs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	bs.Start()
	defer bs.Close()
	body := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	tests := []struct {
		name, method string
		body         func() io.Reader
		mod          func(*http.Request)
		itself       bool
	}{
		{name: "GET", method: "GET", itself: true},
		{name: "HEAD", method: "HEAD", itself: true},
		{name: "OPTIONS", method: "OPTIONS", itself: true},
		{name: "GET with NoBody", method: "GET", mod: func(r *http.Request) { r.Body = http.NoBody }, itself: true},
		{name: "POST", method: "POST", body: body(`{"symbol":"BTC_USDT"}`)},
		{name: "POST without a body", method: "POST"},
		{name: "PUT", method: "PUT", body: body("x")},
		{name: "PATCH", method: "PATCH", body: body("x")},
		{name: "DELETE", method: "DELETE"},
		{name: "TRACE", method: "TRACE"},
		{name: "GET with a body", method: "GET", body: body("x")},
		{name: "GET with a chunked body", method: "GET", body: body("x"), mod: func(r *http.Request) { r.ContentLength = -1 }},
		{name: "GET with Upgrade", method: "GET", mod: func(r *http.Request) {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
		}},
		{name: "GET with Connection: upgrade only", method: "GET", mod: func(r *http.Request) { r.Header.Set("Connection", "keep-alive, Upgrade") }},
		{name: "GET with Expect", method: "GET", mod: func(r *http.Request) { r.Header.Set("Expect", "100-continue") }},
		{name: "GET with a trailer", method: "GET", mod: func(r *http.Request) { r.Trailer = http.Header{"X-T": nil} }},
		{name: "lower-case method", method: "get"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, fb := newUpstream(t, nil)
			var rd io.Reader
			if tc.body != nil {
				rd = tc.body()
			}
			req, err := http.NewRequest(tc.method, bs.URL+"/", rd)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mod != nil {
				tc.mod(req)
			}
			res, err := tr.RoundTrip(req)
			if err == nil {
				res.Body.Close()
			}
			if tc.name == "GET with a trailer" && err != nil {
				// http.Transport refuses a trailer without a body; what matters is who tried.
				err = nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fb.n.Load() == 0; got != tc.itself {
				t.Fatalf("served itself = %v, want %v", got, tc.itself)
			}
		})
	}
	t.Run("https", func(t *testing.T) {
		tr, fb := newUpstream(t, nil)
		req, _ := http.NewRequest("GET", "https://127.0.0.1:1/", nil)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("no error")
		}
		if fb.n.Load() != 1 {
			t.Fatal("https was not handed to the fallback")
		}
	})
}

// TestUpstreamNoGoroutines: connections in the pool, or waiting for an
// answer, run no goroutine of their own, and nothing is left behind.
func TestUpstreamNoGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	release := make(chan struct{})
	var held atomic.Int32
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	tr, _ := newUpstream(t, nil)
	// 8 connections at once, then idle.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, body, err := fetch(context.Background(), tr, "GET", bs.URL+"/hold", nil); err != nil || body != "ok" {
				t.Errorf("%v %q", err, body)
			}
		})
	}
	waitFor(t, "8 requests at the backend", func() bool { return held.Load() == 8 })
	if n := goroutinesIn("proxy.(*UpstreamTransport)", "proxy.(*upConn)", "proxy.(*upBody)"); n != 8 {
		t.Fatalf("%d goroutines in the transport with 8 requests under way, want 8 (the callers)", n)
	}
	close(release)
	wg.Wait()
	if idleConns(tr) != 8 {
		t.Fatalf("%d idle connections, want 8", idleConns(tr))
	}
	if n := goroutinesIn("proxy.(*UpstreamTransport)", "proxy.(*upConn)", "proxy.(*upBody)"); n != 0 {
		t.Fatalf("%d goroutines in the transport with 8 idle connections, want 0", n)
	}
	// Some failures too: cancellation, refused dial, body closed early.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _ = fetch(ctx, tr, "GET", bs.URL+"/", nil)
	_, _, _ = fetch(context.Background(), tr, "GET", "http://127.0.0.1:1/", nil)
	req, _ := http.NewRequest("GET", bs.URL+"/", nil)
	if res, err := tr.RoundTrip(req); err == nil {
		res.Body.Close()
	}
	tr.CloseIdleConnections()
	bs.Close()
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
}

// goroutinesIn counts the goroutines whose stack has any of fns.
func goroutinesIn(fns ...string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				n++
				break
			}
		}
	}
	return n
}

func TestUpstreamConcurrent(t *testing.T) {
	var conns atomic.Int32
	bs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := concurrentBody(r.URL.Path)
		if len(body) < 1024 { // longer ones are chunked when over 2 KiB
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		}
		if r.Method != "HEAD" {
			_, _ = io.WriteString(w, body)
		}
	}))
	bs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	bs.Start()
	defer bs.Close()
	tr, fb := newUpstream(t, func(u *config.Upstream) { u.MaxIdleConns = 16 })
	const workers, each = 32, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				p := fmt.Sprintf("/w%d/r%d", w, i)
				method := "GET"
				if i%10 == 9 {
					method = "HEAD"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, body, err := fetch(ctx, tr, method, bs.URL+p, nil)
				cancel()
				want := concurrentBody(p)
				if method == "HEAD" {
					want = ""
				}
				if err != nil || res.StatusCode != 200 || body != want {
					t.Errorf("%s %s: %v %q", method, p, err, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if fb.n.Load() != 0 {
		t.Fatal("the fallback was used")
	}
	if o := openConns(tr); o > 16 || idleConns(tr) != o {
		t.Fatalf("pool after the run: %d open, %d idle; want equal and at most 16", o, idleConns(tr))
	}
	t.Logf("%d requests over %d connections", workers*each, conns.Load())
}

// concurrentBody is the answer to path in TestUpstreamConcurrent: up to
// about 4 KiB.
func concurrentBody(path string) string {
	return strings.Repeat(path, 1+int(path[len(path)-1])*len(path)%400)
}

// TestUpstreamInGateway runs gateway behaviours over UpstreamTransport.
func TestUpstreamInGateway(t *testing.T) {
	gateway := func(t *testing.T, backendURL string, be *backend) (*env, *countingFallback) {
		cfg := config.Default()
		cfg.Upstream.URL = config.MustURL(backendURL)
		cfg.Routes[1].Timeout = 300 * time.Millisecond // list_markets
		fb := &countingFallback{rt: NewTransport(cfg.Upstream)}
		return serve(t, cfg, be, Options{Transport: NewUpstreamTransport(cfg.Upstream, fb)}), fb
	}
	be := &backend{}
	release := make(chan struct{})
	defer close(release)
	be.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "yes")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, `{"detail":"backend says no","code":"backend_code"}`)
	}
	bs := httptest.NewServer(be)
	defer bs.Close()
	e, fb := gateway(t, bs.URL, be)

	t.Run("pass-through", func(t *testing.T) {
		for range 3 {
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/?page=2&x=%20y", nil, "Accept-Encoding", "gzip")
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusTeapot || string(body) != `{"detail":"backend says no","code":"backend_code"}` ||
				res.Header.Get("X-Backend") != "yes" {
				t.Fatalf("backend answer changed: %d %s %v", res.StatusCode, body, res.Header)
			}
			got := e.backend.last(t)
			if got.RequestURI != "/api/v1/mkt/markets/?page=2&x=%20y" || got.Header.Get("Accept-Encoding") != "gzip" {
				t.Fatalf("backend got %q, %v", got.RequestURI, got.Header)
			}
			if id := res.Header.Get("X-Request-Id"); id == "" || id != got.Header.Get("X-Request-Id") {
				t.Fatalf("request id: response %q, backend %q", id, got.Header.Get("X-Request-Id"))
			}
			if got.Header.Get("X-Real-Ip") != "127.0.0.1" || got.Header.Get("X-Forwarded-For") != "127.0.0.1" {
				t.Fatalf("forwarding headers: %v", got.Header)
			}
		}
		if fb.n.Load() != 0 {
			t.Fatal("a GET went to the fallback")
		}
	})
	t.Run("order through the fallback", func(t *testing.T) {
		before := fb.n.Load()
		body := `{"symbol":"BTC_USDT"}`
		res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body),
			"Authorization", "Bearer abc.abc.abc", "Content-Type", "application/json")
		res.Body.Close()
		if res.StatusCode != http.StatusTeapot {
			t.Fatalf("status %d", res.StatusCode)
		}
		if fb.n.Load() != before+1 || e.backend.last(t).Body != body {
			t.Fatalf("fallback used %d times, backend got %q", fb.n.Load()-before, e.backend.last(t).Body)
		}
	})
	t.Run("slow backend: 504", func(t *testing.T) {
		start := time.Now()
		assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/?slow=1", nil), http.StatusGatewayTimeout, "gateway_timeout")
		if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
			t.Fatalf("504 after %v, want about the route timeout", d)
		}
	})
	t.Run("backend down: 502", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := ln.Addr().String()
		ln.Close()
		e, _ := gateway(t, "http://"+dead, &backend{})
		assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil), http.StatusBadGateway, "bad_gateway")
	})
}

// processCPU returns the CPU time the process has used, user and system,
// from /proc/self/stat (Linux; 10ms ticks), or false elsewhere.
func processCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3, state
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * (time.Second / 100), true // USER_HZ is 100
}

// reportCPU reports the process CPU time per operation since start: the
// client and the backend (the same process), which are what one proxied
// request costs the machine; the backend's share is the same for both
// transports.
func reportCPU(b *testing.B, start time.Duration, ok bool) {
	if end, ok2 := processCPU(); ok && ok2 && b.N > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

// upstreamBackendEnv set makes TestUpstreamBackendProcess the backend of
// BenchmarkUpstreamTransport.
const upstreamBackendEnv = "EXGATE_TEST_UPSTREAM_BACKEND"

// TestUpstreamBackendProcess is not a test: BenchmarkUpstreamTransport
// runs the test binary with it as its backend, in a process of its own, so
// that the backend neither shares the benchmark's scheduler nor counts in
// its CPU time, as in production. It prints its address and answers GET
// markets until its standard input closes.
func TestUpstreamBackendProcess(t *testing.T) {
	if os.Getenv(upstreamBackendEnv) == "" {
		t.Skip("the backend of BenchmarkUpstreamTransport, run by it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, marketsBody)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("ADDR " + ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

// startBackendProcess starts TestUpstreamBackendProcess and returns its
// URL; it stops when the benchmark ends.
func startBackendProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestUpstreamBackendProcess$")
	cmd.Env = append(os.Environ(), upstreamBackendEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return "http://" + addr
		}
	}
	b.Fatal("the backend process did not start")
	return ""
}

// BenchmarkUpstreamTransport compares UpstreamTransport with NewTransport
// on GET /api/v1/mkt/markets/ against a backend process over loopback:
// the transport alone, and the whole gateway in front of it, one request
// at a time (serial) and from GOMAXPROCS goroutines (parallel). cpu-ns/op
// is the benchmark process's CPU time per request: the client's (or
// gateway's) alone, as "proxy CPU µs/req" in docs/performance.md.
func BenchmarkUpstreamTransport(b *testing.B) {
	backendURL := startBackendProcess(b)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(backendURL)
	cfg.Log.Access = false
	transports := []struct {
		name string
		new  func() http.RoundTripper
	}{
		{"upstream", func() http.RoundTripper { return NewUpstreamTransport(cfg.Upstream, NewTransport(cfg.Upstream)) }},
		{"nethttp", func() http.RoundTripper { return NewTransport(cfg.Upstream) }},
	}
	roundTrip := func(tr http.RoundTripper, req *http.Request) error {
		res, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err == nil && n != int64(len(marketsBody)) {
			err = fmt.Errorf("body of %d bytes", n)
		}
		return err
	}
	newReq := func() (*http.Request, context.CancelFunc) {
		// A cancellable context with a deadline, as the gateway's.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		req, _ := http.NewRequestWithContext(ctx, "GET", backendURL+"/api/v1/mkt/markets/", nil)
		req.Header.Set("User-Agent", "")
		return req, cancel
	}
	serveOne := func(gw *Gateway, w *discardWriter) error {
		req := httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		clear(w.h)
		w.code = 0
		gw.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			return fmt.Errorf("status %d", w.code)
		}
		return nil
	}
	for _, tc := range transports {
		b.Run("transport/"+tc.name+"/serial", func(b *testing.B) {
			tr := tc.new()
			defer tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			req, cancel := newReq()
			defer cancel()
			b.ReportAllocs()
			cpu, ok := processCPU()
			for b.Loop() {
				if err := roundTrip(tr, req); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu, ok)
		})
		b.Run("transport/"+tc.name+"/parallel", func(b *testing.B) {
			tr := tc.new()
			defer tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			b.ReportAllocs()
			cpu, ok := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				req, cancel := newReq()
				defer cancel()
				for pb.Next() {
					if err := roundTrip(tr, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, cpu, ok)
		})
		b.Run("gateway/"+tc.name+"/serial", func(b *testing.B) {
			gw, err := New(cfg, Options{Transport: tc.new()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.CloseIdleConnections()
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			cpu, ok := processCPU()
			for b.Loop() {
				if err := serveOne(gw, w); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu, ok)
		})
		b.Run("gateway/"+tc.name+"/parallel", func(b *testing.B) {
			gw, err := New(cfg, Options{Transport: tc.new()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.CloseIdleConnections()
			b.ReportAllocs()
			cpu, ok := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					if err := serveOne(gw, w); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, cpu, ok)
		})
	}
}

// TestBackendTransportChoice: upstream.transport selects the client.
func TestBackendTransportChoice(t *testing.T) {
	u := config.Default().Upstream
	if _, ok := NewBackendTransport(u).(*UpstreamTransport); !ok {
		t.Errorf("default (%q): %T, want *UpstreamTransport", u.Transport, NewBackendTransport(u))
	}
	u.Transport = config.TransportStandard
	if _, ok := NewBackendTransport(u).(*http.Transport); !ok {
		t.Errorf("standard: %T, want *http.Transport", NewBackendTransport(u))
	}
	// Both carry the gateway's requests.
	for _, tr := range []string{config.TransportFast, config.TransportStandard} {
		t.Run(tr, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) { c.Upstream.Transport = tr })
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
			res.Body.Close()
			if res.StatusCode != 200 || e.backend.count() != 1 {
				t.Errorf("%d, backend saw %d", res.StatusCode, e.backend.count())
			}
		})
	}
}
