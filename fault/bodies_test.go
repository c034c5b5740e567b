package fault

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// vmRSS returns the resident memory of process pid in bytes, from
// /proc/PID/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// TestHeldUploadsBuffered holds 300 chunked uploads of one 1 MiB chunk
// each on a default-route path (the body never ends) from one address and
// measures the real exgate: every body is read whole before its request
// reaches the backend, so the backend hears of none of them (no request,
// no byte); exgate holds at most its client's share of
// server.max_buffered_bytes (half of it, for one address), refuses the
// uploads past it with 503 server_busy, and grows by far less than the
// 300 MiB it is sent (bound: 128 MiB); once the clients close, its
// goroutines and heap return to their baseline and it holds no body byte.
func TestHeldUploadsBuffered(t *testing.T) {
	const (
		uploads = 300
		chunk   = 1 << 20
		budget  = 64 << 20 // server.max_buffered_bytes, the default
	)
	var received atomic.Int64 // body bytes the backend has read
	var arrived atomic.Int64  // requests the backend has seen
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/usr/upload/" {
			return // the market catalogue's fetch
		}
		arrived.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(bs.Close)
	g := startGateway(t, configHeader(bs.URL)+`server:
  read_timeout: 120s
admin:
  pprof: true
limiter:
  store: memory
validation:
  before_catalogue: pass
`)
	host := strings.TrimPrefix(g.url, "http://")
	pid := g.cmd.Process.Pid

	// Warm up: a few complete uploads, so that pools and the runtime are
	// at their resting size.
	warmUpUploads(t, g)
	time.Sleep(200 * time.Millisecond)
	baseGoroutines := g.metric(t, "go_goroutines")
	baseHeap := g.metric(t, "go_memstats_heap_inuse_bytes")
	baseRSS := vmRSS(t, pid)
	warmArrived, warmReceived := arrived.Load(), received.Load()

	conns := make([]net.Conn, 0, uploads)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var answers uploadAnswers
	start := time.Now()
	openHeldUploads(t, host, uploads, chunk, &conns, &answers)
	// Every upload ends held (its 1 MiB charged, and its read's charge
	// while the body goes on) or refused.
	const per = chunk + config.BodyReadCharge
	deadline := time.Now().Add(60 * time.Second)
	var peak, buffered int64
	for {
		peak = max(peak, vmRSS(t, pid))
		buffered = int64(g.metric(t, "exgate_body_buffered_bytes"))
		if buffered%per == 0 && answers.refused.Load()+answers.other.Load()+buffered/per == uploads {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d uploads refused, %d otherwise answered, %d bytes held; exgate grew by %d MiB meanwhile",
				answers.refused.Load(), answers.other.Load(), buffered, (peak-baseRSS)>>20)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := vmRSS(t, pid)
	peak = max(peak, held)
	t.Logf("%d uploads of 1 MiB held open in %v: %d held whole (%d MiB), %d refused; exgate VmRSS %d MiB → %d MiB (peak %d MiB, +%d MiB)",
		uploads, time.Since(start).Round(time.Millisecond), buffered/per, buffered>>20, answers.refused.Load(), baseRSS>>20, held>>20, peak>>20, (peak-baseRSS)>>20)
	if n, b := arrived.Load()-warmArrived, received.Load()-warmReceived; n != 0 || b != 0 {
		t.Errorf("the backend saw %d requests and %d body bytes of uploads that never ended, want none", n, b)
	}
	if buffered > budget/2 || answers.refused.Load() == 0 || answers.other.Load() != 0 {
		t.Errorf("one address holds %d MiB of the %d MiB budget, %d uploads refused server_busy, %d answered otherwise: want at most half, the rest refused",
			buffered>>20, budget>>20, answers.refused.Load(), answers.other.Load())
	}
	if n := g.metric(t, "exgate_body_budget_refusals_total"); n != float64(answers.refused.Load()) {
		t.Errorf("exgate_body_budget_refusals_total %v, want the %d refusals", n, answers.refused.Load())
	}
	if grew := peak - baseRSS; grew > 128<<20 {
		t.Errorf("exgate grew by %d MiB holding %d uploads of 1 MiB, want < 128 MiB", grew>>20, uploads)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	waitForBaseline(t, g, baseGoroutines, baseHeap)
	if n := arrived.Load() - warmArrived; n != 0 {
		t.Errorf("the backend saw %d requests of uploads cut off, want none", n)
	}

	if g.exited() {
		t.Fatalf("exgate exited: %v", g.err)
	}
}

// warmUpUploads sends g a few complete uploads and closes their
// connections.
func warmUpUploads(t *testing.T, g *gateway) {
	c := newClient(t, 4)
	for range 8 {
		req, _ := http.NewRequest(http.MethodPost, g.url+"/api/v1/usr/upload/", io.MultiReader(bytes.NewReader(make([]byte, 64<<10))))
		if a := do(c, req); a.err != nil || a.status != http.StatusNoContent {
			t.Fatalf("warm-up upload: %d %v", a.status, a.err)
		}
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
}

// uploadAnswers counts exgate's answers to uploads it holds: refusals for
// the body budget, and any other answer.
type uploadAnswers struct{ refused, other atomic.Int64 }

// openHeldUploads opens n connections to host, appending each to conns,
// and sends on each an upload of one chunk of chunk bytes that never ends;
// it counts exgate's answers, if any, in answers.
func openHeldUploads(t *testing.T, host string, n, chunk int, conns *[]net.Conn, answers *uploadAnswers) {
	head := []byte("POST /api/v1/usr/upload/ HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(chunk), 16) + "\r\n")
	body := bytes.Repeat([]byte("x"), chunk)
	for i := range n {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		*conns = append(*conns, conn)
		go func() { // the chunk, and no end: the upload is held
			_, _ = conn.Write(head)
			_, _ = conn.Write(body)
			_, _ = conn.Write([]byte("\r\n"))
		}()
		go func() { // exgate's answer, if it refuses the upload
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case err != nil: // closed when the test ends
			case res.StatusCode == http.StatusServiceUnavailable && strings.Contains(readAll(res), `"code":"server_busy"`):
				answers.refused.Add(1)
			default:
				answers.other.Add(1)
			}
		}()
	}
}

// waitForBaseline waits up to 20s for g to hold no body byte and for its
// goroutines and heap to return to their baseline, and fails t if they do
// not.
func waitForBaseline(t *testing.T, g *gateway, baseGoroutines, baseHeap float64) {
	pid := g.cmd.Process.Pid
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The body buffers go back to a sync.Pool, which keeps them
		// until the second collection after: collect before measuring,
		// so that what is measured is what exgate still holds.
		if res, err := noKeepAlive().Get(g.admin + "/debug/pprof/heap?gc=1"); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		gr, heap := g.metric(t, "go_goroutines"), g.metric(t, "go_memstats_heap_inuse_bytes")
		buffered := g.metric(t, "exgate_body_buffered_bytes")
		if buffered == 0 && gr <= baseGoroutines+5 && heap <= baseHeap+16<<20 {
			t.Logf("after the clients closed: goroutines %v (baseline %v), heap in use %.1f MiB (baseline %.1f MiB), VmRSS %d MiB",
				gr, baseGoroutines, heap/(1<<20), baseHeap/(1<<20), vmRSS(t, pid)>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the clients closed: %v body bytes held, goroutines %v (baseline %v), heap in use %.1f MiB (baseline %.1f MiB)",
				buffered, gr, baseGoroutines, heap/(1<<20), baseHeap/(1<<20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readAll returns res's body, closed.
func readAll(res *http.Response) string {
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
