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
		{"GET", "/api/v1/odr/orders/", "", "POST", ""},
		{"PUT", "/api/v1/odr/orders", "", "POST", ""},
		{"post", "/api/v1/odr/orders/", "", "POST", ""},
		{"GET", "/api/v1/mkt/markets/", "list_markets", "", "/api/v1/mkt/markets/"},
		{"HEAD", "/api/v1/mkt/markets/", "list_markets", "", "/api/v1/mkt/markets/"},
		{"POST", "/api/v1/mkt/markets/", "", "GET, HEAD", ""},
		{"GET", "/api/v1/mkt/currencies", "list_currencies", "", "/api/v1/mkt/currencies/"},
		{"GET", "/api/v1/mth/matches/BTC_USDT/", "list_matches", "", "/api/v1/mth/matches/BTC_USDT/"},
		{"GET", "/API/v1/mth/MATCHES/btc_usdt", "list_matches", "", "/api/v1/mth/matches/btc_usdt/"},
		{"DELETE", "/api/v1/mth/matches/BTC_USDT/", "", "GET, HEAD", ""},
		{"GET", "/api/v1/mth/matches/", "default", "", "/api/v1/mth/matches/"},
		{"GET", "/api/v1/mth/matches/A/B/", "default", "", "/api/v1/mth/matches/A/B/"},
		{"POST", "/api/v1/usr/authenticate/", "default", "", "/api/v1/usr/authenticate/"},
		{"POST", "/api/v1/odr/orders/extra/", "default", "", "/api/v1/odr/orders/extra/"},
		{"TRACE", "/anything", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
		{"CONNECT", "/", "", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r, allow := tab.match(tt.method, tt.path)
			got := ""
			if r != nil {
				got = r.Name
			}
			if got != tt.route || allow != tt.allow {
				t.Fatalf("match = %q, allow %q; want %q, allow %q", got, allow, tt.route, tt.allow)
			}
			if r != nil {
				if fwd := r.forwardPath(tt.path); fwd != tt.forward {
					t.Fatalf("forwardPath = %q, want %q", fwd, tt.forward)
				}
			}
		})
	}
}

func TestTableWithoutDefaultRoute(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = cfg.Routes[:len(cfg.Routes)-1]
	tab := compileTable(cfg)
	if r, allow := tab.match("GET", "/elsewhere"); r != nil || allow != "" {
		t.Fatalf("match = %v, %q; want no route (404)", r, allow)
	}
}

func TestTableAllowUnion(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = append([]config.Route{{
		Name: "cancel_order", Match: config.Match{Method: "DELETE", Path: "/api/v1/odr/orders/"},
	}}, cfg.Routes...)
	tab := compileTable(cfg)
	if _, allow := tab.match("PUT", "/api/v1/odr/orders/"); allow != "DELETE, POST" {
		t.Fatalf("allow = %q, want both methods of the path", allow)
	}
	if r, _ := tab.match("DELETE", "/api/v1/odr/orders/"); r == nil || r.Name != "cancel_order" {
		t.Fatalf("DELETE matched %v", r)
	}
}

func TestForwardPathNoAllocWhenSpelledAsRoute(t *testing.T) {
	tab := compileTable(config.Default())
	r, _ := tab.match("GET", "/api/v1/mth/matches/BTC_USDT/")
	if n := testing.AllocsPerRun(100, func() { _ = r.forwardPath("/api/v1/mth/matches/BTC_USDT/") }); n != 0 {
		t.Fatalf("forwardPath allocates %v times", n)
	}
}
