package sim

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestMarkets(t *testing.T) {
	h := newHarness(t, Options{}, true)
	r := h.do(t, http.MethodGet, "/api/v1/mkt/markets/", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	markets := r.array(t)
	bySymbol := make(map[string]map[string]any)
	for _, m := range markets {
		checkFields(t, m, map[string]string{
			"symbol": "string", "name": "string", "base": "string", "quote": "string",
			"tradable": "bool", "price_precision": "string",
			"base_amount_precision": "string", "quote_amount_precision": "string",
		})
		sym, _ := m["symbol"].(string)
		bySymbol[sym] = m
		if want := m["base"].(string) + "_" + m["quote"].(string); sym != want {
			t.Errorf("symbol %q, want %q", sym, want)
		}
		if name, _ := m["name"].(string); strings.Count(name, "/") != 1 {
			t.Errorf("%s: name %q not shaped Base/Quote", sym, name)
		}
		for _, f := range []string{"price_precision", "base_amount_precision", "quote_amount_precision"} {
			if _, err := strconv.Atoi(m[f].(string)); err != nil {
				t.Errorf("%s: %s = %q is not an integer string", sym, f, m[f])
			}
		}
	}
	if got := len(h.sim.Markets()); got != len(markets) {
		t.Errorf("Markets() has %d markets, endpoint %d", got, len(markets))
	}

	tests := []struct {
		symbol, name           string
		tradable               bool
		price, base, quotePrec string
	}{
		{"BTC_USDT", "Bitcoin/Tether", true, "2", "6", "2"},
		{"ETH_USDT", "Ethereum/Tether", true, "2", "4", "2"},
		{"BTC_IRT", "Bitcoin/Toman", true, "0", "8", "0"},
		{"USDT_IRT", "Tether/Toman", true, "0", "2", "0"},
		{"ETH_BTC", "Ethereum/Bitcoin", true, "6", "4", "8"},
		{"LUNC_USDT", "Terra Classic/Tether", false, "8", "2", "4"},
	}
	for _, tt := range tests {
		t.Run(tt.symbol, func(t *testing.T) {
			m, ok := bySymbol[tt.symbol]
			if !ok {
				t.Fatalf("market %s missing", tt.symbol)
			}
			if m["name"] != tt.name || m["tradable"] != tt.tradable || m["price_precision"] != tt.price ||
				m["base_amount_precision"] != tt.base || m["quote_amount_precision"] != tt.quotePrec {
				t.Errorf("got %v", m)
			}
		})
	}
}

func TestCurrencies(t *testing.T) {
	h := newHarness(t, Options{}, false)
	r := h.do(t, http.MethodGet, "/api/v1/mkt/currencies/", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	codes := make(map[string]bool)
	for _, c := range r.array(t) {
		checkFields(t, c, map[string]string{"currency": "string", "name": "string", "tradable": "bool", "precision": "string"})
		if _, err := strconv.Atoi(c["precision"].(string)); err != nil {
			t.Errorf("precision %q is not an integer string", c["precision"])
		}
		codes[c["currency"].(string)] = true
	}
	for _, m := range h.sim.Markets() {
		for _, code := range []string{m.Base, m.Quote} {
			if !codes[code] {
				t.Errorf("currency %s of market %s not listed", code, m.Symbol)
			}
		}
	}
}

func TestMatchesEndpoint(t *testing.T) {
	h := newHarness(t, Options{}, true)
	h.place(t, map[string]any{"symbol": "BTC_USDT", "type": "market", "side": "buy", "base_amount": "0.001"})
	tests := []struct {
		name   string
		path   string
		status int
		count  int
	}{
		{"after a fill", "/api/v1/mth/matches/BTC_USDT/", http.StatusOK, 1},
		{"no trades yet", "/api/v1/mth/matches/ETH_USDT/", http.StatusOK, 0},
		{"non-tradable", "/api/v1/mth/matches/LUNC_USDT/", http.StatusOK, 0},
		{"unknown symbol", "/api/v1/mth/matches/DOGE_USDT/", http.StatusNotFound, -1},
		{"no trailing slash", "/api/v1/mth/matches/BTC_USDT", http.StatusNotFound, -1},
		{"nested", "/api/v1/mth/matches/BTC_USDT/x/", http.StatusNotFound, -1},
		{"empty symbol", "/api/v1/mth/matches//", http.StatusNotFound, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, http.MethodGet, tt.path, "", nil)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.count < 0 {
				if got := r.object(t); len(got) != 1 || got["detail"] != "Not found." {
					t.Errorf("body %s", r.raw)
				}
				return
			}
			matches := r.array(t)
			if len(matches) != tt.count {
				t.Fatalf("%d matches, want %d: %s", len(matches), tt.count, r.raw)
			}
			for _, m := range matches {
				checkFields(t, m, map[string]string{"id": "string", "price": "string", "base_amount": "string", "quote_amount": "string", "side": "string"})
				if !matchIDRE.MatchString(m["id"].(string)) {
					t.Errorf("id %q not shaped <int>_<int>", m["id"])
				}
				for _, f := range []string{"price", "base_amount", "quote_amount"} {
					if !decimalRE.MatchString(m[f].(string)) {
						t.Errorf("%s %q is not a decimal", f, m[f])
					}
				}
				if m["side"] != "buy" && m["side"] != "sell" {
					t.Errorf("side %q", m["side"])
				}
			}
		})
	}
}

func TestRouting(t *testing.T) {
	h := newHarness(t, Options{}, false)
	tests := []struct {
		name        string
		method      string
		path        string
		body        any
		status      int
		allow       string
		wantDetail  string
		contentType string
	}{
		{"unknown path", "GET", "/api/v1/nope/", nil, 404, "", "Not found.", ""},
		{"root", "GET", "/", nil, 404, "", "Not found.", ""},
		{"markets without slash", "GET", "/api/v1/mkt/markets", nil, 404, "", "Not found.", ""},
		{"PUT markets", "PUT", "/api/v1/mkt/markets/", nil, 405, "GET, HEAD", `Method "PUT" not allowed.`, ""},
		{"POST currencies", "POST", "/api/v1/mkt/currencies/", "{}", 405, "GET, HEAD", `Method "POST" not allowed.`, ""},
		{"DELETE matches", "DELETE", "/api/v1/mth/matches/BTC_USDT/", nil, 405, "GET, HEAD", `Method "DELETE" not allowed.`, ""},
		{"PUT orders", "PUT", "/api/v1/odr/orders/", nil, 405, "GET, HEAD, POST", `Method "PUT" not allowed.`, ""},
		{"POST fills", "POST", "/api/v1/odr/fills/", nil, 405, "GET, HEAD", `Method "POST" not allowed.`, ""},
		{"PUT order", "PUT", "/api/v1/odr/orders/7/", nil, 405, "DELETE, GET, HEAD", `Method "PUT" not allowed.`, ""},
		{"GET authenticate", "GET", "/api/v1/usr/authenticate/", nil, 405, "POST", `Method "GET" not allowed.`, ""},
		{"PUT refresh", "PUT", "/api/v1/usr/refresh_token/", "{}", 405, "POST", `Method "PUT" not allowed.`, ""},
		{"HEAD markets", "HEAD", "/api/v1/mkt/markets/", nil, 200, "", "", ""},
		{"body too large", "POST", "/api/v1/usr/authenticate/", `{"api_key":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, 413, "", "Request body too large.", ""},
		{"not JSON", "POST", "/api/v1/usr/authenticate/", `{"api_key":`, 400, "", "", ""},
		{"trailing data", "POST", "/api/v1/usr/authenticate/", `{} {}`, 400, "", "", ""},
		{"wrong content type", "POST", "/api/v1/usr/authenticate/", `{}`, 415, "", "", "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.contentType != "" {
				hdr.Set("Content-Type", tt.contentType)
			}
			r := h.request(t, tt.method, tt.path, hdr, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if got := r.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			if tt.wantDetail != "" {
				if got := r.object(t)["detail"]; got != tt.wantDetail {
					t.Errorf("detail %q, want %q", got, tt.wantDetail)
				}
			}
		})
	}
}

func TestRequestIDEchoed(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	for _, tc := range []struct{ name, sent string }{{"sent", "req-42"}, {"absent", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/mkt/markets/", nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-Id", tc.sent)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if got := res.Header.Get("X-Request-Id"); got != tc.sent {
				t.Errorf("X-Request-Id = %q, want %q", got, tc.sent)
			}
		})
	}
}
