package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestOwnRequestsBesideClientTraffic: exgate's own requests to an
// instance — its active health checks, the market catalogue's fetch — are
// not queued behind client traffic for the capped connections
// (upstream.max_conns_per_host): with every connection to the instance
// held by reads the backend is slow to answer, a health check waited in
// the connection pool's queue past its timeout, failed, and marked a
// healthy instance down (and so every instance of a surge), and the
// catalogue's fetch waited alike. They go on connections of their own.
func TestOwnRequestsBesideClientTraffic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int // max_conns_per_host, each held by a client's read
		fetch bool
	}{
		{"health check, one connection", 1, false},
		{"health check, four connections", 4, false},
		{"catalogue fetch, one connection", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var checks atomic.Int64
			held, release := make(chan struct{}, tc.conns), make(chan struct{})
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/healthz":
					checks.Add(1)
				case "/slow":
					held <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(backend.Close)
			t.Cleanup(func() { close(release) })
			u := config.DefaultUpstream()
			u.URL, u.MaxConnsPerHost = config.MustURL(backend.URL), tc.conns
			u.HealthCheck = config.HealthCheck{Path: "/healthz", Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond,
				HealthyThreshold: 1, UnhealthyThreshold: 2}
			if tc.fetch {
				u.HealthCheck.Path = ""
			}
			tr := NewTransport(u)
			t.Cleanup(tr.CloseIdleConnections)
			var down atomic.Int64
			f := NewFleet(u, FleetOptions{OnChange: func(ev Event) {
				if ev.Kind == MarkedDown {
					down.Add(1)
				}
			}})
			for range tc.conns { // client traffic: a read on every connection the cap allows
				go func() {
					req, _ := http.NewRequest(http.MethodGet, backend.URL+"/slow", nil)
					if res, err := tr.RoundTrip(req); err == nil {
						res.Body.Close()
					}
				}()
				<-held
			}
			if tc.fetch {
				ctx, cancel := context.WithTimeout(context.Background(), u.HealthCheck.Timeout)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://catalogue/api/v1/mkt/markets/", nil)
				res, err := f.Service(config.DefaultService).Transport(tr).RoundTrip(req)
				if err != nil {
					t.Fatalf("the catalogue's fetch with every connection held: %v, want the backend's answer", err)
				}
				res.Body.Close()
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); f.Run(ctx, tr) }()
			t.Cleanup(func() { cancel(); <-done })
			for end := time.Now().Add(20 * time.Second); checks.Load() < 3 && down.Load() == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			st := f.Service(config.DefaultService).State()
			if n := checks.Load(); n < 3 || down.Load() != 0 || st.Healthy != 1 {
				t.Errorf("with %d connections held by reads: %d health checks reached the instance, marked down %d times, %d healthy; want 3 or more, none, 1",
					tc.conns, n, down.Load(), st.Healthy)
			}
		})
	}
}
