package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// holdChunkedOrder opens a connection that sends an order's head and the
// first chunk of its body, then holds; it is closed when the test ends.
func holdChunkedOrder(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sym\r\n")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBufferBudget: order bodies being read hold server.max_buffered_bytes
// between them; past it orders get 503 server_busy, and the budget comes
// back when they end.
func TestBufferBudget(t *testing.T) {
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) { c.Server.MaxBufferedBytes = 64 << 10 })
	// A chunked order reserves validation.max_body_bytes + 1 = 8193 bytes:
	// seven fit in 64 KiB, an eighth does not.
	holders := make([]net.Conn, 7)
	for i := range holders {
		holders[i] = holdChunkedOrder(t, e.addr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.gw.budget.left.Load() > 64<<10-7*8193 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	late := holdChunkedOrder(t, e.addr)
	res, err := http.ReadResponse(bufio.NewReader(late), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := assertError(t, res, http.StatusServiceUnavailable, "server_busy")
	if res.Header.Get("Retry-After") != "1" || b.Detail == "" {
		t.Errorf("server_busy: Retry-After %q, %+v", res.Header.Get("Retry-After"), b)
	}
	// A small order of known length still fits in what is left.
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	if res := postOrder(t, e, body); res.StatusCode != http.StatusCreated {
		t.Errorf("small order with the budget nearly spent: %d", res.StatusCode)
	}
	for _, c := range holders {
		c.Close()
	}
	deadline = time.Now().Add(5 * time.Second)
	for e.gw.budget.left.Load() != 64<<10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if left := e.gw.budget.left.Load(); left != 64<<10 {
		t.Fatalf("budget after the holders left: %d, want it all back", left)
	}
	if res := postOrder(t, e, body, "Transfer-Encoding", "chunked"); res.StatusCode != http.StatusCreated {
		t.Errorf("order after the holders left: %d", res.StatusCode)
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
