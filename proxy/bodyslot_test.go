package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// trickle opens a connection that sends the head of a POST to path with a
// body of length bytes and the first byte of it; the rest goes when the
// returned function is called, which then returns the answer.
func trickle(t *testing.T, addr, path string, length int) func() *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(length)+"\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	return func() *http.Response {
		if _, err := io.WriteString(c, strings.Repeat(" ", length-1)); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
}

// TestBodyReadWholeBeforeBackend: a body exgate does not validate (the
// sign-in route, no account; a wallet route) is read whole before the
// request takes anything of the backend's. While its client trickles the
// body, byte by byte, the backend has seen no request — no connection
// carries its head — and the one slot of a fixed limit is free for other
// requests; only the last byte sends it, whole, with its length.
func TestBodyReadWholeBeforeBackend(t *testing.T) {
	for _, path := range []string{"/api/v1/usr/authenticate/", "/api/v1/wlt/transfer/"} {
		t.Run(path, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) {
				c.Overload.FixedLimit = 1
				c.Overload.MaxWait.MarketData = 0
				forwardWrites(c, "wallets_refused")
			})
			arrived := make(chan string, 8)
			e.backend.arrived = arrived
			const length = 16
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
				"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(length)+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			body := `{"a":"012345678"}`[:length-1] + "}"
			for i := range length - 1 {
				if _, err := io.WriteString(c, body[i:i+1]); err != nil {
					t.Fatal(err)
				}
				waitBuffered(t, e, reading(i+1, 1)) // exgate has read the byte
				if n := e.backend.countPath(path); n != 0 || len(arrived) != 0 {
					t.Fatalf("after %d of %d bytes the backend has seen %d requests (%d arrived), want none", i+1, length, n, len(arrived))
				}
				if n := e.gw.controller().InFlight(); n != 0 {
					t.Fatalf("a trickling body holds %d backend slots, want none", n)
				}
				if i%5 == 0 {
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
					res.Body.Close()
					if res.StatusCode != http.StatusOK || arrival(t, arrived) != "/api/v1/mkt/markets/" {
						t.Fatalf("a request beside a trickling body: %d, want 200", res.StatusCode)
					}
				}
			}
			if _, err := io.WriteString(c, body[length-1:]); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("the trickled request, whole: %d, want 200", res.StatusCode)
			}
			got := e.backend.last(t)
			if e.backend.countPath(path) != 1 || got.Path != path || got.Body != body || got.BodyErr != nil ||
				got.ContentLength != length || len(got.TransferEncoding) != 0 {
				t.Fatalf("the backend got %s with %q (length %d, %v, %v), want the whole body with its length",
					got.Path, got.Body, got.ContentLength, got.TransferEncoding, got.BodyErr)
			}
			if n := e.gw.controller().InFlight(); n != 0 {
				t.Errorf("%d slots held after every request ended", n)
			}
			waitBuffered(t, e, 0)
		})
	}
}

// TestBodyShedWhenWhole: a body that arrives whole when the backend has no
// slot for it is shed, 503 overloaded, and the backend never hears of the
// request.
func TestBodyShedWhenWhole(t *testing.T) {
	e := startEnv(t, func(c *config.Config) {
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.MarketData = 0
	})
	release := make(chan struct{})
	arrived := make(chan string, 8)
	e.backend.arrived = arrived
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/mkt/currencies/" {
			<-release
		}
	}
	finish := trickle(t, e.addr, "/api/v1/usr/upload/", 64)
	waitBuffered(t, e, reading(1, 1))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // holds the one slot
		defer wg.Done()
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
		res.Body.Close()
	}()
	arrival(t, arrived)
	assertError(t, finish(), http.StatusServiceUnavailable, "overloaded")
	close(release)
	wg.Wait()
	for _, got := range e.backend.all() {
		if got.Path == "/api/v1/usr/upload/" {
			t.Errorf("the backend got %d bytes of a request exgate shed", len(got.Body))
		}
	}
}

// TestSlotSampleIsBackendTime: the concurrency limit learns from the
// backend's time only, from a body's last byte to the response head,
// never from the client's upload: with the gateway's clock moved 20 s
// while each of a window's bodies trickled, and not at all while the
// backend answered, the backend's measured unloaded time is that of the
// backend, not 20 s.
func TestSlotSampleIsBackendTime(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	be := &backend{}
	arrived := make(chan string, 16)
	be.arrived = arrived
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Overload.InitialLimit = 8
	e := serve(t, cfg, be, Options{Now: clk.Now})
	for range 12 { // a window closes at its 10th sample
		finish := trickle(t, e.addr, "/api/v1/usr/upload/", 64)
		waitBuffered(t, e, reading(1, 1))
		clk.Add(20 * time.Second) // the client's upload
		res := finish()
		res.Body.Close()
		if res.StatusCode != http.StatusOK || arrival(t, arrived) != "/api/v1/usr/upload/" {
			t.Fatalf("upload: %d", res.StatusCode)
		}
	}
	if got := e.gw.controller().MinRTT(); got == 0 || got >= time.Second {
		t.Errorf("the backend's unloaded time measured %v, want the backend's own (under a second on the gateway's clock), not the 20s uploads", got)
	}
}

// countPath returns how many requests to path the backend has received.
func (b *backend) countPath(path string) int {
	n := 0
	for _, r := range b.all() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// arrival returns the path of the next request to arrive at the backend,
// failing the test when none does within 10s.
func arrival(t *testing.T, arrived <-chan string) string {
	t.Helper()
	select {
	case p := <-arrived:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no request arrived at the backend within 10s")
		return ""
	}
}

// manualClock is a clock the test moves.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *manualClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
