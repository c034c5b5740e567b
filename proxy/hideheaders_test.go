package proxy

import (
	"net/http"
	"testing"

	"github.com/exgate/exgate/config"
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
