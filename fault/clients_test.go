package fault

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/ratelimit"
)

// TestSlowloris opens 300 connections that send a request line and then
// one header line every second, never finishing their headers. While
// they are open, normal clients get 200s (the first before any slow
// connection is closed); each slow connection is closed by exgate once
// server.read_header_timeout (10s here, far beyond what opening them
// takes) has passed since it opened, however much it trickles, and none
// before half of it.
func TestSlowloris(t *testing.T) {
	const (
		slow = 300
		rht  = 10 * time.Second
	)
	be := startBackend(t)
	g := startGateway(t, configHeader(be.url)+`server:
  read_header_timeout: 10s
limiter:
  store: memory
routes:
  - name: list_markets
    match: GET /api/v1/mkt/markets/
  - name: default
    match: "*"
`)
	host := strings.TrimPrefix(g.url, "http://")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	closedAfter := make(chan time.Duration, slow)
	var open atomic.Int64
	for i := range slow {
		openSlowConnection(ctx, t, host, i, &open, closedAfter)
	}

	// Normal clients while the slow connections are open: a fixed
	// number of requests, every one served, the first of them before any
	// slow connection was closed.
	c := newClient(t, 4)
	var ty tally
	var wg sync.WaitGroup
	var openAtFirst atomic.Int64
	openAtFirst.Store(-1)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				ty.add(do(c, get(g.url+"/api/v1/mkt/markets/")))
				openAtFirst.CompareAndSwap(-1, open.Load())
			}
		}()
	}
	wg.Wait()
	t.Logf("normal clients with %d slow connections open: %s (%d still open at the end)", slow, &ty, open.Load())
	if ty.nErrs > 0 || ty.byKey["200"] != ty.total {
		t.Errorf("normal clients: want only 200s: %s", &ty)
	}
	if n := openAtFirst.Load(); n != slow {
		t.Errorf("%d of %d slow connections were open when the first normal request was answered, want all: they are closed after read_header_timeout (%v), not before", n, slow, rht)
	}

	// Each slow connection, trickling for ever, is closed by exgate. The
	// deadline only bounds one that never is.
	longest, shortest := time.Duration(0), time.Duration(1<<62)
	timeout := time.After(rht + 60*time.Second)
	for i := range slow {
		select {
		case d := <-closedAfter:
			longest, shortest = max(longest, d), min(shortest, d)
		case <-timeout:
			t.Fatalf("only %d of %d slow connections closed within %v", i, slow, rht+60*time.Second)
		}
	}
	t.Logf("slow connections closed %v to %v after opening (read_header_timeout %v)", shortest.Round(time.Millisecond), longest.Round(time.Millisecond), rht)
	if shortest < rht/2 {
		t.Errorf("a slow connection was closed %v after it opened, before half of read_header_timeout (%v)", shortest, rht)
	}
}

// openSlowConnection opens slow connection i to host and sends the start of
// a request on it, then one more header line every second until ctx ends.
// open counts it until exgate closes it; closedAfter then gets how long
// after opening that was.
func openSlowConnection(ctx context.Context, t *testing.T, host string, i int, open *atomic.Int64, closedAfter chan<- time.Duration) {
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatalf("slow connection %d: %v", i, err)
	}
	t.Cleanup(func() { conn.Close() })
	opened := time.Now()
	if _, err := fmt.Fprintf(conn, "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: %s\r\n", host); err != nil {
		t.Fatalf("slow connection %d: %v", i, err)
	}
	open.Add(1)
	go func() { // the server closing the connection ends the read
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				open.Add(-1)
				closedAfter <- time.Since(opened)
				return
			}
		}
	}()
	go func() { // one more header line every second
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(conn, "X-Slow-%d: %d\r\n", n, n); err != nil {
				return
			}
		}
	}()
}

// TestMemoryLimiterManyAddresses drives a million distinct client
// addresses through the in-process limiter (the memory store and the
// local fallback), as exgate keys them, and measures the heap after
// garbage collection: the number of keys stays within limiter.max_keys
// (default 1,000,000, and a smaller bound) and memory with it.
func TestMemoryLimiterManyAddresses(t *testing.T) {
	const addresses = 1_000_000
	// A limit whose buckets stay partly used for the whole test (one
	// request every 6 minutes refills), so no key is dropped for being
	// full again and only the bound can remove them.
	l := ratelimit.Limit{Rate: 10, Period: time.Hour, Burst: 10}
	for _, tc := range []struct {
		name    string
		maxKeys int
		minKeys int     // keys expected to be kept, at least
		maxMB   float64 // bound on the heap growth
	}{
		{"max_keys 1000000 (default)", 0, 990_000, 96},
		{"max_keys 100000", 100_000, 90_000, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := heapInuse()
			m := ratelimit.NewMemory(ratelimit.MemoryOptions{MaxKeys: tc.maxKeys})
			key := make([]byte, 0, 64)
			for i := range addresses {
				addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
				key = append(append(key[:0], "exgate:rl:list_matches:address:"...), addr.String()...)
				if r := m.AllowLocal(string(key), l, 1); !r.Allowed {
					t.Fatalf("address %d (%v): first request refused", i, addr)
				}
			}
			after := heapInuse()
			keys := m.Len()
			grew := float64(after-before) / (1 << 20)
			t.Logf("%d addresses, %d keys kept: heap in use grew %.1f MB (%.0f bytes a key)", addresses, keys, grew, float64(after-before)/float64(keys))
			bound := tc.maxKeys
			if bound == 0 {
				bound = 1_000_000
			}
			if keys > bound || keys < tc.minKeys {
				t.Errorf("%d keys kept, want between %d and max_keys %d", keys, tc.minKeys, bound)
			}
			if grew > tc.maxMB {
				t.Errorf("heap grew %.1f MB for %d keys, want at most %.0f MB", grew, keys, tc.maxMB)
			}
			runtime.KeepAlive(m)
		})
	}
}

// heapInuse returns the bytes of heap in use after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
