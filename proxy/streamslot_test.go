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
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(length)+"\r\n\r\n{"); err != nil {
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

// TestStreamedBodyHoldsNoSlot: a request whose body streams takes its
// backend slot only once the body has arrived whole. While its client
// trickles the body, the one slot of a fixed limit is free for other
// requests; once the body is whole the request takes the slot, and gives
// it back when it ends.
func TestStreamedBodyHoldsNoSlot(t *testing.T) {
	e := startEnv(t, func(c *config.Config) {
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.MarketData = 0
	})
	arrived := make(chan string, 8)
	e.backend.arrived = arrived
	finish := trickle(t, e.addr, "/api/v1/usr/upload/", 64)
	if got := arrival(t, arrived); got != "/api/v1/usr/upload/" {
		t.Fatalf("the backend got %s first", got)
	}
	if n := e.gw.admission.InFlight(); n != 0 {
		t.Fatalf("a trickling body holds %d backend slots, want none", n)
	}
	for range 3 {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("a request beside a trickling body: %d, want 200", res.StatusCode)
		}
	}
	res := finish()
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the trickled request, whole: %d, want 200", res.StatusCode)
	}
	if got := e.backend.last(t); got.Path != "/api/v1/usr/upload/" || got.BodyErr != nil || len(got.Body) != 64 {
		t.Fatalf("the backend got %s with %d bytes (%v), want the whole upload", got.Path, len(got.Body), got.BodyErr)
	}
	if n := e.gw.admission.InFlight(); n != 0 {
		t.Errorf("%d slots held after every request ended", n)
	}
}

// TestStreamedBodyShedWhenWhole: a streamed body that arrives whole when
// the backend has no slot for it is shed, 503 overloaded, and the backend
// gets it without its last bytes, never whole.
func TestStreamedBodyShedWhenWhole(t *testing.T) {
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
	arrival(t, arrived)
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
		if got.Path == "/api/v1/usr/upload/" && got.BodyErr == nil {
			t.Errorf("the backend read a whole body (%d bytes) of a request exgate shed", len(got.Body))
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
		arrival(t, arrived)
		clk.Add(20 * time.Second) // the client's upload
		res := finish()
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("upload: %d", res.StatusCode)
		}
	}
	if got := e.gw.admission.MinRTT(); got == 0 || got >= time.Second {
		t.Errorf("the backend's unloaded time measured %v, want the backend's own (under a second on the gateway's clock), not the 20s uploads", got)
	}
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
