package fault

import (
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

// TestHeldUploadsStream holds 300 chunked uploads of one 1 MiB chunk each
// on a default-route path (the attack: the body never ends) and
// measures the real exgate's resident memory: bodies stream to the
// backend, so exgate grows by far less than the 300 MiB it is sent
// (bound: 128 MiB), and once the clients close, its goroutines and heap
// return to their baseline.
func TestHeldUploadsStream(t *testing.T) {
	const (
		uploads = 300
		chunk   = 1 << 20
	)
	var received atomic.Int64 // body bytes the backend has read
	var open atomic.Int64     // requests the backend is in
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open.Add(1)
		defer open.Add(-1)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			received.Add(int64(n))
			if err != nil {
				break
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(bs.Close)
	g := startGateway(t, configHeader(bs.URL)+`limiter:
  backend: memory
validation:
  before_catalogue: pass
`)
	host := strings.TrimPrefix(g.url, "http://")
	pid := g.cmd.Process.Pid

	// Warm up: a few complete uploads, so that pools and the runtime are
	// at their resting size.
	c := newClient(t, 4)
	for range 8 {
		req, _ := http.NewRequest(http.MethodPost, g.url+"/api/v1/usr/upload/", io.MultiReader(bytes.NewReader(make([]byte, 64<<10))))
		if a := do(c, req); a.err != nil || a.status != http.StatusNoContent {
			t.Fatalf("warm-up upload: %d %v", a.status, a.err)
		}
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	baseGoroutines := g.metric(t, "go_goroutines")
	baseHeap := g.metric(t, "go_memstats_heap_inuse_bytes")
	baseRSS := vmRSS(t, pid)

	head := []byte("POST /api/v1/usr/upload/ HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(chunk, 16) + "\r\n")
	body := bytes.Repeat([]byte("x"), chunk)
	conns := make([]net.Conn, 0, uploads)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := range uploads {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		conns = append(conns, conn)
		go func() { // the chunk, and no end: the upload is held
			_, _ = conn.Write(head)
			_, _ = conn.Write(body)
			_, _ = conn.Write([]byte("\r\n"))
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	var peak int64
	for received.Load() < uploads*chunk {
		peak = max(peak, vmRSS(t, pid))
		if time.Now().After(deadline) {
			t.Fatalf("the backend received %d MiB of %d in 30s (%d requests open); exgate grew by %d MiB meanwhile",
				received.Load()>>20, uploads, open.Load(), (peak-baseRSS)>>20)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := vmRSS(t, pid)
	peak = max(peak, held)
	t.Logf("%d uploads of 1 MiB held open, all streamed to the backend in %v: exgate VmRSS %d MiB → %d MiB (peak %d MiB, +%d MiB); %d requests open at the backend",
		uploads, time.Since(start).Round(time.Millisecond), baseRSS>>20, held>>20, peak>>20, (peak-baseRSS)>>20, open.Load())
	if grew := peak - baseRSS; grew > 128<<20 {
		t.Errorf("exgate grew by %d MiB holding %d uploads of 1 MiB, want < 128 MiB", grew>>20, uploads)
	}
	if n := open.Load(); n != uploads {
		t.Errorf("%d requests open at the backend, want %d (each upload streams)", n, uploads)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline = time.Now().Add(20 * time.Second)
	for {
		gr, heap := g.metric(t, "go_goroutines"), g.metric(t, "go_memstats_heap_inuse_bytes")
		if open.Load() == 0 && gr <= baseGoroutines+5 && heap <= baseHeap+16<<20 {
			t.Logf("after the clients closed: goroutines %v (baseline %v), heap in use %.1f MiB (baseline %.1f MiB), VmRSS %d MiB",
				gr, baseGoroutines, heap/(1<<20), baseHeap/(1<<20), vmRSS(t, pid)>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the clients closed: %d requests open at the backend, goroutines %v (baseline %v), heap in use %.1f MiB (baseline %.1f MiB)",
				open.Load(), gr, baseGoroutines, heap/(1<<20), baseHeap/(1<<20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g.exited() {
		t.Fatalf("exgate exited: %v", g.err)
	}
}
