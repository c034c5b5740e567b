package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/topk"
)

// external finds a reference to another origin in HTML, CSS or a fetch.
var external = regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(["']?(https?:)?//|fetch\(["'](https?:)?//|@import`)

// TestConsoleAccess pins who may do what on the console: with a token,
// every /admin/ request needs it (the page itself holds no data); reset
// needs a configured token; a request must name exactly one subject; a
// prefix nobody was counted under is 404; the page and its assets carry
// the strict Content-Security-Policy and load nothing from elsewhere.
func TestConsoleAccess(t *testing.T) {
	k, _ := limiter.NewKeyer([]byte("console-secret-0123456789"))
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://127.0.0.1:1")
	gw, err := newGateway(cfg, enf)
	if err != nil {
		t.Fatal(err)
	}
	top := topk.NewTracker(topk.TrackerOptions{})
	// The gateway records an IPv6 client as its /64 (clientip.AddrGroup).
	top.Record(time.Now(), "list_matches", topk.Identity{}, clientip.AddrGroup(netip.MustParseAddr("2001:db8:1:2::9"), 64), true)
	withToken := httptest.NewServer(Handler(gw, Options{Token: "s3cret", Console: &ConsoleOptions{Top: top, Limits: enf}}))
	defer withToken.Close()
	open := httptest.NewServer(Handler(gw, Options{Console: &ConsoleOptions{Top: topk.NewTracker(topk.TrackerOptions{}), Limits: enf}}))
	defer open.Close()
	bearer := "Bearer s3cret"
	cases := []struct {
		name, method, path, auth string
		srv                      *httptest.Server
		status                   int
		code                     string // the error's code, or a string the body holds
	}{
		{"status without the token", "GET", "/admin/status", "", withToken, 401, "not_authenticated"},
		{"status with a wrong token", "GET", "/admin/status", "Bearer s3cre", withToken, 401, "not_authenticated"},
		{"status with the token", "GET", "/admin/status", bearer, withToken, 200, `"reset_enabled": true`},
		{"status, no token configured", "GET", "/admin/status", "", open, 200, `"reset_enabled": false`},
		{"top without the token", "GET", "/admin/top", "", withToken, 401, "not_authenticated"},
		{"inspect without the token", "GET", "/admin/inspect?address=192.0.2.1", "", withToken, 401, "not_authenticated"},
		{"inspect an address", "GET", "/admin/inspect?address=192.0.2.1", bearer, withToken, 200, `"remaining": 600`},
		{"inspect a NAT64 address: its IPv4 client", "GET", "/admin/inspect?address=64:ff9b::192.0.2.1", bearer, withToken, 200, `"id": "192.0.2.1"`},
		{"inspect a translated address: its IPv4 client", "GET", "/admin/inspect?address=::ffff:0:192.0.2.1", bearer, withToken, 200, `"id": "192.0.2.1"`},
		{"top lists an IPv6 client as its group", "GET", "/admin/top", bearer, withToken, 200, `"id": "2001:db8:1:2::/64"`},
		{"inspect the group the top lists write", "GET", "/admin/inspect?address=2001:db8:1:2::/64", bearer, withToken, 200, `"id": "2001:db8:1:2::"`},
		{"inspect a prefix of another length", "GET", "/admin/inspect?address=2001:db8:1::/48", bearer, withToken, 400, "invalid_subject"},
		{"inspect an IPv4 prefix", "GET", "/admin/inspect?address=192.0.2.0/24", bearer, withToken, 400, "invalid_subject"},
		{"inspect two subjects", "GET", "/admin/inspect?address=192.0.2.1&user=7", bearer, withToken, 400, "invalid_subject"},
		{"inspect nobody", "GET", "/admin/inspect", bearer, withToken, 400, "invalid_subject"},
		{"inspect a bad address", "GET", "/admin/inspect?address=192.0.2", bearer, withToken, 400, "invalid_subject"},
		{"inspect a short prefix", "GET", "/admin/inspect?token_id=0123", bearer, withToken, 400, "invalid_subject"},
		{"inspect an unseen prefix", "GET", "/admin/inspect?account=0123456789ab", bearer, withToken, 404, "unknown_subject"},
		{"inspect a user never echoes it", "GET", "/admin/inspect?user=alice-secret-id", bearer, withToken, 200, `"kind": "account"`},
		{"reset without a configured token", "POST", "/admin/reset?address=192.0.2.1", "", open, 403, "reset_disabled"},
		{"reset without the token", "POST", "/admin/reset?address=192.0.2.1", "", withToken, 401, "not_authenticated"},
		{"reset by GET", "GET", "/admin/reset?address=192.0.2.1", bearer, withToken, 405, `"code":"method_not_allowed"`},
		{"reset with the token", "POST", "/admin/reset?address=192.0.2.1", bearer, withToken, 200, `"cleared"`},
		{"the page needs no token", "GET", "/", "", withToken, 200, `<script src="/console/console.js"`},
		{"its script", "GET", "/console/console.js", "", withToken, 200, "textContent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.srv.URL+tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status || !strings.Contains(string(b), tc.code) {
				t.Fatalf("%d %s", res.StatusCode, b)
			}
			if strings.Contains(string(b), "alice-secret-id") || strings.Contains(string(b), "s3cret") {
				t.Errorf("the answer echoes a secret: %s", b)
			}
			if !strings.HasPrefix(tc.path, "/admin/") {
				csp := res.Header.Get("Content-Security-Policy")
				if !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "default-src 'none'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
				if m := external.FindString(string(b)); m != "" {
					t.Errorf("the page loads something from elsewhere: %s", m)
				}
			}
		})
	}
}
