package proxy

import (
	"testing"

	"github.com/exgate/exgate/config"
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
		{"PUT", "/api/v1/odr/orders", "orders_other", "", "/api/v1/odr/orders"},
		{"OPTIONS", "/api/v1/odr/orders/", "orders_other", "", "/api/v1/odr/orders/"},
		{"post", "/api/v1/odr/orders/", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
		{"GET", "/api/v1/odr/orders/7/", "get_orders", "", "/api/v1/odr/orders/7/"},
		{"GET", "/api/v1/odr/orders/{7,8}/", "get_orders", "", "/api/v1/odr/orders/{7,8}/"},
		{"DELETE", "/api/v1/odr/orders/7", "cancel_order", "", "/api/v1/odr/orders/7/"},
		{"POST", "/api/v1/odr/orders/bulk/", "bulk_orders", "", "/api/v1/odr/orders/bulk/"},
		{"POST", "/api/v1/odr/orders/bulk.json", "bulk_orders", "", "/api/v1/odr/orders/bulk/"},
		{"PUT", "/api/v1/odr/orders/bulk/", "orders_other", "", "/api/v1/odr/orders/bulk/"},
		{"GET", "/api/v1/odr/fills/", "list_fills", "", "/api/v1/odr/fills/"},
		{"GET", "/API/v1/odr/anything/else/", "orders_other", "", "/api/v1/odr/anything/else/"},
		{"GET", "/api/v1/odr/", "orders_other", "", "/api/v1/odr/"},
		{"GET", "/api/v1/odr", "orders_other", "", "/api/v1/odr"},
		{"GET", "/api/v1/wlt/wallets", "list_wallets", "", "/api/v1/wlt/wallets/"},
		{"POST", "/api/v1/wlt/wallets/", "wallets_other", "", "/api/v1/wlt/wallets/"},
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
