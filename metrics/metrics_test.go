package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/limiter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func newTest(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, BuildInfo{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.0"})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// exercise touches every collector, so that every family has a series.
func exercise(m *Metrics) {
	r := m.Route("place_order")
	r.ObserveRequest("POST", 201, 3*time.Millisecond)
	r.ObserveRequest("POST", 429, 100*time.Microsecond)
	r.ObserveUpstream(2 * time.Millisecond)
	r.UpstreamError(UpstreamTimeout)
	r.Fallback(FallbackLocal)
	m.Unrouted().ObserveRequest("BREW", 404, 50*time.Microsecond)
	l := m.Limit("place_order", "token", "")
	l.Observe(limiter.Allowed, "")
	l.Observe(limiter.Limited, "")
	m.Limit("place_order", "token", "vip").Observe(limiter.ShadowLimited, "")
	m.ObserveStore(time.Millisecond, nil)
	m.ObserveStore(25*time.Millisecond, context.DeadlineExceeded)
	m.ValidationRejected("invalid_price")
	m.Idempotency(IdempotencyReplayed)
	m.SetCatalogueLoaded(time.Now())
	m.IncInflight()
	m.ConfigReload(true)
	m.AuthFailure("expired")
	m.AuthFailureCached("bad_signature")
	m.LogRefusalSuppressed("token_not_valid")
	m.JWKSFetch(true)
	m.SetReplica("exgate-0")
	o := m.Overload("list_tickers", "market_data")
	o.Shed()
	o.Queued(5 * time.Millisecond)
	m.SetFleetSource(fixedFleet{{Name: "default", Available: true, Retries: 2, Instances: []InstanceStatus{
		{Addr: "10.0.0.1:9000", State: "healthy", Active: 3, Requests: map[string]uint64{"success": 10}, Ejections: map[string]uint64{"consecutive_5xx": 1}},
		{Addr: "10.0.0.2:9000", State: "ejected", Requests: map[string]uint64{"server_error": 5}, Ejections: map[string]uint64{"consecutive_5xx": 1}},
	}}})
}

type fixedFleet []ServiceStatus

func (f fixedFleet) FleetStatus() []ServiceStatus { return f }

func TestNewRegistersEverythingLintClean(t *testing.T) {
	m, reg := newTest(t)
	if err := m.RegisterCatalogueAge(reg); err != nil {
		t.Fatal(err)
	}
	exercise(m)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
	}
	if want := Names(); !slices.Equal(got, want) {
		t.Errorf("gathered families differ from Names():\n got %v\nwant %v", got, want)
	}
}

func TestNamesFromDescriptors(t *testing.T) {
	names := Names()
	// 14 exgate families plus the Go and process collectors' (about 40).
	if len(names) < 30 || len(names) > 200 {
		t.Fatalf("Names() returned %d names, want a plausible 30..200: %v", len(names), names)
	}
	if !slices.IsSorted(names) {
		t.Error("Names() is not sorted")
	}
	for _, want := range []string{
		NameRequests, NameRequestDuration, NameUpstreamDuration, NameUpstreamErrors,
		NameRateLimitDecision, NameStoreErrors, NameStoreDuration, NameFallback,
		NameValidation, NameIdempotency, NameCatalogueAge, NameInflight,
		NameConfigReloads, NameAdminResets, NameBuildInfo, NameReplicaInfo, NameBodyBudget, NameAuthCached, NameLogSuppressed,
		NameOverloadShed, NameOverloadQueue, NameOverloadLimit, NameOverloadInFlight, NameOverloadWaiting, NameOverloadMinRTT,
		NameBodyBuffered, NameBodyBufferedClients, NameOverloadClients,
		NameUpstreamAvailable, NameUpstreamPanic, NameUpstreamFailover, NameUpstreamInstances, NameUpstreamInstanceActive,
		NameUpstreamInstanceRequests, NameUpstreamEjections, NameUpstreamRetries, NameUpstreamUnavailable, NameUpstreamRetriesRefused,
		"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %s", want)
		}
	}
	exgate := 0
	for _, n := range names {
		if strings.HasPrefix(n, "exgate_") {
			exgate++
		}
		if strings.HasSuffix(n, "_bucket") {
			t.Errorf("Names() lists %s; want base names", n)
		}
	}
	if exgate != 40 {
		t.Errorf("Names() lists %d exgate_ families, want 40", exgate)
	}
}

func TestNewTwiceOnOneRegistryErrors(t *testing.T) {
	m, reg := newTest(t)
	m.Route("r").ObserveRequest("GET", 200, time.Millisecond)
	m2, err := New(reg, BuildInfo{})
	if err == nil || m2 != nil {
		t.Fatalf("second New on one registry: got (%v, %v), want (nil, error)", m2, err)
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("error %v does not wrap prometheus.AlreadyRegisteredError", err)
	}
	// The first set is intact and still served.
	if n, err := testutil.GatherAndCount(reg, NameRequests); err != nil || n != 1 {
		t.Errorf("after failed New: %d series of %s (err %v), want 1", n, NameRequests, err)
	}
	if _, err := New(nil, BuildInfo{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

func TestNewRollsBackOnConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	// A foreign collector holding one of exgate's names, registered before.
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: NameInflight, Help: "foreign"}))
	if _, err := New(reg, BuildInfo{}); err == nil {
		t.Fatal("New succeeded over a conflicting collector")
	}
	// Everything New registered before the conflict was taken back, so
	// only the foreign gauge remains.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != NameInflight {
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		t.Errorf("after rollback the registry holds %v, want only %s", names, NameInflight)
	}
}

func TestNewKeepsExistingGoCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := New(reg, BuildInfo{}); err != nil {
		t.Fatalf("New on a registry that already has Go and process collectors: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "go_goroutines"); err != nil || n != 1 {
		t.Errorf("go_goroutines: %d series (err %v), want 1", n, err)
	}
}

// TestLiveHeap: go_gc_heap_live_bytes is registered beside the Go
// collector, whether New registered that or found it, and says what the
// last collection found live.
func TestLiveHeap(t *testing.T) {
	for _, found := range []bool{false, true} {
		t.Run(fmt.Sprintf("Go collector registered before: %v", found), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if found {
				reg.MustRegister(collectors.NewGoCollector())
			}
			if _, err := New(reg, BuildInfo{}); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "go_gc_heap_live_bytes" })
			if i < 0 || len(mfs[i].GetMetric()) != 1 || mfs[i].GetMetric()[0].GetGauge().GetValue() <= 0 {
				t.Fatalf("go_gc_heap_live_bytes: want one gauge above 0 after a collection")
			}
		})
	}
}

func TestRequestsAndDurations(t *testing.T) {
	m, reg := newTest(t)
	r := m.Route("list_markets")
	for _, c := range []struct {
		method string
		code   int
		d      time.Duration
	}{
		{"GET", 200, 80 * time.Microsecond},
		{"GET", 200, 3 * time.Millisecond},
		{"HEAD", 200, 200 * time.Microsecond},
		{"get", 404, time.Millisecond}, // methods are case-sensitive
		{"PROPFIND", 405, time.Millisecond},
		{"GET", 499, 20 * time.Second},
		{"GET", 418, time.Millisecond}, // rare code: slow path
		{"POST", 0, time.Millisecond},  // not a status
	} {
		r.ObserveRequest(c.method, c.code, c.d)
	}
	m.Unrouted().ObserveRequest("DELETE", 404, time.Millisecond)

	want := `
# HELP exgate_requests_total Requests answered, by route, method (GET HEAD POST PUT PATCH DELETE OPTIONS or other) and status code (499: the client went away).
# TYPE exgate_requests_total counter
exgate_requests_total{code="000",method="POST",route="list_markets"} 1
exgate_requests_total{code="200",method="GET",route="list_markets"} 2
exgate_requests_total{code="200",method="HEAD",route="list_markets"} 1
exgate_requests_total{code="404",method="other",route="list_markets"} 1
exgate_requests_total{code="405",method="other",route="list_markets"} 1
exgate_requests_total{code="418",method="GET",route="list_markets"} 1
exgate_requests_total{code="499",method="GET",route="list_markets"} 1
exgate_requests_total{code="404",method="DELETE",route="default"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameRequests); err != nil {
		t.Error(err)
	}

	wantHist := `
# HELP exgate_request_duration_seconds Time from receiving a request's headers to the end of its answer, by route.
# TYPE exgate_request_duration_seconds histogram
exgate_request_duration_seconds_bucket{route="default",le="0.0001"} 0
exgate_request_duration_seconds_bucket{route="default",le="0.00025"} 0
exgate_request_duration_seconds_bucket{route="default",le="0.0005"} 0
exgate_request_duration_seconds_bucket{route="default",le="0.001"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.0025"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.005"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.01"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.025"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.05"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.1"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.25"} 1
exgate_request_duration_seconds_bucket{route="default",le="0.5"} 1
exgate_request_duration_seconds_bucket{route="default",le="1"} 1
exgate_request_duration_seconds_bucket{route="default",le="2.5"} 1
exgate_request_duration_seconds_bucket{route="default",le="5"} 1
exgate_request_duration_seconds_bucket{route="default",le="10"} 1
exgate_request_duration_seconds_bucket{route="default",le="+Inf"} 1
exgate_request_duration_seconds_sum{route="default"} 0.001
exgate_request_duration_seconds_count{route="default"} 1
exgate_request_duration_seconds_bucket{route="list_markets",le="0.0001"} 1
exgate_request_duration_seconds_bucket{route="list_markets",le="0.00025"} 2
exgate_request_duration_seconds_bucket{route="list_markets",le="0.0005"} 2
exgate_request_duration_seconds_bucket{route="list_markets",le="0.001"} 6
exgate_request_duration_seconds_bucket{route="list_markets",le="0.0025"} 6
exgate_request_duration_seconds_bucket{route="list_markets",le="0.005"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.01"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.025"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.05"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.1"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.25"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="0.5"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="1"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="2.5"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="5"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="10"} 7
exgate_request_duration_seconds_bucket{route="list_markets",le="+Inf"} 8
exgate_request_duration_seconds_sum{route="list_markets"} 20.00728
exgate_request_duration_seconds_count{route="list_markets"} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantHist), NameRequestDuration); err != nil {
		t.Error(err)
	}
}

func TestMethodAndCodeLabels(t *testing.T) {
	for _, c := range []struct {
		method, want string
	}{
		{"GET", "GET"}, {"HEAD", "HEAD"}, {"POST", "POST"}, {"PUT", "PUT"},
		{"PATCH", "PATCH"}, {"DELETE", "DELETE"}, {"OPTIONS", "OPTIONS"},
		{"CONNECT", "other"}, {"TRACE", "other"}, {"get", "other"}, {"", "other"},
		{strings.Repeat("X", 1000), "other"},
	} {
		t.Run("method "+c.method[:min(len(c.method), 10)], func(t *testing.T) {
			if got := methodLabel(methodIndex(c.method)); got != c.want {
				t.Errorf("method %q → %q, want %q", c.method, got, c.want)
			}
		})
	}
	seen := map[int]bool{}
	for code := 0; code < 1100; code++ {
		i := codeIndex(code)
		if i < 0 {
			continue
		}
		if i >= numCommonCodes || seen[i] {
			t.Fatalf("codeIndex(%d) = %d: out of range or shared", code, i)
		}
		seen[i] = true
	}
	if len(seen) != numCommonCodes {
		t.Errorf("codeIndex knows %d codes, numCommonCodes is %d", len(seen), numCommonCodes)
	}
	for _, c := range []struct {
		code int
		want string
	}{{200, "200"}, {499, "499"}, {999, "999"}, {99, "000"}, {1000, "000"}, {-1, "000"}} {
		t.Run(fmt.Sprint("code ", c.code), func(t *testing.T) {
			if got := codeLabel(c.code); got != c.want {
				t.Errorf("codeLabel(%d) = %q, want %q", c.code, got, c.want)
			}
		})
	}
}

func TestRateLimitSeries(t *testing.T) {
	m, reg := newTest(t)
	tok := m.Limit("place_order", "token", "")
	if tok != m.Limit("place_order", "token", DefaultTier) {
		t.Error(`Limit with tier "" and DefaultTier differ`)
	}
	tok.Observe(limiter.Allowed, "")
	tok.Observe(limiter.Allowed, "")
	tok.Observe(limiter.Limited, "")
	m.Limit("place_order", "token", "vip").Observe(limiter.ShadowLimited, "")
	m.Route("place_order").Fallback(FallbackLocal)
	m.Route("place_order").Fallback(FallbackLocal)
	m.Route("place_order").Fallback(FallbackMode(200)) // ignored
	storeCalls := []struct {
		d   time.Duration
		err error
	}{
		{300 * time.Microsecond, nil},
		{25 * time.Millisecond, fmt.Errorf("evalsha: %w", context.DeadlineExceeded)},
		{10 * time.Millisecond, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}},
		{10 * time.Millisecond, &net.OpError{Op: "read", Err: timeoutErr{}}},
	}
	var storeSum float64 // summed as the histogram sums, to compare exactly
	for _, c := range storeCalls {
		m.ObserveStore(c.d, c.err)
		storeSum += c.d.Seconds()
	}

	want := fmt.Sprintf(`
# HELP exgate_ratelimit_decisions_total Rate-limit decisions, by route, limit, tier and decision (allowed, limited, shadow_limited, exceeds_burst: a bulk larger than the limit's burst, which can never pass at its size).
# TYPE exgate_ratelimit_decisions_total counter
exgate_ratelimit_decisions_total{decision="allowed",limit="token",route="place_order",tier="default"} 2
exgate_ratelimit_decisions_total{decision="exceeds_burst",limit="token",route="place_order",tier="default"} 0
exgate_ratelimit_decisions_total{decision="limited",limit="token",route="place_order",tier="default"} 1
exgate_ratelimit_decisions_total{decision="shadow_limited",limit="token",route="place_order",tier="default"} 0
exgate_ratelimit_decisions_total{decision="allowed",limit="token",route="place_order",tier="vip"} 0
exgate_ratelimit_decisions_total{decision="exceeds_burst",limit="token",route="place_order",tier="vip"} 0
exgate_ratelimit_decisions_total{decision="limited",limit="token",route="place_order",tier="vip"} 0
exgate_ratelimit_decisions_total{decision="shadow_limited",limit="token",route="place_order",tier="vip"} 1
# HELP exgate_ratelimit_fallback_total Rate-limit decisions taken without the store because it failed, by route and mode (open, closed, local).
# TYPE exgate_ratelimit_fallback_total counter
exgate_ratelimit_fallback_total{mode="closed",route="place_order"} 0
exgate_ratelimit_fallback_total{mode="local",route="place_order"} 2
exgate_ratelimit_fallback_total{mode="open",route="place_order"} 0
# HELP exgate_ratelimit_store_errors_total Failed calls to the rate-limit store, by kind (timeout; full: Redis at maxmemory; other).
# TYPE exgate_ratelimit_store_errors_total counter
exgate_ratelimit_store_errors_total{kind="full"} 0
exgate_ratelimit_store_errors_total{kind="other"} 1
exgate_ratelimit_store_errors_total{kind="timeout"} 2
# HELP exgate_ratelimit_store_duration_seconds Duration of calls to the rate-limit store, failed ones included.
# TYPE exgate_ratelimit_store_duration_seconds histogram
exgate_ratelimit_store_duration_seconds_bucket{le="5e-05"} 0
exgate_ratelimit_store_duration_seconds_bucket{le="0.0001"} 0
exgate_ratelimit_store_duration_seconds_bucket{le="0.00025"} 0
exgate_ratelimit_store_duration_seconds_bucket{le="0.0005"} 1
exgate_ratelimit_store_duration_seconds_bucket{le="0.001"} 1
exgate_ratelimit_store_duration_seconds_bucket{le="0.002"} 1
exgate_ratelimit_store_duration_seconds_bucket{le="0.005"} 1
exgate_ratelimit_store_duration_seconds_bucket{le="0.01"} 3
exgate_ratelimit_store_duration_seconds_bucket{le="0.015"} 3
exgate_ratelimit_store_duration_seconds_bucket{le="0.02"} 3
exgate_ratelimit_store_duration_seconds_bucket{le="0.025"} 4
exgate_ratelimit_store_duration_seconds_bucket{le="0.05"} 4
exgate_ratelimit_store_duration_seconds_bucket{le="0.1"} 4
exgate_ratelimit_store_duration_seconds_bucket{le="+Inf"} 4
exgate_ratelimit_store_duration_seconds_sum %v
exgate_ratelimit_store_duration_seconds_count 4
`, storeSum)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		NameRateLimitDecision, NameFallback, NameStoreErrors, NameStoreDuration); err != nil {
		t.Error(err)
	}
}

// TestLimitObserve: every verdict the limiter gives is counted under its
// own decision label, and every on_store_error mode under its fallback
// label (open and closed decide without the limit, so only there): a
// verdict or mode added to limiter or config without its counter fails
// here rather than going uncounted.
func TestLimitObserve(t *testing.T) {
	modes := []string{config.StoreOpen, config.StoreClosed, config.StoreLocal}
	for v := range limiter.NumVerdicts {
		for _, fallback := range append([]string{""}, modes...) {
			t.Run(v.String()+"/"+fallback, func(t *testing.T) {
				m, _ := newTest(t)
				m.Limit("list_markets", "address", "").Observe(v, fallback)
				counted := fallback == "" || fallback == config.StoreLocal
				for w := range limiter.NumVerdicts {
					want := 0.0
					if w == v && counted {
						want = 1
					}
					if got := testutil.ToFloat64(m.decisions.WithLabelValues("list_markets", "address", DefaultTier, w.String())); got != want {
						t.Errorf("decision %s = %v, want %v", w, got, want)
					}
				}
				for _, f := range modes {
					want := 0.0
					if f == fallback {
						want = 1
					}
					if got := testutil.ToFloat64(m.fallback.WithLabelValues("list_markets", f)); got != want {
						t.Errorf("fallback %s = %v, want %v", f, got, want)
					}
				}
			})
		}
	}
	t.Run("unknown", func(t *testing.T) {
		m, _ := newTest(t)
		l := m.Limit("list_markets", "address", "")
		l.Observe(limiter.NumVerdicts, "")
		l.Observe(limiter.Allowed, "sideways")
		for w := range limiter.NumVerdicts {
			if got := testutil.ToFloat64(m.decisions.WithLabelValues("list_markets", "address", DefaultTier, w.String())); got != 0 {
				t.Errorf("decision %s = %v after an unknown verdict and fallback, want 0", w, got)
			}
		}
		for _, f := range modes {
			if got := testutil.ToFloat64(m.fallback.WithLabelValues("list_markets", f)); got != 0 {
				t.Errorf("fallback %s = %v after an unknown fallback, want 0", f, got)
			}
		}
	})
	var nilLimit *LimitMetrics
	nilLimit.Observe(limiter.Allowed, "local") // must not panic
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

func TestOtherSeries(t *testing.T) {
	m, reg := newTest(t)
	now := time.Unix(1_700_000_000, 0)
	m.now = func() time.Time { return now }
	if err := m.RegisterCatalogueAge(reg); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.catalogueAge); got != -1 {
		t.Errorf("catalogue age before the first load = %v, want -1", got)
	}
	m.SetCatalogueLoaded(now.Add(-42 * time.Second))
	m.Route("list_matches").UpstreamError(UpstreamReset)
	m.Route("list_matches").UpstreamError(UpstreamErrorKind(99)) // → other
	m.ValidationRejected("invalid_price")
	m.ValidationRejected("invalid_price")
	m.ValidationRejected("")
	m.Idempotency(IdempotencyReplayed)
	m.Idempotency(IdempotencyStoreError)
	m.Idempotency(IdempotencyOutcome(99)) // ignored
	m.ConfigReload(true)
	m.ConfigReload(false)
	m.ConfigReload(true)
	m.IncInflight()
	m.IncInflight()
	m.DecInflight()
	m.BodyBudgetExhausted()

	want := `
# HELP exgate_body_budget_refusals_total Requests refused with 503 server_busy because their client's share of server.max_buffered_bytes was full (a client may hold at most as many bytes as are left free).
# TYPE exgate_body_budget_refusals_total counter
exgate_body_budget_refusals_total 1
# HELP exgate_build_info Always 1; the labels say which build of exgate is running.
# TYPE exgate_build_info gauge
exgate_build_info{goversion="go1.26.0",revision="abc123",version="v1.2.3"} 1
# HELP exgate_config_reloads_total Configuration reloads, by result (success, failure).
# TYPE exgate_config_reloads_total counter
exgate_config_reloads_total{result="failure"} 1
exgate_config_reloads_total{result="success"} 2
# HELP exgate_idempotency_total Duplicate-protection outcomes for order identifiers (claimed, replayed, in_progress, conflict, unknown, released, store_error, store_full, account_full, not_acceptable).
# TYPE exgate_idempotency_total counter
exgate_idempotency_total{outcome="account_full"} 0
exgate_idempotency_total{outcome="claimed"} 0
exgate_idempotency_total{outcome="conflict"} 0
exgate_idempotency_total{outcome="in_progress"} 0
exgate_idempotency_total{outcome="not_acceptable"} 0
exgate_idempotency_total{outcome="released"} 0
exgate_idempotency_total{outcome="replayed"} 1
exgate_idempotency_total{outcome="store_error"} 1
exgate_idempotency_total{outcome="store_full"} 0
exgate_idempotency_total{outcome="unknown"} 0
# HELP exgate_inflight_requests Requests being served.
# TYPE exgate_inflight_requests gauge
exgate_inflight_requests 1
# HELP exgate_market_catalogue_age_seconds Seconds since the market catalogue was last loaded from the backend; -1 until the first load.
# TYPE exgate_market_catalogue_age_seconds gauge
exgate_market_catalogue_age_seconds 42
# HELP exgate_upstream_errors_total Requests the backend did not answer, by route and kind (timeout, unreachable, reset, client_gone, other).
# TYPE exgate_upstream_errors_total counter
exgate_upstream_errors_total{kind="client_gone",route="list_matches"} 0
exgate_upstream_errors_total{kind="other",route="list_matches"} 1
exgate_upstream_errors_total{kind="reset",route="list_matches"} 1
exgate_upstream_errors_total{kind="timeout",route="list_matches"} 0
exgate_upstream_errors_total{kind="unreachable",route="list_matches"} 0
# HELP exgate_validation_rejections_total Orders refused by validation before reaching the backend, by rejection code.
# TYPE exgate_validation_rejections_total counter
exgate_validation_rejections_total{code="invalid_price"} 2
exgate_validation_rejections_total{code="other"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		NameBuildInfo, NameConfigReloads, NameIdempotency, NameInflight, NameCatalogueAge,
		NameUpstreamErrors, NameValidation, NameBodyBudget); err != nil {
		t.Error(err)
	}

	// A load stamped in the future (clock skew) reads 0, not negative.
	m.SetCatalogueLoaded(now.Add(time.Minute))
	if got := testutil.ToFloat64(m.catalogueAge); got != 0 {
		t.Errorf("catalogue age with a future load = %v, want 0", got)
	}
}

func TestBuildInfoDefaults(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, BuildInfo{}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`
# HELP exgate_build_info Always 1; the labels say which build of exgate is running.
# TYPE exgate_build_info gauge
exgate_build_info{goversion=%q,revision="unknown",version="unknown"} 1
`, goVersion())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameBuildInfo); err != nil {
		t.Error(err)
	}
	if bi := ReadBuildInfo(); bi.GoVersion != goVersion() {
		t.Errorf("ReadBuildInfo().GoVersion = %q, want %q", bi.GoVersion, goVersion())
	}
}

func TestValidationCodeCardinalityBounded(t *testing.T) {
	m, reg := newTest(t)
	for i := range 500 {
		m.ValidationRejected(fmt.Sprintf("code_%d", i))
	}
	n, err := testutil.GatherAndCount(reg, NameValidation)
	if err != nil {
		t.Fatal(err)
	}
	if n != maxValidationCodes+1 {
		t.Errorf("%d series of %s after 500 distinct codes, want %d", n, NameValidation, maxValidationCodes+1)
	}
	if got, want := testutil.ToFloat64(m.validation.WithLabelValues("other")), float64(500-maxValidationCodes); got != want {
		t.Errorf(`code="other" counts %v, want %v`, got, want)
	}
}

func TestResolversAreCached(t *testing.T) {
	m, _ := newTest(t)
	if m.Route("a") != m.Route("a") || m.Route("") != m.Unrouted() || m.Route("a") == m.Route("b") {
		t.Error("Route does not return one value per name")
	}
	if m.Limit("a", "token", "vip") != m.Limit("a", "token", "vip") || m.Limit("", "address", "") != m.Limit(DefaultRoute, "address", DefaultTier) {
		t.Error("Limit does not return one value per (route, limit, tier)")
	}
	if m.Limit("a", "token", "vip") == m.Limit("a", "token", "") {
		t.Error("Limit shares a value between tiers")
	}
	if got := m.Route("a").Name(); got != "a" {
		t.Errorf("Name() = %q", got)
	}
}

func TestNilIsNoOp(t *testing.T) {
	var m *Metrics
	r := m.Route("x")
	l := m.Limit("x", "token", "")
	if r != nil || l != nil || m.Unrouted() != nil {
		t.Fatal("nil *Metrics returned non-nil resolvers")
	}
	// None of these may panic.
	for name, f := range map[string]func(){
		"ObserveRequest":     func() { r.ObserveRequest("GET", 200, time.Second) },
		"ObserveUpstream":    func() { r.ObserveUpstream(time.Second) },
		"UpstreamError":      func() { r.UpstreamError(UpstreamTimeout) },
		"Fallback":           func() { r.Fallback(FallbackOpen) },
		"Name":               func() { _ = r.Name() },
		"Observe":            func() { l.Observe(limiter.Limited, "local") },
		"IncInflight":        func() { m.IncInflight() },
		"DecInflight":        func() { m.DecInflight() },
		"ObserveStore":       func() { m.ObserveStore(time.Second, io.EOF) },
		"Idempotency":        func() { m.Idempotency(IdempotencyClaimed) },
		"ValidationRejected": func() { m.ValidationRejected("x") },
		"ConfigReload":       func() { m.ConfigReload(true) },
		"SetCatalogueLoaded": func() { m.SetCatalogueLoaded(time.Now()) },
	} {
		t.Run(name, func(t *testing.T) { f() })
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m, _ := newTest(t)
	r := m.Route("place_order")
	l := m.Limit("place_order", "token", "vip")
	// First uses resolve children (and may allocate); warm them up.
	r.ObserveRequest("POST", 201, time.Millisecond)
	m.ValidationRejected("invalid_price")
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"ObserveRequest", func() { r.ObserveRequest("POST", 201, 1500*time.Microsecond) }},
		{"ObserveUpstream", func() { r.ObserveUpstream(time.Millisecond) }},
		{"UpstreamError", func() { r.UpstreamError(UpstreamReset) }},
		{"Fallback", func() { r.Fallback(FallbackLocal) }},
		{"Observe", func() { l.Observe(limiter.Allowed, "") }},
		{"Observe local", func() { l.Observe(limiter.Limited, "local") }},
		{"Limit lookup", func() { m.Limit("place_order", "token", "vip").Observe(limiter.Allowed, "") }},
		{"Inflight", func() { m.IncInflight(); m.DecInflight() }},
		{"ObserveStore", func() { m.ObserveStore(time.Millisecond, nil) }},
		{"Idempotency", func() { m.Idempotency(IdempotencyClaimed) }},
		{"ValidationRejected", func() { m.ValidationRejected("invalid_price") }},
		{"nil ObserveRequest", func() { (*RouteMetrics)(nil).ObserveRequest("GET", 200, time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(1000, c.f); n != 0 {
				t.Errorf("%s: %v allocs per call, want 0", c.name, n)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	m, reg := newTest(t)
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// Resolving concurrently with first use of each pair.
				r := m.Route(fmt.Sprint("r", i%3))
				r.ObserveRequest([]string{"GET", "POST"}[w%2], []int{200, 429, 503, 418}[i%4], time.Millisecond)
				m.Limit("r", "token", fmt.Sprint("t", i%2)).Observe(limiter.Allowed, "")
				m.ValidationRejected(fmt.Sprint("c", i%5))
			}
		}()
	}
	wg.Wait()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string) float64 {
		var s float64
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, mt := range mf.GetMetric() {
					s += mt.GetCounter().GetValue()
				}
			}
		}
		return s
	}
	for _, name := range []string{NameRequests, NameRateLimitDecision, NameValidation} {
		if got := sum(name); got != workers*per {
			t.Errorf("%s sums to %v, want %d", name, got, workers*per)
		}
	}
	if n, _ := testutil.GatherAndCount(reg, NameRequests); n != 3*2*4 {
		t.Errorf("%d series of %s, want %d", n, NameRequests, 3*2*4)
	}
}

func TestClassifyUpstreamError(t *testing.T) {
	// A real refused dial: a port bound and never listening.
	addr := unreachable.Refused(t)
	_, refused := (&http.Client{}).Get("http://" + addr + "/")
	if refused == nil {
		t.Fatal("GET to a closed port succeeded")
	}
	// A real reset: the server closes the connection without answering.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	_, reset := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + ln.Addr().String() + "/")
	if reset == nil {
		t.Fatal("GET to a closing server succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
	_, deadline := http.DefaultTransport.RoundTrip(req)
	if deadline == nil {
		t.Fatal("request with an expired deadline succeeded")
	}

	for _, c := range []struct {
		name       string
		err        error
		clientGone bool
		want       UpstreamErrorKind
	}{
		{"real refused dial", refused, false, UpstreamUnreachable},
		{"real reset", reset, false, UpstreamReset},
		{"real deadline", deadline, false, UpstreamTimeout},
		{"client gone wins", deadline, true, UpstreamClientGone},
		{"canceled", &url.Error{Op: "Get", Err: context.Canceled}, false, UpstreamClientGone},
		{"dns", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "backend"}}, false, UpstreamUnreachable},
		{"host unreachable", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, false, UpstreamUnreachable},
		{"econnreset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false, UpstreamReset},
		{"unexpected eof", fmt.Errorf("readLoop: %w", io.ErrUnexpectedEOF), false, UpstreamReset},
		{"net timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, false, UpstreamTimeout},
		{"tls", errors.New("tls: handshake failure"), false, UpstreamOther},
		{"nil", nil, false, UpstreamOther},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ClassifyUpstreamError(c.err, c.clientGone); got != c.want {
				t.Errorf("ClassifyUpstreamError(%v, %v) = %s, want %s", c.err, c.clientGone, got, c.want)
			}
		})
	}
}

func TestEnumLabels(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{UpstreamOther.String(), "other"}, {UpstreamTimeout.String(), "timeout"},
		{UpstreamUnreachable.String(), "unreachable"}, {UpstreamReset.String(), "reset"},
		{UpstreamClientGone.String(), "client_gone"},
		{FallbackOpen.String(), "open"}, {FallbackClosed.String(), "closed"}, {FallbackLocal.String(), "local"},
		{IdempotencyClaimed.String(), "claimed"}, {IdempotencyReplayed.String(), "replayed"},
		{IdempotencyInProgress.String(), "in_progress"}, {IdempotencyConflict.String(), "conflict"},
		{IdempotencyUnknown.String(), "unknown"}, {IdempotencyStoreError.String(), "store_error"},
		{IdempotencyStoreFull.String(), "store_full"}, {IdempotencyAccountFull.String(), "account_full"}, {IdempotencyReleased.String(), "released"},
		{IdempotencyNotAcceptable.String(), "not_acceptable"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("label %q, want %q", c.got, c.want)
			}
		})
	}
	for _, s := range []string{"open", "closed", "local"} {
		f, ok := ParseFallbackMode(s)
		if !ok || f.String() != s {
			t.Errorf("ParseFallbackMode(%q) = %v, %v", s, f, ok)
		}
	}
	if _, ok := ParseFallbackMode("sideways"); ok {
		t.Error(`ParseFallbackMode("sideways") succeeded`)
	}
}

// TestCatalogueAgeOnlyWhereRegistered: a gateway that validates no order
// has no catalogue and exports no age (its -1 would fire the "never
// loaded" alert for ever).
func TestCatalogueAgeOnlyWhereRegistered(t *testing.T) {
	m, reg := newTest(t)
	m.SetCatalogueLoaded(time.Now())
	if n, err := testutil.GatherAndCount(reg, NameCatalogueAge); err != nil || n != 0 {
		t.Errorf("catalogue age exported without RegisterCatalogueAge: %d series, %v", n, err)
	}
	if err := m.RegisterCatalogueAge(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, NameCatalogueAge); err != nil || n != 1 {
		t.Errorf("catalogue age after RegisterCatalogueAge: %d series, %v", n, err)
	}
}

// TestDuplicateStore: every operation's duration and error children exist
// from the start (so rate() works before the first failure), a failure
// is counted by kind, and registering twice is an error.
func TestDuplicateStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewDuplicateStore(reg)
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(IdempotencyOpClaim, 3*time.Millisecond, nil)
	s.Observe(IdempotencyOpClaim, 100*time.Millisecond, context.DeadlineExceeded)
	s.Observe(IdempotencyOpComplete, time.Millisecond, errors.New("connection refused"))
	s.Observe(IdempotencyOpClaim, time.Millisecond, errors.New("idempotency: redis claim: OOM command not allowed when used memory > 'maxmemory'."))
	s.SetRoom(4000, 4096, true)
	s.Observe(IdempotencyStoreOp(99), time.Millisecond, nil) // ignored
	var nilStore *IdempotencyStore
	nilStore.Observe(IdempotencyOpClaim, time.Millisecond, nil)
	if n, _ := testutil.GatherAndCount(reg, NameIdempotencyStoreErrors); n != 12 {
		t.Errorf("%d error series, want 4 operations × 3 kinds", n)
	}
	want := `
# HELP exgate_idempotency_store_errors_total Failed calls to the duplicate-protection store, by operation and kind (timeout, full, other); a failed claim refuses the order with 503.
# TYPE exgate_idempotency_store_errors_total counter
exgate_idempotency_store_errors_total{kind="full",operation="claim"} 1
exgate_idempotency_store_errors_total{kind="full",operation="complete"} 0
exgate_idempotency_store_errors_total{kind="full",operation="mark_unknown"} 0
exgate_idempotency_store_errors_total{kind="full",operation="release"} 0
exgate_idempotency_store_errors_total{kind="other",operation="claim"} 0
exgate_idempotency_store_errors_total{kind="other",operation="complete"} 1
exgate_idempotency_store_errors_total{kind="other",operation="mark_unknown"} 0
exgate_idempotency_store_errors_total{kind="other",operation="release"} 0
exgate_idempotency_store_errors_total{kind="timeout",operation="claim"} 1
exgate_idempotency_store_errors_total{kind="timeout",operation="complete"} 0
exgate_idempotency_store_errors_total{kind="timeout",operation="mark_unknown"} 0
exgate_idempotency_store_errors_total{kind="timeout",operation="release"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameIdempotencyStoreErrors); err != nil {
		t.Error(err)
	}
	if testutil.ToFloat64(s.full) != 1 || testutil.ToFloat64(s.bytes) != 4000 || testutil.ToFloat64(s.maxBytes) != 4096 {
		t.Error("SetRoom did not set the room gauges")
	}
	if got := testutil.CollectAndCount(s.duration); got != 4 {
		t.Errorf("%d duration series, want one per operation", got)
	}
	if n, _ := testutil.GatherAndCount(reg, NameIdempotencyScriptRuns); n != 0 {
		t.Errorf("%d script-run series without a source, want none (a memory store runs no script)", n)
	}
	s.SetScriptRuns(scriptRunCounts{3, 40})
	runs := `
# HELP exgate_idempotency_store_script_runs_total Redis script runs of duplicate protection's store, by script: claim (a claim sent on its own, not riding in the limits' round trip) and finish (a run that records responses, releases claims or marks them unknown; one run carries the finishes of a round trip).
# TYPE exgate_idempotency_store_script_runs_total counter
exgate_idempotency_store_script_runs_total{script="claim"} 3
exgate_idempotency_store_script_runs_total{script="finish"} 40
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(runs), NameIdempotencyScriptRuns); err != nil {
		t.Error(err)
	}
	if _, err := NewDuplicateStore(reg); err == nil {
		t.Error("registering the store's collectors twice is not an error")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// scriptRunCounts is a ScriptRunSource of fixed counts.
type scriptRunCounts struct{ claims, finishes uint64 }

func (c scriptRunCounts) ScriptRuns() (uint64, uint64) { return c.claims, c.finishes }

// fixedSource is an OverloadSource with set values.
type fixedSource struct{ limit, inflight, waiting int }

func (f fixedSource) Limit() int            { return f.limit }
func (f fixedSource) InFlight() int         { return f.inflight }
func (f fixedSource) Waiting() int          { return f.waiting }
func (f fixedSource) MinRTT() time.Duration { return 20 * time.Millisecond }
func (f fixedSource) Clients() int          { return 5 }

func TestOverloadGaugesReadTheSource(t *testing.T) {
	m, reg := newTest(t)
	if got := testutil.ToFloat64(m.overload.gauges[0]); got != 0 {
		t.Errorf("limit without a source = %v, want 0", got)
	}
	m.SetOverloadSource(fixedSource{limit: 40, inflight: 12, waiting: 3})
	want := map[string]float64{NameOverloadLimit: 40, NameOverloadInFlight: 12, NameOverloadWaiting: 3, NameOverloadMinRTT: 0.02, NameOverloadClients: 5}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if w, ok := want[mf.GetName()]; ok {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != w {
				t.Errorf("%s = %v, want %v", mf.GetName(), got, w)
			}
			delete(want, mf.GetName())
		}
	}
	if len(want) != 0 {
		t.Errorf("not gathered: %v", want)
	}
	o := m.Overload("cancel_order", "cancel")
	o.Shed()
	o.Shed()
	if got := testutil.ToFloat64(m.overload.shed.WithLabelValues("cancel_order", "cancel")); got != 2 {
		t.Errorf("shed = %v, want 2", got)
	}
	var nilM *Metrics
	nilM.Overload("r", "c").Shed() // a nil *Metrics records nothing and does not panic
}

// TestBuildInfoOf reads a build's version and revision from what the Go
// toolchain records: its own version when it set one, the pseudo-version
// of the recorded commit when it left "(devel)", "devel" when nothing is
// recorded.
func TestBuildInfoOf(t *testing.T) {
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "ee62698c9cddba3b517d39df67170ae74bc2f871"},
			{Key: "vcs.time", Value: "2026-11-25T10:31:02Z"}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name              string
		bi                debug.BuildInfo
		version, revision string
	}{
		{"stamped by go 1.24+", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125103102-ee62698c9cdd"}, Settings: vcs("false")},
			"v0.0.0-20261125103102-ee62698c9cdd", "ee62698c9cddba3b517d39df67170ae74bc2f871"},
		{"a release", debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Settings: vcs("false")},
			"v1.2.0", "ee62698c9cddba3b517d39df67170ae74bc2f871"},
		{"devel with a commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")},
			"v0.0.0-20261125103102-ee62698c9cdd", "ee62698c9cddba3b517d39df67170ae74bc2f871"},
		{"devel with a modified tree", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			"v0.0.0-20261125103102-ee62698c9cdd+dirty", "ee62698c9cddba3b517d39df67170ae74bc2f871"},
		{"no version control information", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildInfoOf(&tt.bi)
			if got.Version != tt.version || got.Revision != tt.revision || got.GoVersion == "" {
				t.Errorf("BuildInfoOf = %+v, want version %q revision %q", got, tt.version, tt.revision)
			}
		})
	}
}

type bodyBudget struct {
	bytes   int64
	clients int
}

func (b bodyBudget) Buffered() int64 { return b.bytes }
func (b bodyBudget) Clients() int    { return b.clients }

// TestBodyBudgetGauges: the body budget's gauges read 0 until a source is
// set, then the source's figures.
func TestBodyBudgetGauges(t *testing.T) {
	m, _ := newTest(t)
	read := func() (float64, float64) {
		g := m.bodyBudgetGauges.gauges
		return testutil.ToFloat64(g[0]), testutil.ToFloat64(g[1])
	}
	if b, c := read(); b != 0 || c != 0 {
		t.Errorf("without a source: %v bytes, %v clients; want 0", b, c)
	}
	m.SetBodyBudgetSource(bodyBudget{bytes: 4096, clients: 3})
	if b, c := read(); b != 4096 || c != 3 {
		t.Errorf("with a source: %v bytes, %v clients; want 4096 and 3", b, c)
	}
	var none *Metrics
	none.SetBodyBudgetSource(bodyBudget{}) // a nil *Metrics does nothing
}

// TestReplicaInfo: one series names the replica; naming it again
// replaces it.
func TestReplicaInfo(t *testing.T) {
	m, reg := newTest(t)
	m.SetReplica("exgate-0")
	m.SetReplica("exgate-1")
	want := `
# HELP exgate_replica_info Always 1; the label names this replica (the replica setting, or the host name: in Kubernetes the pod's name).
# TYPE exgate_replica_info gauge
exgate_replica_info{replica="exgate-1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), NameReplicaInfo); err != nil {
		t.Fatal(err)
	}
}

// TestStoreTotalsReadTheCounters: the console's store counts are the
// exported counters' values, every kind and route summed.
func TestStoreTotalsReadTheCounters(t *testing.T) {
	m, _ := newTest(t)
	m.ObserveStore(time.Millisecond, context.DeadlineExceeded)
	m.ObserveStore(time.Millisecond, errors.New("connection refused"))
	m.ObserveStore(time.Millisecond, nil)
	m.Limit("list_markets", "address", "").Observe(limiter.Allowed, "local")
	m.Limit("place_order", "token", "").Observe(limiter.Allowed, "local")
	m.Limit("place_order", "token", "").Observe(limiter.Limited, "closed")
	st := m.StoreTotals()
	if st.Errors != 2 || st.Fallback[FallbackLocal] != 2 || st.Fallback[FallbackClosed] != 1 || st.Fallback[FallbackOpen] != 0 {
		t.Errorf("totals %+v", st)
	}
	if st := (*Metrics)(nil).StoreTotals(); st.Errors != 0 {
		t.Errorf("nil: %+v", st)
	}
}
