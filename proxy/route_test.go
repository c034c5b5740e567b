package proxy

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
	"go.uber.org/zap"
)

func TestTableMatch(t *testing.T) {
	tab := compileTable(config.Default())
	tests := []struct {
		method, path string
		route        string // "" when no route
		allow        string
		forward      string
	}{
		{"POST", "/api/v1/odr/orders/", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/orders", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/API/V1/ODR/ORDERS/", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/Api/v1/Odr/Orders", "place_order", "", "/api/v1/odr/orders/"},
		// Format suffixes (DRF format_suffix_patterns) meet the bare path's route.
		{"POST", "/api/v1/odr/orders.json", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/orders.json/", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/orders.api", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/ORDERS.JSON", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/orders.x.json", "place_order", "", "/api/v1/odr/orders/"},
		{"POST", "/api/v1/odr/orders/.json", "place_order", "", "/api/v1/odr/orders/"},
		{"GET", "/api/v1/odr/orders/42.json", "get_orders", "", "/api/v1/odr/orders/42/"},
		{"DELETE", "/api/v1/odr/orders/42.json/", "cancel_order", "", "/api/v1/odr/orders/42/"},
		{"GET", "/api/v1/odr/orders.json", "list_orders", "", "/api/v1/odr/orders/"},
		{"GET", "/api/v1/mkt/markets.json", "list_markets", "", "/api/v1/mkt/markets/"},
		{"GET", "/static/app.js", "default", "", "/static/app.js"},
		// A method no route names on a path falls through the table.
		{"GET", "/api/v1/odr/orders/", "list_orders", "", "/api/v1/odr/orders/"},
		// ... and a write no route names under a private namespace meets
		// its refusing route: 405, Allow naming what the path serves.
		{"PUT", "/api/v1/odr/orders", "", "GET, HEAD, POST", "/api/v1/odr/orders"},
		{"OPTIONS", "/api/v1/odr/orders/", "", "GET, HEAD, POST", ""},
		{"DELETE", "/api/v1/odr/orders.json", "", "GET, HEAD, POST", ""},
		{"PATCH", "/api/v1/odr/orders/7/", "", "GET, HEAD, DELETE", ""},
		{"POST", "/api/v1/odr/orders/7/cancel.json", "", "GET, HEAD", ""},
		{"POST", "/api/v1/odr", "", "GET, HEAD", ""},
		{"post", "/api/v1/odr/orders/", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
		{"GET", "/api/v1/odr/orders/7/", "get_orders", "", "/api/v1/odr/orders/7/"},
		{"GET", "/api/v1/odr/orders/{7,8}/", "get_orders", "", "/api/v1/odr/orders/{7,8}/"},
		{"DELETE", "/api/v1/odr/orders/7", "cancel_order", "", "/api/v1/odr/orders/7/"},
		{"POST", "/api/v1/odr/orders/bulk/", "bulk_orders", "", "/api/v1/odr/orders/bulk/"},
		{"POST", "/api/v1/odr/orders/bulk.json", "bulk_orders", "", "/api/v1/odr/orders/bulk/"},
		{"PUT", "/api/v1/odr/orders/bulk/", "", "GET, HEAD, POST, DELETE", ""},
		{"GET", "/api/v1/odr/fills/", "list_fills", "", "/api/v1/odr/fills/"},
		{"GET", "/API/v1/odr/anything/else/", "orders_other", "", "/api/v1/odr/anything/else/"},
		{"GET", "/api/v1/odr/", "orders_other", "", "/api/v1/odr/"},
		{"GET", "/api/v1/odr", "orders_other", "", "/api/v1/odr"},
		{"GET", "/api/v1/wlt/wallets", "list_wallets", "", "/api/v1/wlt/wallets/"},
		{"POST", "/api/v1/wlt/wallets/", "", "GET, HEAD", ""},
		{"DELETE", "/api/v1/wlt", "", "GET, HEAD", ""},
		{"HEAD", "/api/v1/wlt/withdrawals/", "wallets_other", "", "/api/v1/wlt/withdrawals/"},
		{"GET", "/api/v1/mkt/markets/", "list_markets", "", "/api/v1/mkt/markets/"},
		{"HEAD", "/api/v1/mkt/markets/", "list_markets", "", "/api/v1/mkt/markets/"},
		{"POST", "/api/v1/mkt/markets/", "default", "", "/api/v1/mkt/markets/"},
		{"GET", "/api/v1/mkt/currencies", "list_currencies", "", "/api/v1/mkt/currencies/"},
		{"GET", "/api/v1/mkt/tickers/", "list_tickers", "", "/api/v1/mkt/tickers/"},
		{"GET", "/api/v1/mth/orderbook/BTC_USDT", "order_book", "", "/api/v1/mth/orderbook/BTC_USDT/"},
		{"GET", "/api/v1/mth/matches/BTC_USDT/", "list_matches", "", "/api/v1/mth/matches/BTC_USDT/"},
		{"GET", "/API/v1/mth/MATCHES/btc_usdt", "list_matches", "", "/api/v1/mth/matches/btc_usdt/"},
		{"DELETE", "/api/v1/mth/matches/BTC_USDT/", "default", "", "/api/v1/mth/matches/BTC_USDT/"},
		{"GET", "/api/v1/mth/matches/", "default", "", "/api/v1/mth/matches/"},
		{"GET", "/api/v1/mth/matches/A/B/", "default", "", "/api/v1/mth/matches/A/B/"},
		{"POST", "/api/v1/usr/authenticate/", "authenticate", "", "/api/v1/usr/authenticate/"},
		{"POST", "/api/v1/usr/refresh_token", "refresh_token", "", "/api/v1/usr/refresh_token/"},
		{"GET", "/api/v1/usr/authenticate/", "default", "", "/api/v1/usr/authenticate/"},
		{"TRACE", "/anything", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
		{"CONNECT", "/", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r, matched, allow := tab.match(tt.method, tt.path)
			got := ""
			if r != nil {
				got = r.Name
			}
			if got != tt.route || allow != tt.allow {
				t.Fatalf("match = %q, allow %q; want %q, allow %q", got, allow, tt.route, tt.allow)
			}
			if r != nil {
				if fwd := r.forwardPath(matched); fwd != tt.forward {
					t.Fatalf("forwardPath = %q, want %q", fwd, tt.forward)
				}
			}
		})
	}
}

func TestFormatless(t *testing.T) {
	tests := []struct {
		in, out string
		ok      bool
	}{
		{"/a/orders.json", "/a/orders", true},
		{"/a/orders.json/", "/a/orders", true},
		{"/a/orders.", "", false},
		{"/a/orders.j-s", "", false},
		{"/a/.json", "/a/", true},
		{"/a.b/orders", "", false},
		{"/", "", false},
		{"/x.y", "/x", true},
	}
	for _, tt := range tests {
		out, ok := formatless(tt.in)
		if out != tt.out || ok != tt.ok {
			t.Errorf("formatless(%q) = %q, %v; want %q, %v", tt.in, out, ok, tt.out, tt.ok)
		}
	}
}

func TestTableWithoutDefaultRoute(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = cfg.Routes[:len(cfg.Routes)-1]
	tab := compileTable(cfg)
	if r, _, allow := tab.match("GET", "/elsewhere"); r != nil || allow != "" {
		t.Fatalf("match = %v, %q; want no route (404)", r, allow)
	}
	// Without a default route, a method no route accepts is a 405 that
	// lists the methods of the path.
	if r, _, allow := tab.match("POST", "/api/v1/mkt/markets/"); r != nil || allow != "GET, HEAD" {
		t.Fatalf("match = %v, %q; want 405 with GET, HEAD", r, allow)
	}
}

func TestTableAllowUnion(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = []config.Route{
		{Name: "cancel", Match: config.Match{Method: "DELETE", Path: "/api/v1/odr/orders/"}},
		{Name: "place", Match: config.Match{Method: "POST", Path: "/api/v1/odr/orders/"}},
	}
	tab := compileTable(cfg)
	if _, _, allow := tab.match("PUT", "/api/v1/odr/orders/"); allow != "DELETE, POST" {
		t.Fatalf("allow = %q, want both methods of the path", allow)
	}
	if r, _, _ := tab.match("DELETE", "/api/v1/odr/orders/"); r == nil || r.Name != "cancel" {
		t.Fatalf("DELETE matched %v", r)
	}
}

func TestForwardPathNoAllocWhenSpelledAsRoute(t *testing.T) {
	tab := compileTable(config.Default())
	r, _, _ := tab.match("GET", "/api/v1/mth/matches/BTC_USDT/")
	if n := testing.AllocsPerRun(100, func() { _ = r.forwardPath("/api/v1/mth/matches/BTC_USDT/") }); n != 0 {
		t.Fatalf("forwardPath allocates %v times", n)
	}
}

// TestMethodNotAllowed: exgate answers 405 itself only for a method no
// route of the table accepts (not one of the methods routes match, with a
// default route that takes them all); its access-log line names the path.
func TestMethodNotAllowed(t *testing.T) {
	e := startEnv(t, nil)
	for _, tt := range []struct{ method, path string }{
		{"TRACE", "/api/v1/usr/authenticate/"},
		{"PROPFIND", "/api/v1/odr/orders/"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			n := e.backend.count()
			res := do(t, tt.method, e.url+tt.path, nil)
			if got, want := res.Header.Get("Allow"), "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"; got != want {
				t.Fatalf("Allow = %q, want %q", got, want)
			}
			er := assertError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
			if er.Detail != fmt.Sprintf("Method %q not allowed.", tt.method) {
				t.Fatalf("detail = %q", er.Detail)
			}
			if e.backend.count() != n {
				t.Fatal("reached the backend")
			}
			logs := e.logs.FilterMessage("request").FilterField(zap.Int("status", 405)).All()
			if len(logs) == 0 || logs[len(logs)-1].ContextMap()["path"] != tt.path {
				t.Fatalf("access log of the 405 does not name the path: %v", logs)
			}
		})
	}
}

// TestMethodsFallThroughToTheBackend: a method that no route names on a
// path goes to the route the table gives it, and the backend answers; a
// private namespace still wants a token first.
func TestMethodsFallThroughToTheBackend(t *testing.T) {
	e := startEnv(t, nil)
	tests := []struct {
		method, path, token string
		status              int
		code                string // exgate's refusal, or "" when the backend answers
		forwarded           string
	}{
		{"GET", "/api/v1/odr/orders/?state=active", "tok", 200, "", "/api/v1/odr/orders/?state=active"},
		{"GET", "/api/v1/odr/orders/", "", 401, "not_authenticated", ""},
		{"DELETE", "/api/v1/odr/orders/17", "tok", 200, "", "/api/v1/odr/orders/17/"},
		{"GET", "/api/v1/odr/orders/17,18/", "tok", 200, "", "/api/v1/odr/orders/17,18/"},
		{"GET", "/api/v1/odr/orders/17%2C18.json", "tok", 200, "", "/api/v1/odr/orders/17,18/"},
		{"GET", "/api/v1/odr/orders/%7B17,18%7D/", "tok", 400, "invalid_order", ""},
		{"DELETE", "/api/v1/odr/orders/bulk/", "tok", 503, "bulk_unavailable", ""}, // a bulk cancel, never cancel_order
		{"GET", "/api/v1/odr/orders/bulk/", "tok", 400, "invalid_order", ""},
		{"PUT", "/api/v1/odr/orders/", "", 405, "method_not_allowed", ""}, // a write no route checks
		{"PATCH", "/api/v1/wlt/wallets/", "tok", 405, "method_not_allowed", ""},
		{"GET", "/api/v1/wlt/deposits/", "", 401, "not_authenticated", ""},
		{"POST", "/api/v1/mkt/markets/", "", 200, "", "/api/v1/mkt/markets/"},
		{"OPTIONS", "/api/v1/mkt/markets/", "", 200, "", "/api/v1/mkt/markets/"},
		{"GET", "/api/v1/usr/authenticate/", "", 200, "", "/api/v1/usr/authenticate/"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			n := e.backend.count()
			req, _ := http.NewRequest(tt.method, e.url+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if tt.code != "" {
				assertError(t, res, tt.status, tt.code)
				if e.backend.count() != n {
					t.Fatal("an edge refusal reached the backend")
				}
				return
			}
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if got := e.backend.last(t); got.Method != tt.method || got.RequestURI != tt.forwarded {
				t.Fatalf("backend got %s %s, want %s %s", got.Method, got.RequestURI, tt.method, tt.forwarded)
			}
		})
	}
}

func TestNotFoundWithoutDefaultRoute(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Routes = c.Routes[:len(c.Routes)-1] })
	assertError(t, do(t, "GET", e.url+"/api/v1/elsewhere/", nil), http.StatusNotFound, "not_found")
	if e.backend.count() != 0 {
		t.Fatal("reached the backend")
	}
	// Backend 404s pass through unchanged on the default route.
	e2 := startEnv(t, nil)
	e2.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "backend 404")
	}
	res := do(t, "GET", e2.url+"/nope", nil)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || string(b) != "backend 404" {
		t.Fatalf("backend 404 changed: %d %q", res.StatusCode, b)
	}
}

// TestCoveredRoutesAreNeverMatched backs the configuration check that
// refuses a route an earlier one covers (config.Match.Covers): for each
// pair the check refuses, the table sends the later route's requests to
// the earlier one; for each pair it accepts, the later route gets some.
func TestCoveredRoutesAreNeverMatched(t *testing.T) {
	for _, tc := range []struct {
		first, later string
		method, path string // a request the later route matches
		laterReached bool
	}{
		{"/api/v1/odr/{rest...}", "POST /api/v1/odr/orders/", "POST", "/api/v1/odr/orders/", false},
		{"/a/{rest...}", "GET /a/", "GET", "/a/", false},
		{"GET /a/{id}/", "GET /a/b/", "GET", "/a/b/", false},
		{"GET /A/b/", "GET /a/B/", "GET", "/a/b/", false},
		{"/a/{x}/", "GET /a/{y}/", "GET", "/a/1/", false},
		{"GET /a/", "HEAD /a/", "HEAD", "/a/", false},
		{"GET /a/b/", "GET /a/{id}/", "GET", "/a/c/", true},
		{"POST /a/", "GET /a/", "GET", "/a/", true},
		{"HEAD /a/", "GET /a/", "GET", "/a/", true},
		{"GET /a/{x}/", "/a/{rest...}", "GET", "/a/", true},
		{"/a/{x}/{y}/", "/a/{x}/", "GET", "/a/1/", true},
	} {
		t.Run(tc.first+" then "+tc.later, func(t *testing.T) {
			var first, later config.Match
			if err := first.UnmarshalText([]byte(tc.first)); err != nil {
				t.Fatal(err)
			}
			if err := later.UnmarshalText([]byte(tc.later)); err != nil {
				t.Fatal(err)
			}
			if first.Covers(later) == tc.laterReached {
				t.Fatalf("Covers = %v, want %v", first.Covers(later), !tc.laterReached)
			}
			cfg := config.Default()
			cfg.Routes = []config.Route{{Name: "first", Match: first}, {Name: "later", Match: later}}
			tab := compileTable(cfg)
			r, _, _ := tab.match(tc.method, tc.path)
			if r == nil || (r.Name == "later") != tc.laterReached {
				t.Errorf("%s %s went to %v, want the later route reached: %v", tc.method, tc.path, r, tc.laterReached)
			}
		})
	}
}

// TestLiteralIndexMatchesTheScan: the index of literal paths finds, for
// every method and for every spelling of every route's path (literal
// segments, ids for parameters, case changed, with and without the
// trailing slash, one segment more or less), the route the scan of the
// whole table finds, in the default table and in one where a route with
// a parameter comes before a literal one it covers.
func TestLiteralIndexMatchesTheScan(t *testing.T) {
	cover := config.Default()
	cover.Routes = append([]config.Route{{Name: "any_market", Match: config.Match{Method: "GET", Path: "/api/v1/mkt/{what}/"}}}, cover.Routes...)
	for name, cfg := range map[string]*config.Config{"default": config.Default(), "covering route first": cover} {
		tb := compileTable(cfg)
		scan := &table{routes: tb.routes, def: tb.def}
		var paths []string
		for _, r := range tb.routes {
			var segs []string
			for _, s := range r.segs {
				switch {
				case s.rest:
					segs = append(segs, "a", "b")
				case s.param:
					segs = append(segs, "42")
				default:
					segs = append(segs, s.lit)
				}
			}
			p := "/" + strings.Join(segs, "/")
			paths = append(paths, p, p+"/", strings.ToUpper(p), p+"/x", path.Dir(p))
		}
		for _, p := range paths {
			for _, m := range anyMethods {
				n := segmentCount(p)
				if got, want := tb.find(m, p, n), scan.find(m, p, n); got != want {
					t.Errorf("%s: %s %s: index found %v, the scan %v", name, m, p, got, want)
				}
			}
		}
	}
}

// TestLiteralRouteForwardsItsSpelling: a route of literal segments only
// forwards the path compiled for it at load (spelling) for every
// spelling of its path it matches — as configured, in another case,
// without or with its trailing slash — the very path the segment by
// segment rewrite makes, without allocating.
func TestLiteralRouteForwardsItsSpelling(t *testing.T) {
	tab := compileTable(config.Default())
	n := 0
	for _, r := range tab.routes {
		if r.spelling == "" {
			continue
		}
		n++
		bare := strings.TrimSuffix(r.spelling, "/")
		for _, p := range []string{r.spelling, strings.ToUpper(r.spelling), bare, bare + "/", strings.ToUpper(bare)} {
			if p == "" || !r.matchPath(p) {
				continue
			}
			general := *r
			general.spelling = ""
			if got, want := r.forwardPath(p), general.forwardPath(p); got != want {
				t.Errorf("%s: %q forwarded as %q, want %q", r.Name, p, got, want)
			}
			if a := testing.AllocsPerRun(10, func() { _ = r.forwardPath(p) }); a != 0 {
				t.Errorf("%s: forwardPath(%q) allocates %v times", r.Name, p, a)
			}
		}
	}
	if n == 0 {
		t.Fatal("no route of literal segments in the built-in configuration")
	}
}
