package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

// TestRouteCapHoldsAcrossReload reloads while a route's max_in_flight
// is held by requests under way: the new plan's cap counts them. Before,
// every reload gave each route a new, empty pool, so that the requests
// under way at the old one were not counted: a reload (of anything: a
// tier, another route) let a capped route send its cap again to the
// backend, and a cap lowered to protect a backend let more through.
func TestRouteCapHoldsAcrossReload(t *testing.T) {
	cases := []struct {
		name          string
		before, after int // the route's max_in_flight
		held          int // its requests under way at the reload
		want          int // the status of the next request
	}{
		{name: "unchanged, full", before: 1, after: 1, held: 1, want: http.StatusServiceUnavailable},
		{name: "lowered under the held", before: 3, after: 1, held: 2, want: http.StatusServiceUnavailable},
		{name: "removed", before: 1, after: 0, held: 1, want: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			started := make(chan struct{}, 8)
			var cfg *config.Config
			e := startEnv(t, func(c *config.Config) {
				c.Route("list_tickers").MaxInFlight = tc.before
				cfg = c
			})
			var n atomic.Int32
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/mkt/tickers/" && int(n.Add(1)) <= tc.held {
					started <- struct{}{}
					<-release // the requests that hold the cap
				}
			}
			done := make(chan struct{}, tc.held)
			defer func() { // before the server's Cleanup, whatever fails
				close(release)
				for range tc.held {
					<-done
				}
			}()
			for range tc.held {
				go func() {
					res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
					res.Body.Close()
					done <- struct{}{}
				}()
				<-started
			}
			next := config.Default()
			next.Upstream = cfg.Upstream
			next.Route("list_tickers").MaxInFlight = tc.after
			if err := next.Validate(); err != nil {
				t.Fatal(err)
			}
			e.gw.Reload(next, limiter.Compile(next, nil), nil)
			res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
			if tc.want != http.StatusOK {
				assertError(t, res, tc.want, "overloaded")
			} else if res.Body.Close(); res.StatusCode != tc.want {
				t.Errorf("after the reload: %d, want %d", res.StatusCode, tc.want)
			}
		})
	}
}
