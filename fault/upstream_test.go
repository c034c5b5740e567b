//go:build linux

package fault

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/unreachable"
)

// rawBackend accepts connections and hands each, after reading a request
// head, to serve; it returns its address.
func rawBackend(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() { <-done; c.Close() }()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err == nil {
					serve(c, br)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestBackendMisbehaviour points the real exgate at backends that fail in
// every way a backend can and sends concurrent requests: connects that
// time out, connections reset after the request, a backend that accepts
// and never answers (with the pool capped by upstream.max_conns_per_host,
// so requests queue past their deadline), one that closes while reading
// a streamed request body, one that breaks its response off mid-body.
// Every client gets exgate's JSON 502/503/504 (or, when the backend had
// already sent its status, a response cut short: the connection is
// dropped) — from backends that never answer, so only exgate's own
// deadlines can have ended those requests —, the process stays up, and
// its goroutines and heap return to their baseline.
func TestBackendMisbehaviour(t *testing.T) {
	const requests = 24
	for _, tc := range []struct {
		name     string
		backend  func(t *testing.T) string
		upstream string // extra upstream keys
		chunked  bool   // send a streamed (chunked) body
		want     []string
	}{
		{"connects time out", func(t *testing.T) string { return unreachable.Addr(t) }, "dial_timeout: 300ms", false, []string{"504 gateway_timeout", "502 bad_gateway", "503 upstream_unavailable"}},
		{"connects time out, pool capped", func(t *testing.T) string { return unreachable.Addr(t) }, "max_conns_per_host: 2", false, []string{"504 gateway_timeout", "502 bad_gateway", "503 upstream_unavailable"}},
		{"reset after the request", func(t *testing.T) string {
			return rawBackend(t, func(c net.Conn, _ *bufio.Reader) {
				_ = c.(*net.TCPConn).SetLinger(0) // close sends RST
			})
		}, "", false, []string{"502 bad_gateway"}},
		{"accepts, never answers, pool capped", func(t *testing.T) string {
			return rawBackend(t, func(c net.Conn, _ *bufio.Reader) { _, _ = io.Copy(io.Discard, c) })
		}, "max_conns_per_host: 2", false, []string{"504 gateway_timeout"}},
		{"closes mid request body", func(t *testing.T) string {
			return rawBackend(t, func(c net.Conn, br *bufio.Reader) {
				_, _ = br.Discard(3)
				_ = c.(*net.TCPConn).SetLinger(0)
			})
		}, "", true, []string{"502 bad_gateway"}},
		{"closes mid response body", func(t *testing.T) string {
			return rawBackend(t, func(c net.Conn, _ *bufio.Reader) {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"partial\":")
			})
		}, "", false, []string{"cut"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.backend(t)
			upstream := []string{"timeout: 500ms"}
			if tc.upstream != "" {
				upstream = append(upstream, tc.upstream)
			}
			g := startGatewayServing(t, configHeader("http://"+addr, upstream...)+`limiter:
  store: memory
validation:
  before_catalogue: pass
`)
			baseGoroutines := g.metric(t, "go_goroutines")
			baseHeap := g.metric(t, "go_memstats_heap_inuse_bytes")
			c := newClient(t, requests)
			var ty tally
			cut := postConcurrently(c, g.url+"/api/v1/usr/anything/", requests, tc.chunked, tc.want[0] == "cut", &ty)
			t.Logf("%s: %s, %d responses cut short", tc.name, &ty, cut)
			if tc.want[0] == "cut" {
				if cut != requests {
					t.Errorf("%d of %d responses cut short, want all: %s", cut, requests, &ty)
				}
			} else {
				got := 0
				for _, w := range tc.want {
					got += ty.byKey[w]
				}
				if got != requests || ty.nErrs > 0 {
					t.Errorf("want every answer one of %v: %s", tc.want, &ty)
				}
			}
			if g.exited() {
				t.Fatalf("exgate exited: %v", g.err)
			}
			c.Transport.(*http.Transport).CloseIdleConnections()
			waitForGoroutinesAndHeap(t, g, baseGoroutines, baseHeap)
		})
	}
}

// postConcurrently sends n POST requests to url at once, with a streamed
// body when chunked, and adds their answers to ty. When expectCut, a
// request that failed is a response cut short: it is counted in cut, not
// in ty.
func postConcurrently(c *http.Client, url string, n int, chunked, expectCut bool, ty *tally) (cut int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body io.Reader
			if chunked {
				body = io.MultiReader(strings.NewReader(strings.Repeat("x", 64<<10)))
			}
			req, _ := http.NewRequest(http.MethodPost, url, body)
			a := do(c, req)
			if expectCut && a.err != nil {
				mu.Lock()
				cut++ // the response was already under way: the connection is dropped
				mu.Unlock()
				return
			}
			ty.add(a)
		}()
	}
	wg.Wait()
	return cut
}

// waitForGoroutinesAndHeap waits up to 15s for g's goroutines and heap to
// return to their baseline, and fails t if they do not.
func waitForGoroutinesAndHeap(t *testing.T, g *gateway, baseGoroutines, baseHeap float64) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		gr, heap := g.metric(t, "go_goroutines"), g.metric(t, "go_memstats_heap_inuse_bytes")
		if gr <= baseGoroutines+3 && heap <= baseHeap+8<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %v (baseline %v), heap in use %.1f MiB (baseline %.1f MiB) 15s after the requests ended",
				gr, baseGoroutines, heap/(1<<20), baseHeap/(1<<20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
