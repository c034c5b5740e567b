package metrics

import (
	"runtime"
	"testing"
	"time"

	"github.com/exgate/exgate/limiter"
	"github.com/prometheus/client_golang/prometheus"
)

func goVersion() string { return runtime.Version() }

func benchMetrics(b *testing.B) *Metrics {
	b.Helper()
	m, err := New(prometheus.NewRegistry(), BuildInfo{})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkObserveRequest is the per-request cost of the request counter
// and duration histogram on a resolved route (target: 0 allocs/op).
func BenchmarkObserveRequest(b *testing.B) {
	r := benchMetrics(b).Route("place_order")
	codes := [...]int{200, 201, 429, 502}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.ObserveRequest("POST", codes[i&3], time.Duration(i&1023)*time.Microsecond)
		i++
	}
}

// BenchmarkObserveRequestParallel is ObserveRequest under contention from
// all Ps on one route.
func BenchmarkObserveRequestParallel(b *testing.B) {
	r := benchMetrics(b).Route("place_order")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.ObserveRequest("GET", 200, 750*time.Microsecond)
		}
	})
}

// BenchmarkRequestPath is everything the gateway records for one allowed,
// proxied request: inflight, a limit decision, a store call, the upstream
// time and the request.
func BenchmarkRequestPath(b *testing.B) {
	m := benchMetrics(b)
	r := m.Route("list_markets")
	l := m.Limit("list_markets", "token", "")
	b.ReportAllocs()
	for b.Loop() {
		m.IncInflight()
		m.ObserveStore(400*time.Microsecond, nil)
		l.Observe(limiter.Allowed, "")
		r.ObserveUpstream(2 * time.Millisecond)
		r.ObserveRequest("GET", 200, 3*time.Millisecond)
		m.DecInflight()
	}
}

// BenchmarkNilMetrics is the cost of the no-op variant.
func BenchmarkNilMetrics(b *testing.B) {
	var m *Metrics
	r := m.Route("x")
	b.ReportAllocs()
	for b.Loop() {
		r.ObserveRequest("GET", 200, time.Millisecond)
	}
}
