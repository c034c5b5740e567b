package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
)

// storeOnly hides that a Store is an idempotency.Joiner: its claims are
// made on their own, after the limits.
type storeOnly struct{ idempotency.Store }

// BenchmarkGatewayOrderIdentifier measures orders that each carry a new
// identifier, with the limits and duplicate protection in one real
// redis-server: "joined" decides each order's limits and claim in one
// script run (the default with limiter.backend redis), "separate" claims
// after the limits, in a call of its own (a Cluster, or the limits in
// memory). scripts/op counts the script runs Redis made per order (INFO
// commandstats): one to record each response (Complete), and the runs
// deciding the orders, which concurrent orders share (one run decides a
// whole batch of limits, or of limits and claims); the separate claims
// are one run each.
func BenchmarkGatewayOrderIdentifier(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"joined", "separate"} {
		cfg := benchOrderConfig(b, true)
		v := benchValidator(b, cfg)
		k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
		ro := ratelimit.RedisOptions{Timeout: time.Second}
		opts := idempotency.OptionsFrom(cfg.Idempotency)
		opts.KeyPrefix = "bench:" + mode + ":"
		var idem idempotency.Store = idempotency.NewRedis(srv.Client(), opts)
		if mode == "joined" {
			ro.ClaimFunc = idempotency.ClaimFunc
		} else {
			idem = storeOnly{idem}
		}
		r := ratelimit.NewRedis(srv.Client(), ro)
		defer r.Close()
		enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewDenyCache(r, 1000, nil), Keyer: k})
		m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
		gw, err := New(cfg, Options{Transport: orderTransport{}, Limits: enf, Metrics: m, Validator: v, Idempotency: idem})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode, func(b *testing.B) { benchmarkIdentifiedOrders(b, gw, srv) })
	}
}

// benchmarkIdentifiedOrders posts orders with a new identifier each
// through gw, as benchmarkOrders does, and reports the script runs per
// order.
func benchmarkIdentifiedOrders(b *testing.B, gw *Gateway, srv *redistest.Server) {
	var seq atomic.Int64
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36)
	before := srv.CommandCalls()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	done := reportCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("POST", "/api/v1/odr/orders/", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			body := benchOrder[:len(benchOrder)-1] + `,"identifier":"` + prefix + strconv.FormatInt(seq.Add(1), 36) + `"}`
			clear(w.h)
			clear(req.Header)
			req.Header["Authorization"] = []string{"Bearer bench-token"}
			req.Header["Content-Type"] = []string{"application/json"}
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			req.URL.Path = "/api/v1/odr/orders/"
			gw.ServeHTTP(w, req)
			if w.code != http.StatusCreated {
				b.Errorf("status %d", w.code)
				return
			}
		}
	})
	b.StopTimer()
	done()
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	b.ReportMetric(float64(runs)/float64(b.N), "scripts/op")
}
