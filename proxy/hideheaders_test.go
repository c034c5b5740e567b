package proxy

import (
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
)

// TestBackendHeadersHidden: the fields upstream.hide_headers names —
// by default Server and X-Powered-By, which tell an attacker what runs
// behind exgate and its version (Server: gunicorn/20.1.0, X-Powered-By:
// Express) — reach no client, on a final answer or a 103, as NGINX's
// proxy_hide_header keeps them (NGINX hides Server by default; Envoy
// overwrites it). exgate's own answers carry neither. Before, every
// backend answer passed them on. The other fields pass, and [] passes
// them all.
func TestBackendHeadersHidden(t *testing.T) {
	backend := http.Header{"Server": {"gunicorn/20.1.0"}, "X-Powered-By": {"Express"}, "X-Runtime": {"0.004"},
		"Link": {"</a.css>; rel=preload"}}
	cases := []struct {
		name   string
		hide   []string // upstream.hide_headers; nil: the default
		hidden []string
		passed []string
	}{
		{"default", nil, []string{"Server", "X-Powered-By"}, []string{"X-Runtime"}},
		{"configured, any case", []string{"x-runtime", "SERVER"}, []string{"X-Runtime", "Server"}, []string{"X-Powered-By"}},
		{"none", []string{}, nil, []string{"Server", "X-Powered-By", "X-Runtime"}},
	}
	for _, tc := range cases {
		e := startLimited(t, nil, func(c *config.Config) {
			if tc.hide != nil {
				c.Upstream.HideHeaders = tc.hide
			}
		})
		for _, p := range bothProtocols(t, e) {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				interim, res, body := askHinted(t, e, p.client, p.url, "", backend, backend)
				if res.StatusCode != http.StatusOK || len(interim) != 1 {
					t.Fatalf("%d %q after %d 1xx answers, want 200 after one 103", res.StatusCode, body, len(interim))
				}
				for what, h := range map[string]http.Header{"103": interim[0], "final answer": res.Header} {
					lacks(t, what, h, tc.hidden...)
					for _, k := range tc.passed {
						if h.Get(k) == "" {
							t.Errorf("%s without the backend's %s", what, k)
						}
					}
				}
			})
		}
	}
}

// TestHiddenBeforeRead: a field upstream.hide_headers names is gone from
// the backend's answer before anything reads it there, not only from
// what the client gets: the legacy rate-limit fields' merge never takes
// a hidden one's value (the backend's set, without it, is partial, and
// exgate's stand), and an order's answer is kept for replay without it,
// so no retry gets it either.
func TestHiddenBeforeRead(t *testing.T) {
	t.Run("legacy rate-limit fields", func(t *testing.T) {
		e := startLimited(t, nil, func(c *config.Config) {
			c.Limiter.Headers = config.HeadersLegacy
			c.Upstream.HideHeaders = []string{"X-RateLimit-Remaining"}
			c.Route("list_matches").Limits = []config.Limit{{Key: config.KeyAddress, Rate: config.Rate{N: 100, Period: time.Hour}}}
		})
		e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "10")
			w.Header().Set("X-RateLimit-Remaining", "3")
			w.Header().Set("X-RateLimit-Reset", "7")
			_, _ = io.WriteString(w, `{}`)
		}
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		want := map[string][]string{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}}
		for k, v := range want {
			if got := res.Header[k]; res.StatusCode != http.StatusOK || !slices.Equal(got, v) {
				t.Errorf("%d %s %q, want %q", res.StatusCode, k, got, v)
			}
		}
	})
	for _, m := range claimModes(t) {
		t.Run("an order's kept answer/"+m.name, func(t *testing.T) {
			var placed atomic.Int64
			e := startOrdersWith(t, negotiatingBackend(&placed), func(c *config.Config) {
				c.Upstream.HideHeaders = []string{"ETag"}
			}, m.lim, nil, m.idem)
			for i, name := range []string{"order", "retry"} {
				res := postOrder(t, e, bulkOrder(0, "hide"+m.name), "Accept", "application/json")
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				replayed := res.Header.Get(idempotency.ReplayedHeader) == "true"
				if res.StatusCode != http.StatusCreated || replayed != (i == 1) {
					t.Fatalf("%s: %d replayed %v", name, res.StatusCode, replayed)
				}
				if got := res.Header.Get("Etag"); got != "" {
					t.Errorf("%s's ETag %q, want none", name, got)
				}
				if got := res.Header.Get("Location"); got != "/api/v1/odr/orders/1/" {
					t.Errorf("%s's Location %q, want /api/v1/odr/orders/1/", name, got)
				}
			}
		})
	}
}
