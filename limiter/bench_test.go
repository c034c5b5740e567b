package limiter

import (
	"context"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
)

var benchLimit = Limit{Rate: 1 << 40, Period: time.Hour, Burst: 1 << 40}

// keys returns n distinct keys, made before the timer starts.
func benchKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "bench:" + strconv.Itoa(i)
	}
	return ks
}

func BenchmarkMemoryAllow(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	ks := benchKeys(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = m.Allow(ctx, ks[i&1023], benchLimit)
			i++
		}
	})
}

func BenchmarkDenyCacheHit(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	dc := NewDenyCache(m, 1000, nil)
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	ctx := context.Background()
	dc.Allow(ctx, "hot", l)
	dc.Allow(ctx, "hot", l)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = dc.Allow(ctx, "hot", l)
		}
	})
}

// BenchmarkRedisAllow measures one decision against a real Redis on
// loopback, one caller at a time and with 64 concurrent callers whose
// decisions share pipelined round trips.
func BenchmarkRedisAllow(b *testing.B) {
	srv := redistest.Start(b)
	for _, conc := range []int{1, 64} {
		b.Run("callers="+strconv.Itoa(conc), func(b *testing.B) {
			r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
			defer r.Close()
			ks := benchKeys(1024)
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			if conc == 1 {
				for b.Loop() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&1023], benchLimit); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(conc / 2) // GOMAXPROCS is 2 here: conc goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := r.Allow(ctx, ks[i&1023], benchLimit); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkDecide measures the whole decision of a request on the memory
// store: the token's HMAC id, the tier lookup, the key and the limit.
func BenchmarkDecide(b *testing.B) {
	cfg := config.Default()
	cfg.Limiter.TokenSpray.MaxTokens = 0
	cfg.Route("list_markets").Limits[1].Rate = config.Rate{N: 1 << 40, Period: time.Hour}
	cfg.Route("list_markets").Limits[1].Burst = 1 << 40
	cfg.Route("list_markets").Limits[0].Rate = config.Rate{N: 1 << 40, Period: time.Hour}
	cfg.Route("list_markets").Limits[0].Burst = 1 << 40
	rs := Compile(cfg, nil)
	k, _ := NewKeyer(testSecret)
	e, _ := NewEnforcer(EnforcerOptions{Store: NewMemory(MemoryOptions{}), Keyer: k})
	rr := rs.Route("list_markets")
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"address", Request{Addr: netip.MustParseAddr("198.51.100.7")}},
		{"token", Request{Token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", Addr: netip.MustParseAddr("198.51.100.7")}},
		// A verified account: its key comes with the verified token (from
		// the identity cache), so no HMAC per request.
		{"account", Request{Account: k.AccountID("42"), User: "42", Addr: netip.MustParseAddr("198.51.100.7")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rr := rr
			if tc.req.Account != "" {
				cfg.Route("list_markets").Limits[1].Key = config.KeyAccount
				rr = Compile(cfg, nil).Route("list_markets")
			}
			var d Decision
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(context.Background(), rr, tc.req, &d)
			}
			if d.N == 0 || !d.Allowed {
				b.Fatalf("decision %+v", d)
			}
		})
	}
}
