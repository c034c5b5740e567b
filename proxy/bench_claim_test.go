package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/validate"
)

// storeOnly hides that a Store is an idempotency.Joiner: its claims are
// made on their own, after the limits.
type storeOnly struct{ idempotency.Store }

// identifiedOrderGateway is the gateway of the identified-order
// benchmarks: cfg's routes, orders checked by v and answered 201 by
// orderTransport, limits decided by r behind a deny cache, duplicates
// kept by idem.
func identifiedOrderGateway(b *testing.B, cfg *config.Config, v *validate.Validator, r *ratelimit.Redis, idem idempotency.Store) *Gateway {
	k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewDenyCache(r, 1000, nil), Keyer: k})
	m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
	gw, err := newGateway(cfg, Options{Transport: orderTransport{}, Limits: enf, Metrics: m, Validator: v, Idempotency: idem})
	if err != nil {
		b.Fatal(err)
	}
	return gw
}

// BenchmarkGatewayOrderIdentifier measures orders that each carry a new
// identifier, with the limits and duplicate protection in one real
// redis-server: "joined" decides each order's limits and claim in one
// script run (the default with limiter.store redis), "separate" claims
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
		v := oneMarketValidator(b, cfg)
		ro := ratelimit.RedisOptions{Timeout: testStoreTimeout}
		// One account places every order of the run: lift its share of
		// the store (what its order limit lets it place in a day, by
		// default), which would answer 503 once it is full.
		cfg.Idempotency.MaxPerAccount, cfg.Idempotency.MaxBytesPerAccount = 1<<30, 1<<40
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
		gw := identifiedOrderGateway(b, cfg, v, r, idem)
		b.Run(mode, func(b *testing.B) { benchmarkIdentifiedOrders(b, gw, srv) })
	}
}

// benchmarkIdentifiedOrders posts orders with a new identifier each
// through gw, as benchmarkOrders does, and reports the script runs per
// order on srv (nil: the caller counts them).
func benchmarkIdentifiedOrders(b *testing.B, gw *Gateway, srv *redistest.Server) {
	var seq atomic.Int64
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36)
	var before map[string]int64
	var redisCPU time.Duration
	if srv != nil {
		before, redisCPU = srv.CommandCalls(), srv.CPU(b)
	}
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
				b.Error(w.answer())
				return
			}
		}
	})
	b.StopTimer()
	done()
	if srv == nil {
		return
	}
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	b.ReportMetric(float64(runs)/float64(b.N), "scripts/op")
	b.ReportMetric(float64(srv.CPU(b)-redisCPU)/float64(b.N), "redis-cpu-ns/op")
}

// callCount counts a duplicate-protection store's calls of its own, each
// a round trip to Redis.
type callCount struct {
	idempotency.Store
	calls *atomic.Int64
}

func (c callCount) Claim(ctx context.Context, k idempotency.Key, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	c.calls.Add(1)
	return c.Store.Claim(ctx, k, fp)
}

func (c callCount) ClaimAll(ctx context.Context, account, client string, ids []string, fp idempotency.Fingerprint) (idempotency.Claim, error) {
	c.calls.Add(1)
	return c.Store.ClaimAll(ctx, account, client, ids, fp)
}

func (c callCount) Complete(ctx context.Context, cl idempotency.Claim, rec idempotency.Record) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, cl, rec)
}

// joinerCount is a callCount whose claims ride with the limits.
type joinerCount struct {
	callCount
	j idempotency.Joiner
}

func (c joinerCount) Prepare(p *idempotency.Prepared, account, client string, ids []string, fp idempotency.Fingerprint) {
	c.j.Prepare(p, account, client, ids, fp)
}

func (c joinerCount) Settle(ctx context.Context, p *idempotency.Prepared, r ratelimit.ClaimReply) (idempotency.Claim, error) {
	return c.j.Settle(ctx, p, r)
}

func (c joinerCount) Abandon(ctx context.Context, p *idempotency.Prepared, r ratelimit.ClaimReply) error {
	c.calls.Add(1)
	return c.j.Abandon(ctx, p, r)
}

// BenchmarkGatewayOrderIdentifierCluster is BenchmarkGatewayOrderIdentifier
// on a real 3-master Redis Cluster, where an order's limit and its claim
// live in different slots: "joined" sends the claim's run with the
// limit's, at once, in one round trip; "separate" claims after the
// limits, in a call of its own. round-trips/op counts the limiter's
// round trips (shared by concurrent orders) and duplicate protection's
// calls of its own (the separate claims, and each order's Complete);
// scripts/op the script runs of every master.
func BenchmarkGatewayOrderIdentifierCluster(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	for _, mode := range []string{"joined", "separate"} {
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		cfg := benchOrderConfig(b, true)
		v := oneMarketValidator(b, cfg)
		var trips, calls atomic.Int64
		ro := ratelimit.RedisOptions{Timeout: testStoreTimeout, Observe: func(time.Duration, int, error) { trips.Add(1) }}
		// One account places every order of the run: lift its share of
		// the store (what its order limit lets it place in a day, by
		// default), which would answer 503 once it is full.
		cfg.Idempotency.MaxPerAccount, cfg.Idempotency.MaxBytesPerAccount = 1<<30, 1<<40
		opts := idempotency.OptionsFrom(cfg.Idempotency)
		opts.KeyPrefix = "bench:" + mode + ":"
		s := idempotency.NewRedis(client, opts)
		var idem idempotency.Store = callCount{s, &calls}
		if mode == "joined" {
			ro.ClaimFunc = idempotency.ClaimFunc
			idem = joinerCount{callCount{s, &calls}, s}
		}
		r := ratelimit.NewRedis(client, ro)
		defer r.Close()
		gw := identifiedOrderGateway(b, cfg, v, r, idem)
		b.Run(mode, func(b *testing.B) {
			scripts := func() (n int64) {
				for _, srv := range cl.Servers {
					c := srv.CommandCalls()
					n += c["evalsha"] + c["eval"]
				}
				return n
			}
			runs, t0, c0 := scripts(), trips.Load(), calls.Load()
			benchmarkIdentifiedOrders(b, gw, nil)
			b.ReportMetric(float64(trips.Load()-t0+calls.Load()-c0)/float64(b.N), "round-trips/op")
			b.ReportMetric(float64(scripts()-runs)/float64(b.N), "scripts/op")
		})
	}
}
