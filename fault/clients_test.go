package fault

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/starvation"
	"github.com/exgate/exgate/ratelimit"
)

// TestSlowloris opens 300 connections that send a request line and then
// one header line every 250ms, never finishing their headers. While they
// are open, normal clients keep getting 200s promptly; each slow
// connection is closed by exgate once server.read_header_timeout (3s
// here) has passed since it opened, however much it trickles.
func TestSlowloris(t *testing.T) {
	const (
		slow = 300
		rht  = 3 * time.Second
	)
	be := startBackend(t)
	g := startGateway(t, configHeader(be.url)+`server:
  read_header_timeout: 3s
limiter:
  backend: memory
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
		go func() { // one more header line every 250ms
			tick := time.NewTicker(250 * time.Millisecond)
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

	// Normal clients while every slow connection is open.
	if n := open.Load(); n != slow {
		t.Fatalf("%d of %d slow connections closed already, before read_header_timeout (%v)", slow-n, slow, rht)
	}
	c := newClient(t, 4)
	v := starvation.New(t)
	lctx, lcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	var ty tally
	load(lctx, c, 4, func(int, int) *http.Request { return get(g.url + "/api/v1/mkt/markets/") }, &ty)
	lcancel()
	normal := v.Phase("normal clients")
	t.Logf("normal clients with %d slow connections open: %s (%d still open at the end)", slow, &ty, open.Load())
	if ty.nErrs > 0 || ty.byKey["200"] != ty.total || ty.total < 20 {
		t.Errorf("normal clients: want only 200s (at least 20): %s", &ty)
	}
	if ty.slowest > time.Second {
		v.Errorf(normal, "slowest answer %v, want under 1s", ty.slowest)
	}

	var longest time.Duration
	timeout := time.After(rht + 10*time.Second)
	for i := range slow {
		select {
		case d := <-closedAfter:
			longest = max(longest, d)
		case <-timeout:
			t.Fatalf("only %d of %d slow connections closed within %v", i, slow, rht+10*time.Second)
		}
	}
	closing := v.Phase("slow connections closed")
	t.Logf("slow connections closed at most %v after opening (read_header_timeout %v)", longest.Round(time.Millisecond), rht)
	if longest > rht+3*time.Second {
		v.Errorf(closing, "a slow connection stayed open %v, want about read_header_timeout (%v)", longest, rht)
	}
	v.Settle()
}

// TestMemoryLimiterManyAddresses drives a million distinct client
// addresses through the in-process limiter (the memory backend and the
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
