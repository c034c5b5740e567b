package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/proxy"
	"github.com/exgate/exgate/upstream"
)

// newGateway is the gateway of cfg with limits (nil: none) and the
// dependencies the composition root gives it: the backend transport, a
// fleet of cfg's static lists and cfg's limits without token tiers.
func newGateway(cfg *config.Config, limits *limiter.Enforcer) (*proxy.Gateway, error) {
	return proxy.New(cfg, proxy.Options{Limits: limits, Transport: upstream.NewTransport(cfg.Upstream),
		Fleet: upstream.NewFleet(cfg.Upstream, upstream.FleetOptions{}), Rules: limiter.Compile(cfg, nil)})
}

func adminGet(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestReadiness(t *testing.T) {
	gw, err := newGateway(config.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context) error { return errors.New("connection refused") }
	pass := func(context.Context) error { return nil }
	cases := []struct {
		name   string
		checks []Check
		status int
		body   string
	}{
		{"no checks", nil, 200, `{"status":"ready"}`},
		{"all pass", []Check{{Name: "backend", Critical: true, Run: pass}}, 200, `{"status":"ready","checks":{"backend":"ok"}}`},
		{"critical fails", []Check{{Name: "backend", Critical: true, Run: fail}, {Name: "redis", Run: pass}}, 503,
			`{"status":"not_ready","checks":{"backend":"connection refused","redis":"ok"}}`},
		{"non-critical fails", []Check{{Name: "backend", Critical: true, Run: pass}, {Name: "redis", Run: fail}}, 200,
			`{"status":"ready","checks":{"backend":"ok","redis":"connection refused (not critical)"}}`},
		{"impact makes a failure critical and says what it degrades",
			[]Check{{Name: "redis", Run: fail, Impact: func() (bool, string) { return true, "routes failing closed answer 503" }}}, 503,
			`{"status":"not_ready","checks":{"redis":"routes failing closed answer 503: connection refused"}}`},
		{"impact overrides Critical",
			[]Check{{Name: "redis", Critical: true, Run: fail, Impact: func() (bool, string) { return false, "limits are decided in-process" }}}, 200,
			`{"status":"ready","checks":{"redis":"limits are decided in-process: connection refused (not critical)"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := adminGet(t, Handler(gw, Options{Checks: tc.checks}), "/readyz")
			if code != tc.status || strings.TrimSpace(body) != tc.body {
				t.Errorf("%d %s, want %d %s", code, body, tc.status, tc.body)
			}
		})
	}
	t.Run("slow check bounded", func(t *testing.T) {
		slow := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		// The check returns only when its deadline ends it.
		code, _ := adminGet(t, Handler(gw, Options{CheckTimeout: 50 * time.Millisecond,
			Checks: []Check{{Name: "backend", Critical: true, Run: slow}}}), "/readyz")
		if code != 503 {
			t.Errorf("%d, want 503", code)
		}
	})
	t.Run("results reused within the interval", func(t *testing.T) {
		var runs atomic.Int64
		h := Handler(gw, Options{CheckInterval: time.Hour,
			Checks: []Check{{Name: "backend", Run: func(context.Context) error { runs.Add(1); return nil }}}})
		for i := 0; i < 5; i++ {
			adminGet(t, h, "/readyz")
		}
		if runs.Load() != 1 {
			t.Errorf("check ran %d times for 5 probes within its interval", runs.Load())
		}
	})
	t.Run("draining", func(t *testing.T) {
		g2, _ := newGateway(config.Default(), nil)
		g2.SetDraining()
		code, body := adminGet(t, Handler(g2, Options{}), "/readyz")
		if code != 503 || !strings.Contains(body, "draining") {
			t.Errorf("%d %s", code, body)
		}
		if code, _ := adminGet(t, Handler(g2, Options{}), "/healthz"); code != 200 {
			t.Errorf("healthz while draining: %d", code)
		}
	})
}

func TestAdminPprofAndMetrics(t *testing.T) {
	gw, _ := newGateway(config.Default(), nil)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "exgate_up 1\n") })
	off := Handler(gw, Options{})
	on := Handler(gw, Options{Pprof: true, Metrics: metrics})
	if code, _ := adminGet(t, off, "/debug/pprof/"); code != 404 {
		t.Errorf("pprof without admin.pprof: %d, want 404", code)
	}
	if code, _ := adminGet(t, off, "/metrics"); code != 404 {
		t.Errorf("/metrics without a handler: %d, want 404", code)
	}
	if code, body := adminGet(t, on, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof with admin.pprof: %d", code)
	}
	if code, body := adminGet(t, on, "/metrics"); code != 200 || body != "exgate_up 1\n" {
		t.Errorf("/metrics: %d %q", code, body)
	}
}
