package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/topk"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the gateway and not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

const marketsBody = `[{"symbol":"BTC_USDT","name":"Bitcoin/Tether","base":"BTC","quote":"USDT","tradable":true,"price_precision":"2","base_amount_precision":"6","quote_amount_precision":"2"}]`

// cannedTransport answers every request in process, so a benchmark can
// isolate the gateway's own cost from the network's.
type cannedTransport struct{}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(marketsBody)),
		ContentLength: int64(len(marketsBody)),
		Request:       r,
	}, nil
}

// BenchmarkGatewayGET measures one proxied GET /api/v1/mkt/markets/
// through the whole handler chain (request id, canonical path, route,
// auth, reverse proxy, access log off), against a backend over loopback
// and against an in-process transport. BenchmarkDirectGET is the baseline:
// the same request straight to the same backend with the same client
// transport, measured in the same run.
func BenchmarkGatewayGET(b *testing.B) {
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, marketsBody)
	}))
	defer bs.Close()
	for _, tc := range []struct {
		name string
		tr   http.RoundTripper
	}{
		{"loopback", nil},
		{"inprocess", cannedTransport{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Log.Access = false
			gw, err := New(cfg, Options{Transport: tc.tr})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.CloseIdleConnections()
			benchmarkMarkets(b, gw)
		})
	}
}

// benchmarkMarkets runs GET /api/v1/mkt/markets/ through gw from one
// client address, 64 requests at once on 2 CPUs as the load harness does,
// each expected to answer 200.
func benchmarkMarkets(b *testing.B, gw *Gateway) { benchmarkMarketsAs(b, gw, "") }

// benchmarkMarketsAs is benchmarkMarkets with an Authorization header
// (none when auth is "").
func benchmarkMarketsAs(b *testing.B, gw *Gateway, auth string) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		if auth != "" {
			req.Header["Authorization"] = []string{auth}
		}
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			delete(req.Header, "X-Request-Id")
			req.URL.Path = "/api/v1/mkt/markets/"
			gw.ServeHTTP(w, req)
			if w.code != 200 {
				b.Errorf("status %d", w.code)
				return
			}
		}
	})
}

// BenchmarkDirectGET is BenchmarkGatewayGET's baseline: the client
// transport straight to the backend.
func BenchmarkDirectGET(b *testing.B) {
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, marketsBody)
	}))
	defer bs.Close()
	tr := NewTransport(config.Default().Upstream)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", bs.URL+"/api/v1/mkt/markets/", nil)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := res.Body.Read(buf); err != nil {
				break
			}
		}
		res.Body.Close()
	}
}

// BenchmarkCanonicalPath measures canonicalisation of a clean and a messy
// path.
func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/api/v1/mth/matches/BTC_USDT/", "//api/./v1/mth/%6datches/BTC_USDT"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = canonicalPath(p)
			}
		})
	}
}

// BenchmarkGatewayLimits measures exgate's own cost per request with an
// in-process backend and 64 concurrent requests (one client address, one
// hot limiter key, as the load harness's GET markets): no limits, memory
// limits, Redis limits (a real redis-server on loopback, with the deny
// cache, coalescing and leases), each with the metrics on, as the binary
// runs.
func BenchmarkGatewayLimits(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"off", "memory", "memory+console", "redis"} {
		b.Run(mode, func(b *testing.B) {
			cfg := config.Default()
			cfg.Log.Access = false
			big := config.Rate{N: 1 << 40, Period: time.Hour}
			for i := range cfg.Routes {
				if mode == "off" {
					cfg.Routes[i].Limits = nil
				}
				for j := range cfg.Routes[i].Limits {
					cfg.Routes[i].Limits[j].Rate, cfg.Routes[i].Limits[j].Burst = big, 0
				}
			}
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
			var store ratelimit.Limiter = ratelimit.NewMemory(ratelimit.MemoryOptions{})
			if mode == "redis" {
				r := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: time.Second})
				defer r.Close()
				store = ratelimit.NewDenyCache(r, 1000, nil)
			}
			enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
			m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
			opts := Options{Transport: cannedTransport{}, Limits: enf, Metrics: m}
			if mode == "memory+console" { // every request recorded for the operator console
				opts.Top = topk.NewTracker(topk.TrackerOptions{})
			}
			gw, err := New(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkMarkets(b, gw)
		})
	}
}

// BenchmarkGatewayIdentity measures a token request through the whole
// pipeline with memory limits: an opaque token (its HMAC id per request,
// the spray guard's cache) against a verified JWT (a cache hit in the
// identity cache, then the account's limit), with the metrics on.
func BenchmarkGatewayIdentity(b *testing.B) {
	const secret = "bench-jwt-secret-0123456789abcdef"
	token := signedToken(b, secret, 42, "access")
	for _, mode := range []string{"opaque", "verified"} {
		b.Run(mode, func(b *testing.B) {
			cfg := config.Default()
			cfg.Log.Access = false
			cfg.Identity.Verify = mode == "verified"
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			big := config.Rate{N: 1 << 40, Period: time.Hour}
			for i := range cfg.Routes {
				for j := range cfg.Routes[i].Limits {
					cfg.Routes[i].Limits[j].Rate, cfg.Routes[i].Limits[j].Burst = big, 1<<40
				}
			}
			k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
			enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
			m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
			opts := Options{Transport: cannedTransport{}, Limits: enf, Metrics: m}
			if cfg.Identity.Verify {
				v, err := identity.New(cfg.Identity.JWT, identity.Options{
					Getenv: func(string) (string, bool) { return secret, true }, AccountKey: enf.AccountID,
				})
				if err != nil {
					b.Fatal(err)
				}
				opts.Verifier = v
			}
			gw, err := New(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			benchmarkMarketsAs(b, gw, "Bearer "+token)
		})
	}
}

// BenchmarkTableMatch measures route matching over the default table of
// the API family, for the common paths and a format suffix.
func BenchmarkTableMatch(b *testing.B) {
	tab := compileTable(config.Default())
	reqs := []struct{ method, path string }{
		{"GET", "/api/v1/mkt/markets/"},
		{"POST", "/api/v1/odr/orders/"},
		{"GET", "/api/v1/mth/matches/BTC_USDT/"},
		{"DELETE", "/api/v1/odr/orders/123/"},
		{"POST", "/api/v1/odr/orders.json"},
		{"GET", "/elsewhere/x"},
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range reqs {
			if rt, _, _ := tab.match(r.method, r.path); rt == nil {
				b.Fatal("no route")
			}
		}
	}
}
