package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/exgate/exgate/config"
)

// holdOrder opens a connection from the loopback address from that sends
// the head of an order promising length bytes and the first bytes of its
// body, then holds; it is closed when the test ends.
func holdOrder(t *testing.T, addr, from string, length int, body string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, orderHead(length)+body)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// orderHead is the head of an order promising length bytes of body.
func orderHead(length int) string {
	return "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(length) + "\r\n\r\n"
}

// fillShare opens 16 connections from the loopback address from, each
// sending head and body (all of its body but the last byte), one after
// the other, and returns how many exgate refused (503 server_busy, its
// connection closed) and the connections, which are closed when the test
// ends. Each is either refused or held before the next is opened.
func fillShare(t *testing.T, e *env, from, head, body string) (refused int, conns []net.Conn) {
	t.Helper()
	for range 16 {
		before := e.gw.budget.Buffered()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		_, _ = io.WriteString(c, head+body)
		answered := make(chan *http.Response, 1)
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				res = nil // closed when the test ends
			}
			answered <- res
		}()
		var res *http.Response
		deadline := time.Now().Add(5 * time.Second)
		for res == nil && e.gw.budget.Buffered() != before+reading(len(body), 1) {
			if time.Now().After(deadline) {
				t.Fatalf("a body neither held nor refused: %d bytes held", e.gw.budget.Buffered())
			}
			select {
			case res = <-answered:
			case <-time.After(5 * time.Millisecond):
			}
		}
		if res == nil {
			continue // held whole but its last byte
		}
		refused++
		assertError(t, res, http.StatusServiceUnavailable, "server_busy")
		if res.Header.Get("Retry-After") != "1" || !res.Close {
			t.Errorf("server_busy: Retry-After %q, connection closed %v", res.Header.Get("Retry-After"), res.Close)
		}
	}
	return refused, conns
}

// reading returns what the body budget holds for bodies being read of
// which bytes have arrived: the bytes and each read's charge.
func reading(bytes, bodies int) int64 {
	return int64(bytes) + int64(bodies)*config.BodyReadCharge
}

// waitBuffered waits until the gateway's body budget holds n bytes.
func waitBuffered(t *testing.T, e *env, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.gw.budget.Buffered() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the body budget holds %d bytes, want %d", e.gw.budget.Buffered(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBufferBudget: an order body being read holds the bytes that have
// arrived and its read's charge (config.BodyReadCharge), charged to its
// client's share of server.max_buffered_bytes, never what its
// Content-Length promises. A client is refused 503
// server_busy (its connection closed: the body stays unread) once it
// would hold more than is left free, while a client that holds nothing
// still places its orders; everything comes back when the bodies end.
func TestBufferBudget(t *testing.T) {
	const budget = 256 << 10
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) { c.Server.MaxBufferedBytes, c.Server.MaxBodyBytes = budget, 64<<10 })
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`

	// 4 heads promising 8 KiB each, one byte of body sent:
	// 4 bytes and 4 reads' charges held, and the same client's order
	// still fits.
	var conns []net.Conn
	for range 4 {
		conns = append(conns, holdOrder(t, e.addr, "127.0.0.1", 8<<10, "{"))
	}
	waitBuffered(t, e, reading(4, 4))
	if res := postOrder(t, e, order); res.StatusCode != http.StatusCreated {
		t.Fatalf("an order beside 64 unsent bodies: %d", res.StatusCode)
	}

	// The same client sends most of 16 bodies of 8 KiB: it may hold half
	// the budget, and the bodies past that are refused to it.
	refused, held16 := fillShare(t, e, "127.0.0.1", orderHead(8<<10), "{"+strings.Repeat(" ", 8<<10-2))
	conns = append(conns, held16...)
	held := e.gw.budget.Buffered()
	t.Logf("one client: %d of 16 bodies refused, %d bytes held of %d", refused, held, budget)
	if refused == 0 || held > budget/2 {
		t.Errorf("one client holds %d bytes of %d (%d bodies refused), want at most half", held, budget, refused)
	}

	// Another client, holding nothing, places its order.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	req, _ := http.NewRequest("POST", e.url+"/api/v1/odr/orders/", strings.NewReader(order))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	if res, err := other.Do(req); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("another client's order while the first holds its share: %v %v", res, err)
	}

	for _, c := range conns {
		c.Close()
	}
	waitBuffered(t, e, 0)
	if n := e.gw.budget.Clients(); n != 0 {
		t.Errorf("%d clients hold bytes after every body ended", n)
	}
}

// TestBodyCutNeverReachesBackend: a body the client sends too slowly is
// cut by server.read_timeout (408, its connection closed), one it breaks
// off is refused (400), and the backend hears of neither: exgate reads a
// body whole before it sends anything.
func TestBodyCutNeverReachesBackend(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.ReadTimeout = 300 * time.Millisecond })
	for _, tc := range []struct {
		name, head, body string
		broken           bool // the client closes its side after the body's start
		status           int
		code             string
	}{
		{"chunked, stalled", "Transfer-Encoding: chunked", "4\r\nslow\r\n", false, http.StatusRequestTimeout, "request_timeout"},
		{"length, stalled", "Content-Length: 64", `{"api_key":`, false, http.StatusRequestTimeout, "request_timeout"},
		{"length, broken off", "Content-Length: 64", `{"api_key":`, true, http.StatusBadRequest, "invalid_body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST /api/v1/usr/authenticate/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				tc.head+"\r\n\r\n"+tc.body)
			if tc.broken {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // only bounds a hang: the upload never ends
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			assertError(t, res, tc.status, tc.code)
			if !res.Close {
				t.Error("the connection of a body left unread is kept")
			}
			if n := e.backend.count(); n != 0 {
				t.Errorf("the backend got %d requests of a body exgate could not read whole", n)
			}
			waitBuffered(t, e, 0)
		})
	}
}

// TestBodyTooLarge: a body over server.max_body_bytes is refused 413 and
// never reaches the backend, whether its length is declared or it comes
// chunked (refused when its bytes pass the limit); a chunked body within
// the limit goes to the backend with its length.
func TestBodyTooLarge(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.MaxBodyBytes = 1 << 10 })
	big := strings.Repeat("x", 64<<10)
	// Declared length over the limit: refused before any of it is read.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", strings.NewReader(big)),
		http.StatusRequestEntityTooLarge, "request_too_large")
	// Chunked over the limit: refused once its bytes pass it.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader(big))),
		http.StatusRequestEntityTooLarge, "request_too_large")
	// Exactly at the limit, chunked: forwarded whole.
	at := strings.Repeat("y", 1<<10)
	res := do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader(at)))
	res.Body.Close()
	if n := e.backend.count(); n != 1 {
		t.Fatalf("the backend got %d requests, want only the one within the limit", n)
	}
	if got := e.backend.last(t); res.StatusCode != http.StatusOK || got.Body != at || got.ContentLength != 1<<10 || len(got.TransferEncoding) != 0 {
		t.Fatalf("status %d, backend got %d bytes, Content-Length %d, Transfer-Encoding %v", res.StatusCode, len(got.Body), got.ContentLength, got.TransferEncoding)
	}
	waitBuffered(t, e, 0)
}

// TestChunkedBodyForwardedWithLength: a chunked body, empty or not, in one
// chunk or many, goes to the backend with its Content-Length and no
// Transfer-Encoding: the form of it exgate counted.
func TestChunkedBodyForwardedWithLength(t *testing.T) {
	e := startEnv(t, nil)
	for _, tc := range []struct{ name, chunks, want string }{
		{"empty", "0\r\n\r\n", ""},
		{"one chunk", "7\r\n{\"a\":1}\r\n0\r\n\r\n", `{"a":1}`},
		{"chunks and an extension", "3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n", `{"a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST /api/v1/usr/authenticate/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				"Transfer-Encoding: chunked\r\n\r\n"+tc.chunks)
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got := e.backend.last(t)
			if res.StatusCode != http.StatusOK || got.Body != tc.want || got.ContentLength != int64(len(tc.want)) ||
				len(got.TransferEncoding) != 0 || got.Header.Get("Content-Length") != strconv.Itoa(len(tc.want)) {
				t.Errorf("status %d; the backend got %q, Content-Length %d (%q), Transfer-Encoding %v; want %q with its length",
					res.StatusCode, got.Body, got.ContentLength, got.Header.Get("Content-Length"), got.TransferEncoding, tc.want)
			}
		})
	}
}

// TestBufferBudgetOtherRoutes: bodies exgate does not validate take the
// bytes that have arrived from their client's share of the body budget,
// as orders do: a client that holds its share gets 503 server_busy for
// itself, while another client's requests on the same route pass.
func TestBufferBudgetOtherRoutes(t *testing.T) {
	const budget = 128 << 10
	e := startEnv(t, func(c *config.Config) {
		c.Server.MaxBufferedBytes = budget
		forwardWrites(c, "wallets_refused")
	})
	head := func(length int) string {
		return "POST /api/v1/wlt/transfer/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(length) + "\r\n\r\n"
	}
	refused, conns := fillShare(t, e, "127.0.0.1", head(8<<10), "{"+strings.Repeat(" ", 8<<10-2))
	held := e.gw.budget.Buffered()
	t.Logf("one client: %d of 16 bodies refused, %d bytes held of %d", refused, held, budget)
	if refused == 0 || held > budget/2 {
		t.Errorf("one client holds %d bytes of %d (%d bodies refused), want at most half", held, budget, refused)
	}
	if n := e.backend.count(); n != 0 {
		t.Errorf("the backend got %d requests of bodies still arriving or refused", n)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	req, _ := http.NewRequest("POST", e.url+"/api/v1/wlt/transfer/", strings.NewReader(`{"amount":"1"}`))
	req.Header.Set("Authorization", "Bearer tok")
	res, err := other.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("another client's request while the first holds its share: %v %v", res, err)
	}
	res.Body.Close()
	for _, c := range conns {
		c.Close()
	}
	waitBuffered(t, e, 0)
}

// TestReadChunks: a body read whole fills pooled buffers of a few KiB one
// after the other as its bytes arrive, so its memory is what it is
// charged, never a buffer grown by copies; past the limit it is too big.
// Whole, it is the first buffer itself when it fits there, else one
// buffer of its own of exactly its length.
func TestReadChunks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		limit  int64
		tooBig bool
	}{
		{"empty", 0, 1 << 20, false},
		{"one buffer", 100, 1 << 20, false},
		{"a buffer's size", 8 << 10, 1 << 20, false},
		{"many buffers", 100<<10 + 7, 1 << 20, false},
		{"at the limit", 64 << 10, 64 << 10, false},
		{"past the limit", 64<<10 + 1, 64 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Repeat("z", tc.size)
			st := &requestState{}
			st.bodyBuf = bodyPool.Get().(*[]byte)
			*st.bodyBuf = (*st.bodyBuf)[:0]
			defer st.releaseBodyBuffers()
			n, tooBig, err := st.readChunks(iotest.HalfReader(strings.NewReader(src)), tc.limit)
			if err != nil || tooBig != tc.tooBig {
				t.Fatalf("%d bytes, too big %v, %v; want too big %v", n, tooBig, err, tc.tooBig)
			}
			held := len(*st.bodyBuf)
			for _, bp := range st.bodyMore {
				if cap(*bp) > 64<<10 {
					t.Errorf("a buffer of %d bytes", cap(*bp))
				}
				held += len(*bp)
			}
			if int64(held) != n || len(st.bodyMore) > int(n)/(8<<10) {
				t.Errorf("%d bytes read into %d buffers holding %d", n, len(st.bodyMore)+1, held)
			}
			if tooBig {
				return
			}
			body, pooled := st.wholeBody(n)
			if string(body) != src || pooled != (tc.size <= 8<<10) || !pooled && cap(body) != tc.size {
				t.Errorf("whole: %d bytes (cap %d, pooled %v), want the %d sent", len(body), cap(body), pooled, len(src))
			}
		})
	}
}
