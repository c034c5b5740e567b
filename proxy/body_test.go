package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
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
	_, err = io.WriteString(c, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(length)+"\r\n\r\n"+body)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
// arrived, charged to its client's share of server.max_buffered_bytes,
// never what its Content-Length promises. A client is refused 503
// server_busy (its connection closed: the body stays unread) once it
// would hold more than is left free, while a client that holds nothing
// still places its orders; everything comes back when the bodies end.
func TestBufferBudget(t *testing.T) {
	const budget = 128 << 10
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) { c.Server.MaxBufferedBytes = budget })
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`

	// 64 heads promising 8 KiB each (4× the budget), one byte of body
	// sent: 64 bytes held, and the same client's order still fits.
	var conns []net.Conn
	for range 64 {
		conns = append(conns, holdOrder(t, e.addr, "127.0.0.1", 8<<10, "{"))
	}
	waitBuffered(t, e, 64)
	if res := postOrder(t, e, order); res.StatusCode != http.StatusCreated {
		t.Fatalf("an order beside 64 unsent bodies: %d", res.StatusCode)
	}

	// The same client sends most of 16 bodies of 8 KiB: it may hold half
	// the budget, and the bodies past that are refused to it.
	var refused int
	for range 16 {
		before := e.gw.budget.Buffered()
		c := holdOrder(t, e.addr, "127.0.0.1", 8<<10, "{"+strings.Repeat(" ", 8<<10-2))
		conns = append(conns, c)
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
		for res == nil && e.gw.budget.Buffered() != before+8<<10-1 {
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

// TestBufferBudgetShares: a client may take a byte only while it holds
// fewer than are left free: alone, half the budget; with
// others taking all they can, less, and a client that holds nothing
// always finds room.
func TestBufferBudgetShares(t *testing.T) {
	b := newSharedPool(1000)
	fill := func(c clientKey) int64 {
		var n int64
		for b.take(c, 10) {
			n += 10
		}
		return n
	}
	if got := fill(1); got != 500 {
		t.Errorf("a client alone took %d of 1000, want 500", got)
	}
	if got := fill(2); got != 250 {
		t.Errorf("a second client took %d of the 500 left, want 250", got)
	}
	if got := fill(3); got != 120 {
		t.Errorf("a third client took %d of the 250 left, want 120", got)
	}
	if !b.take(4, 10) {
		t.Error("a client that holds nothing found no room")
	}
	if b.take(1, 1) || b.take(2, 1) {
		t.Error("a client at its share took more")
	}
	b.give(1, 500)
	if !b.take(2, 10) || b.Clients() != 3 || b.Buffered() != 390 {
		t.Errorf("after the first client left: %d clients hold %d bytes, want 3 and 390", b.Clients(), b.Buffered())
	}
	if b.take(5, 1001) {
		t.Error("a body larger than the budget was taken")
	}
}

// TestStreamedBodyFailures: a body that the client sends too slowly or
// breaks off is the client's failure (408, 400), not the backend's, and
// the backend never gets a complete request.
func TestStreamedBodyFailures(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.ReadTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /api/v1/usr/other/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nslow\r\n")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // only bounds a hang: the upload never ends
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	assertError(t, res, http.StatusRequestTimeout, "request_timeout")
	if !res.Close {
		t.Error("the connection of a stalled upload is kept")
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.backend.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.backend.last(t); got.BodyErr == nil {
		t.Errorf("the backend read a complete body %q from a stalled upload", got.Body)
	}
}

func TestBodyTooLarge(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.MaxBodyBytes = 1 << 10 })
	big := strings.Repeat("x", 64<<10)
	// Declared length over the limit: refused before anything is sent.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", strings.NewReader(big)),
		http.StatusRequestEntityTooLarge, "request_too_large")
	if e.backend.count() != 0 {
		t.Fatal("a body of declared oversize length reached the backend")
	}
	// Chunked over the limit: streamed up to the limit, then the upstream
	// request is broken off, so the backend never gets a complete one.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader(big))),
		http.StatusRequestEntityTooLarge, "request_too_large")
	deadline := time.Now().Add(5 * time.Second)
	for e.backend.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if e.backend.count() == 1 {
		if got := e.backend.last(t); got.BodyErr == nil || len(got.Body) > 1<<10 {
			t.Fatalf("the backend read %d bytes of an oversize body and then %v, want a broken request", len(got.Body), got.BodyErr)
		}
	}
	// Chunked under the limit: streamed whole.
	res := do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader("small")))
	res.Body.Close()
	got := e.backend.last(t)
	if res.StatusCode != http.StatusOK || got.Body != "small" || got.BodyErr != nil {
		t.Fatalf("status %d, backend got %q (%v)", res.StatusCode, got.Body, got.BodyErr)
	}
}
