package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/topk"
	"github.com/exgate/exgate/upstream"
	"github.com/exgate/exgate/validate"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the gateway and not a recorder.
type discardWriter struct {
	h    http.Header
	code int
	body []byte // the body of an answer that is not a success, for the benchmark's error
}

func (w *discardWriter) Header() http.Header  { return w.h }
func (w *discardWriter) WriteHeader(code int) { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.code >= 300 {
		w.body = append(w.body[:0], b...)
	}
	return len(b), nil
}

// answer says what w was answered: its status and, for a refusal,
// exgate's error code with its detail, so that a benchmark that stops
// says which refusal stopped it.
func (w *discardWriter) answer() string { return fmt.Sprintf("status %d %s", w.code, w.body) }

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
// Its "headers" run is the in-process GET with clientHeaders, against
// BenchmarkReverseProxyGETHeaders.
func BenchmarkGatewayGET(b *testing.B) {
	benchmarkGateways(b, cannedTransport{}, benchmarkMarkets)
	b.Run("headers", func(b *testing.B) {
		cfg := config.Default()
		cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
		cfg.Log.Access = false
		gw, err := newGateway(cfg, Options{Transport: cannedTransport{}})
		if err != nil {
			b.Fatal(err)
		}
		benchmarkMarketsWith(b, gw, clientHeaders())
	})
}

// clientHeaders is what a client library sends with a GET: a real SDK's
// or browser's fields, where the other in-process benchmarks send none.
// With exgate's five (X-Forwarded-For, -Host, -Proto, X-Real-IP,
// X-Request-ID), less Connection and the untrusted trace context, the
// backend's request has 11 fields: more than Go's small map of one group
// holds (8).
func clientHeaders() http.Header {
	return http.Header{
		"User-Agent":      {"exchange-sdk-python/3.2.0 python-requests/2.32.3"},
		"Accept":          {"application/json"},
		"Accept-Encoding": {"gzip, deflate"},
		"Accept-Language": {"en-US,en;q=0.9"},
		"Authorization":   {"Bearer bench-token-0123456789abcdef"},
		"Cache-Control":   {"no-cache"},
		"Connection":      {"keep-alive"},
		"Traceparent":     {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
}

// marketsBackend is a backend over loopback that reads each request's
// body to its end and answers marketsBody.
func marketsBackend(b *testing.B) *httptest.Server {
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, marketsBody)
	}))
	b.Cleanup(bs.Close)
	return bs
}

// benchmarkGateways runs bench, as sub-benchmarks "loopback" and
// "inprocess", against a gateway of the built-in configuration (access
// log off) in front of marketsBackend, and in front of the in-process
// transport inprocess.
func benchmarkGateways(b *testing.B, inprocess http.RoundTripper, bench func(*testing.B, *Gateway)) {
	bs := marketsBackend(b)
	for _, tc := range []struct {
		name string
		tr   http.RoundTripper
	}{
		{"loopback", nil},
		{"inprocess", inprocess},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Upstream.URL = config.MustURL(bs.URL)
			cfg.Log.Access = false
			gw, err := newGateway(cfg, Options{Transport: tc.tr})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.CloseIdleConnections()
			bench(b, gw)
		})
	}
}

// BenchmarkReverseProxyGET is the in-process baseline of
// BenchmarkGatewayGET/inprocess: httputil.ReverseProxy alone, its Rewrite
// only setting the backend's URL, with exgate's buffer pool and the same
// in-process transport. The difference is what exgate's own request path
// costs (routing, request ids, client address, timeout, metrics, the
// checks of the backend's answer).
func BenchmarkReverseProxyGET(b *testing.B) { benchReverseProxyGET(b, nil) }

// BenchmarkReverseProxyGETHeaders is BenchmarkReverseProxyGET with
// clientHeaders: the in-process baseline of BenchmarkGatewayGET/headers.
func BenchmarkReverseProxyGETHeaders(b *testing.B) { benchReverseProxyGET(b, clientHeaders) }

// benchReverseProxyGET runs the ReverseProxy floor's GET, its request
// carrying the fields headers makes (none when nil).
func benchReverseProxyGET(b *testing.B, headers func() http.Header) {
	be := config.MustURL("http://127.0.0.1:1")
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(be.URL) },
		Transport:  cannedTransport{},
		BufferPool: newBufferPool(),
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		if headers != nil {
			req.Header = headers()
		}
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			if headers != nil {
				delete(req.Header, "X-Request-Id") // as benchmarkMarketsWith's loop
			}
			rp.ServeHTTP(w, req)
			if w.code != 200 {
				b.Error(w.answer())
				return
			}
		}
	})
}

// BenchmarkReverseProxyOrder is the in-process baseline of
// BenchmarkGatewayOrder's order/… benchmarks: httputil.ReverseProxy alone
// forwarding the same POST of an order, with the same in-process
// transport and exgate's buffer pool. The difference is exgate's own
// path for an order: what BenchmarkReverseProxyGET measures for a GET,
// and the order's body read whole, validated and forwarded in canonical
// form.
func BenchmarkReverseProxyOrder(b *testing.B) {
	be := config.MustURL("http://127.0.0.1:1")
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(be.URL) },
		Transport:  orderTransport{},
		BufferPool: newBufferPool(),
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		rd := strings.NewReader(benchOrder)
		req := httptest.NewRequest("POST", "/api/v1/odr/orders/", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			clear(req.Header)
			req.Header["Authorization"] = []string{"Bearer bench-token"}
			req.Header["Content-Type"] = []string{"application/json"}
			rd.Reset(benchOrder)
			req.Body, req.ContentLength = io.NopCloser(rd), int64(len(benchOrder))
			rp.ServeHTTP(w, req)
			if w.code != http.StatusCreated {
				b.Error(w.answer())
				return
			}
		}
	})
}

// onConnection returns req from 127.0.0.1:5555 with the context the
// server gives every request of one connection (Server.ConnContext): the
// connection's peer, worked out once, as for every request after a
// connection's first.
func onConnection(gw *Gateway, req *http.Request) *http.Request {
	req.RemoteAddr = "127.0.0.1:5555"
	cp := &connPeer{proxies: gw.proxies}
	cp.once.Do(func() { cp.p = newPeer(req.RemoteAddr, gw.proxies) })
	return req.WithContext(context.WithValue(req.Context(), peerKey{}, cp))
}

// benchmarkMarkets runs GET /api/v1/mkt/markets/ through gw from one
// client address, 64 requests at once on 2 CPUs as the load harness does,
// each expected to answer 200.
func benchmarkMarkets(b *testing.B, gw *Gateway) { benchmarkMarketsAs(b, gw, "") }

// benchmarkMarketsAs is benchmarkMarkets with an Authorization header
// (none when auth is "").
func benchmarkMarketsAs(b *testing.B, gw *Gateway, auth string) {
	h := http.Header{}
	if auth != "" {
		h["Authorization"] = []string{auth}
	}
	benchmarkMarketsWith(b, gw, h)
}

// benchmarkMarketsWith is benchmarkMarkets with the client's header h.
func benchmarkMarketsWith(b *testing.B, gw *Gateway, h http.Header) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		req := onConnection(gw, httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil))
		req.Header = h.Clone()
		traced := gw.tracer != nil
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			delete(req.Header, "X-Request-Id")
			if traced {
				delete(req.Header, "Traceparent") // what tracing sends the backend, set on the request
			}
			req.URL.Path = "/api/v1/mkt/markets/"
			gw.ServeHTTP(w, req)
			if w.code != 200 {
				b.Error(w.answer())
				return
			}
		}
	})
}

// BenchmarkDirectGET is BenchmarkGatewayGET's baseline: the client
// transport straight to the backend.
func BenchmarkDirectGET(b *testing.B) {
	bs := marketsBackend(b)
	tr := upstream.NewTransport(config.Default().Upstream)
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
			if mode == "off" { // a bulk route needs the token limits it charges
				cfg.Routes = slices.DeleteFunc(cfg.Routes, func(r config.Route) bool { return r.Validate == config.ValidateBulk })
			}
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
			var store ratelimit.Store = ratelimit.NewMemory(ratelimit.MemoryOptions{})
			if mode == "redis" {
				r := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
				defer r.Close()
				store = ratelimit.NewDenyCache(r, 1000, nil)
			}
			enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
			m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
			opts := Options{Transport: cannedTransport{}, Limits: enf, Metrics: m}
			if mode == "memory+console" { // every request recorded for the operator console
				opts.Top = topk.NewTracker(topk.TrackerOptions{})
			}
			gw, err := newGateway(cfg, opts)
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
			gw, err := newGateway(cfg, opts)
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

// benchOrder is the order every POST of the benchmarks places, as the
// load harness (bench/cmd/benchrun) sends it.
const benchOrder = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`

// benchOrderConfig is the configuration the load harness gives exgate:
// an order route (token required, validated, limited by token), the
// markets route (limited by address or token) and a default route, with
// limits no benchmark reaches when limits is true.
func benchOrderConfig(b *testing.B, limits bool) *config.Config {
	b.Helper()
	rate := ""
	if limits {
		rate = "1000000000/1h"
	}
	yaml := `listen: "127.0.0.1:0"
upstream:
  url: "http://127.0.0.1:1"
log:
  access: false
limiter:
  store: memory
  token_spray:
    max_tokens: 0
routes:
  - name: place_order
    match: POST /api/v1/odr/orders/
    auth: required
    validate: order
` + limitLines(rate, "      - {key: token, rate: %s}\n") + `  - name: list_markets
    match: GET /api/v1/mkt/markets/
    auth: optional
` + limitLines(rate, "      - {key: address, when: anonymous, rate: %s}\n      - {key: token, when: token, rate: %s}\n") + `  - name: default
    match: "*"
    auth: none
`
	cfg, err := config.Parse("bench.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// limitLines is a route's limits block at rate, or "" without limits.
func limitLines(rate, lines string) string {
	if rate == "" {
		return ""
	}
	return "    limits:\n" + strings.ReplaceAll(lines, "%s", rate)
}

// orderTransport answers every order with 201 in process.
type orderTransport struct{}

func (orderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	const placed = `{"id":1,"state":"active"}`
	status, body := http.StatusCreated, placed
	if r.Method == http.MethodGet {
		status, body = http.StatusOK, marketsBody
	}
	return &http.Response{
		StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"},
			"X-Request-Id": r.Header["X-Request-Id"]},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}

// BenchmarkGatewayOrder measures exgate's own cost per order, as `make
// bench` sends them (one opaque token, a market order, the harness's
// configuration), beside a GET of the markets in the same configuration:
// limits off, memory limits and Redis limits (a real redis-server), with
// validation, duplicate protection (memory store) and metrics on, against
// an in-process backend. The difference between order/… and get/… is the
// order work: the body, validation, the canonical encoding.
func BenchmarkGatewayOrder(b *testing.B) {
	for _, mode := range []string{"off", "memory", "redis"} {
		b.Run("order/"+mode, func(b *testing.B) { benchmarkOrders(b, benchOrderGateway(b, mode), benchOrder) })
		b.Run("get/"+mode, func(b *testing.B) { benchmarkMarketsAs(b, benchOrderGateway(b, mode), "Bearer bench-token") })
	}
}

// benchOrderGateway is BenchmarkGatewayOrder's gateway with limits of
// mode (off, memory or redis). Only redis starts a redis-server, so that
// the others can be counted under valgrind, which stops at the signal a
// child process sends.
func benchOrderGateway(b *testing.B, mode string) *Gateway {
	cfg := benchOrderConfig(b, mode != "off")
	v := oneMarketValidator(b, cfg)
	k, _ := limiter.NewKeyer([]byte("bench-secret-0123456789abcdef"))
	var store ratelimit.Store = ratelimit.NewMemory(ratelimit.MemoryOptions{})
	if mode == "redis" {
		r := ratelimit.NewRedis(redistest.Start(b).Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
		b.Cleanup(func() { r.Close() })
		store = ratelimit.NewDenyCache(r, 1000, nil)
	}
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
	m, _ := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
	gw, err := newGateway(cfg, Options{Transport: orderTransport{}, Limits: enf, Metrics: m, Validator: v,
		Idempotency: idempotency.NewMemory(idempotency.OptionsFrom(cfg.Idempotency))})
	if err != nil {
		b.Fatal(err)
	}
	return gw
}

// oneMarketValidator is the order validator of cfg's rules over a
// catalogue of one market, BTC_USDT, the one the tests' and benchmarks'
// orders trade, set by hand (nothing is fetched from cfg's upstream).
func oneMarketValidator(tb testing.TB, cfg *config.Config) *validate.Validator {
	tb.Helper()
	cat, err := validate.NewCatalogue(validate.CatalogueOptions{BaseURL: cfg.Upstream.URL.URL, Transport: http.DefaultTransport})
	if err != nil {
		tb.Fatal(err)
	}
	if err := cat.Set([]validate.Market{{Symbol: "BTC_USDT", Base: "BTC", Quote: "USDT", Tradable: true,
		PricePrecision: 2, BaseAmountPrecision: 6, QuoteAmountPrecision: 2}}); err != nil {
		tb.Fatal(err)
	}
	v, err := validate.New(cfg.Validation, cat, zap.NewNop())
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// benchmarkOrders posts body as an order through gw, 64 requests at once
// on 2 CPUs as the load harness does, each expected to answer 201.
func benchmarkOrders(b *testing.B, gw *Gateway, body string) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		rd := strings.NewReader(body)
		req := onConnection(gw, httptest.NewRequest("POST", "/api/v1/odr/orders/", nil))
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			clear(req.Header)
			req.Header["Authorization"] = []string{"Bearer bench-token"}
			req.Header["Content-Type"] = []string{"application/json"}
			rd.Reset(body)
			req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
			req.URL.Path = "/api/v1/odr/orders/"
			gw.ServeHTTP(w, req)
			if w.code != http.StatusCreated {
				b.Error(w.answer())
				return
			}
		}
	})
}

// reportCPU starts counting the process's CPU time (user and system, all
// threads: the gateway, the runtime and its collector) and returns the
// function that reports it per operation as cpu-ns/op: on a machine
// shared with other work, CPU per request is steadier than ns/op, which
// counts the time other processes held the CPUs.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() {
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

// processCPU is the CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// signInBody is the body of a sign-in (POST /api/v1/usr/authenticate/).
const signInBody = `{"api_key":"bench-api-key-0123456789","secret_key":"bench-secret-key-0123456789abcdef"}`

// drainTransport reads each request's body to its end, as a backend does,
// then answers as cannedTransport does.
type drainTransport struct{}

func (drainTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return cannedTransport{}.RoundTrip(r)
}

// BenchmarkGatewayPOST measures one proxied POST of a sign-in body, a
// route that is not an order's, through the whole handler chain: the body
// read whole within its client's share of the body budget and forwarded
// with its length, against a backend over loopback and an in-process
// transport that reads the body.
func BenchmarkGatewayPOST(b *testing.B) { benchmarkGateways(b, drainTransport{}, benchmarkSignIns) }

// benchmarkSignIns posts signInBody through gw from one client address,
// 64 requests at once on 2 CPUs, each expected to answer 200.
func benchmarkSignIns(b *testing.B, gw *Gateway) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		rd := strings.NewReader(signInBody)
		req := onConnection(gw, httptest.NewRequest("POST", "/api/v1/usr/authenticate/", nil))
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			clear(req.Header)
			req.Header["Content-Type"] = []string{"application/json"}
			rd.Reset(signInBody)
			req.Body, req.ContentLength = io.NopCloser(rd), int64(len(signInBody))
			req.URL.Path = "/api/v1/usr/authenticate/"
			gw.ServeHTTP(w, req)
			if w.code != 200 {
				b.Error(w.answer())
				return
			}
		}
	})
}
