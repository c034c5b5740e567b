package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/sim"
)

// counted wraps the reference backend and counts the requests that reach
// its order endpoint.
type counted struct {
	h       http.Handler
	orders  atomic.Int64
	all     atomic.Int64
	proxied atomic.Int64 // forwarded by a gateway (not its own catalogue fetches)
	options atomic.Int64 // OPTIONS requests (CORS preflights)
	held    atomic.Int64 // requests being held (holdQuery)
	// release ends the hold of every held request when closed; a nil
	// channel holds them until their clients leave.
	release chan struct{}
}

// holdQuery is a query parameter that makes counted hold a request
// until release is closed: a request under way at the backend for as long
// as a test needs it.
const holdQuery = "exgate_test_hold"

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.all.Add(1)
	if r.Header.Get("X-Forwarded-For") != "" {
		c.proxied.Add(1)
	}
	if r.URL.Path == "/api/v1/odr/orders/" {
		c.orders.Add(1)
	}
	if r.Method == http.MethodOptions {
		c.options.Add(1)
	}
	if r.URL.Query().Has(holdQuery) {
		c.held.Add(1)
		select {
		case <-c.release:
		case <-r.Context().Done():
		}
		c.held.Add(-1)
	}
	c.h.ServeHTTP(w, r)
}

// stack is exgate in front of the reference backend, both on loopback.
type stack struct {
	url     string
	backend *counted
	sim     *sim.Server
	app     *app
	bs      *httptest.Server
}

// backendClose stops the backend, as a crash would.
func (s *stack) backendClose() {
	s.bs.CloseClientConnections()
	s.bs.Close()
}

// startApp starts the gateway of cfg with d and shuts it down when the
// test ends.
func startApp(t *testing.T, cfg *config.Config, d deps) *app {
	t.Helper()
	a, err := start(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.shutdown() })
	return a
}

func startStack(t *testing.T, mut func(*config.Config)) *stack {
	t.Helper()
	return startStackEnv(t, mut, nil)
}

// startStackEnv is startStack with the gateway's environment read through
// getenv (nil: none).
func startStackEnv(t *testing.T, mut func(*config.Config), getenv func(string) (string, bool)) *stack {
	t.Helper()
	return startStackDeps(t, mut, deps{getenv: getenv})
}

// startStackDeps is startStack with the gateway's dependencies d (a nil
// log or clock: none and the wall clock, as the process runs).
func startStackDeps(t *testing.T, mut func(*config.Config), d deps) *stack {
	t.Helper()
	if d.log == nil {
		d.log = zap.NewNop()
	}
	s := sim.New(sim.Options{})
	c := &counted{h: s, release: make(chan struct{})}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	if mut != nil {
		mut(cfg)
	}
	a := startApp(t, cfg, d)
	t.Cleanup(func() { close(c.release) }) // before the gateway shuts down
	waitCatalogue(t, a)
	return &stack{url: "http://" + a.addr, backend: c, sim: s, app: a, bs: bs}
}

// waitCatalogue waits until the gateway has loaded the market catalogue,
// as a load balancer waits for /readyz.
func waitCatalogue(t *testing.T, a *app) {
	t.Helper()
	if a.cat == nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); !a.cat.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("market catalogue not loaded within 10s")
		}
	}
}

func call(t *testing.T, method, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// fieldKinds asserts that obj has exactly the given fields with the given
// JSON kinds: "string", "bool", "number", "null", or "string|null".
func fieldKinds(t *testing.T, what string, obj map[string]any, want map[string]string) {
	t.Helper()
	for k := range obj {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected field %q", what, k)
		}
	}
	for k, kind := range want {
		v, ok := obj[k]
		if !ok {
			t.Errorf("%s: missing field %q", what, k)
			continue
		}
		got := "null"
		switch v.(type) {
		case string:
			got = "string"
		case bool:
			got = "bool"
		case json.Number, float64:
			got = "number"
		}
		if !strings.Contains(kind, got) {
			t.Errorf("%s: field %q is %s (%v), want %s", what, k, got, v, kind)
		}
	}
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

var (
	decimalRe   = regexp.MustCompile(`^-?\d+(\.\d+)?$`)
	intStringRe = regexp.MustCompile(`^\d+$`)
	createdAtRe = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d$`)
	matchIDRe   = regexp.MustCompile(`^\d+_\d+$`)
)

func authenticate(t *testing.T, base string) string {
	t.Helper()
	code, _, b := call(t, "POST", base+"/api/v1/usr/authenticate/", `{"api_key":"dev","secret_key":"dev"}`,
		"Content-Type", "application/json")
	if code != http.StatusOK {
		t.Fatalf("authenticate: %d %s", code, b)
	}
	var tok struct{ Access, Refresh string }
	decodeJSON(t, b, &tok)
	if strings.Count(tok.Access, ".") != 2 || strings.Count(tok.Refresh, ".") != 2 {
		t.Fatalf("tokens are not JWTs: %s", b)
	}
	return tok.Access
}

// TestEndpointsThroughGateway checks every endpoint of the spec, through
// exgate, for the spec's fields and formats.
func TestEndpointsThroughGateway(t *testing.T) {
	st := startStack(t, nil)
	token := authenticate(t, st.url)

	t.Run("markets", func(t *testing.T) { checkMarketsEndpoint(t, st) })

	t.Run("currencies", func(t *testing.T) {
		// Also with a token: optional auth only changes limits.
		code, _, b := call(t, "GET", st.url+"/api/v1/mkt/currencies/", "", "Authorization", "Bearer "+token)
		var cs []map[string]any
		decodeJSON(t, b, &cs)
		if code != 200 || len(cs) < 4 {
			t.Fatalf("%d, %d currencies", code, len(cs))
		}
		for _, c := range cs {
			fieldKinds(t, "currency", c, map[string]string{
				"currency": "string", "name": "string", "tradable": "bool", "precision": "string",
			})
		}
	})

	t.Run("limit order", func(t *testing.T) { checkLimitOrderEndpoint(t, st, token) })

	t.Run("market order and matches", func(t *testing.T) {
		code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/",
			`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"e2e-1"}`,
			"Authorization", "Bearer "+token, "Content-Type", "application/json")
		if code != http.StatusCreated {
			t.Fatalf("%d %s", code, b)
		}
		var o map[string]any
		decodeJSON(t, b, &o)
		if _, ok := o["id"].(json.Number); !ok || o["identifier"] != "e2e-1" {
			t.Fatalf("market order: %v", o)
		}
		code, _, b = call(t, "GET", st.url+"/api/v1/mth/matches/BTC_USDT/", "")
		var ms []map[string]any
		decodeJSON(t, b, &ms)
		if code != 200 || len(ms) == 0 {
			t.Fatalf("%d, %d matches after a filled market order", code, len(ms))
		}
		for _, m := range ms {
			fieldKinds(t, "match", m, map[string]string{
				"id": "string", "price": "string", "base_amount": "string", "quote_amount": "string", "side": "string",
			})
			if !matchIDRe.MatchString(m["id"].(string)) || !decimalRe.MatchString(m["price"].(string)) {
				t.Fatalf("match %v", m)
			}
		}
		if ms[0]["side"] != "buy" {
			t.Fatalf("newest match side %v, want the taker's (buy)", ms[0]["side"])
		}
	})
}

// checkMarketsEndpoint checks the markets the gateway st lists: the spec's
// fields and formats, and the reference markets all there.
func checkMarketsEndpoint(t *testing.T, st *stack) {
	code, _, b := call(t, "GET", st.url+"/api/v1/mkt/markets/", "")
	var ms []map[string]any
	decodeJSON(t, b, &ms)
	if code != 200 || len(ms) < 5 {
		t.Fatalf("%d, %d markets", code, len(ms))
	}
	symbols := map[string]bool{}
	for _, m := range ms {
		fieldKinds(t, "market", m, map[string]string{
			"symbol": "string", "name": "string", "base": "string", "quote": "string", "tradable": "bool",
			"price_precision": "string", "base_amount_precision": "string", "quote_amount_precision": "string",
		})
		sym, _ := m["symbol"].(string)
		symbols[sym] = true
		if sym != m["base"].(string)+"_"+m["quote"].(string) || !strings.Contains(m["name"].(string), "/") {
			t.Errorf("market %v: symbol/name shape", m)
		}
		for _, k := range []string{"price_precision", "base_amount_precision", "quote_amount_precision"} {
			if !intStringRe.MatchString(m[k].(string)) {
				t.Errorf("market %s: %s = %v", sym, k, m[k])
			}
		}
	}
	for _, s := range []string{"BTC_USDT", "ETH_USDT", "BTC_IRT", "USDT_IRT", "ETH_BTC"} {
		if !symbols[s] {
			t.Errorf("market %s missing", s)
		}
	}
}

// checkLimitOrderEndpoint places a limit order through the gateway st as
// token's client and checks the answer's fields and amounts.
func checkLimitOrderEndpoint(t *testing.T, st *stack, token string) {
	code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/",
		`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000.50","base_amount":0.002}`,
		"Authorization", "Bearer "+token, "Content-Type", "application/json")
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	var o map[string]any
	decodeJSON(t, b, &o)
	fieldKinds(t, "limit order", o, map[string]string{
		"symbol": "string", "type": "string", "side": "string", "price": "string", "stop_price": "null",
		"oco_target_price": "null", "base_amount": "string", "quote_amount": "string", "identifier": "null",
		"state": "string", "created_at": "string", "closed_at": "null", "dealed_base_amount": "string",
		"dealed_quote_amount": "string", "req_to_cancel": "bool", "commission": "string",
	})
	if o["state"] != "active" || o["req_to_cancel"] != false || !createdAtRe.MatchString(o["created_at"].(string)) {
		t.Fatalf("order %v", o)
	}
	price, _ := decimal.NewFromString(o["price"].(string))
	base, _ := decimal.NewFromString(o["base_amount"].(string))
	quote, _ := decimal.NewFromString(o["quote_amount"].(string))
	if !price.Mul(base).Equal(quote) {
		t.Fatalf("quote_amount %s != price %s × base_amount %s", quote, price, base)
	}
	for _, k := range []string{"dealed_base_amount", "dealed_quote_amount"} {
		if d, _ := decimal.NewFromString(o[k].(string)); !d.IsZero() || !decimalRe.MatchString(o[k].(string)) {
			t.Fatalf("%s = %v on a new order", k, o[k])
		}
	}
}

// TestRefusedOrdersNeverReachBackend counts at the reference backend.
func TestRefusedOrdersNeverReachBackend(t *testing.T) {
	st := startStack(t, nil)
	body := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"0.001"}`
	refused := []struct {
		name   string
		method string
		path   string
		header []string
		status int
	}{
		{"no token", "POST", "/api/v1/odr/orders/", nil, 401},
		{"basic auth", "POST", "/api/v1/odr/orders/", []string{"Authorization", "Basic ZGV2OmRldg=="}, 401},
		{"malformed bearer", "POST", "/api/v1/odr/orders/", []string{"Authorization", "Bearer a b"}, 401},
		{"no token, other spelling", "POST", "//api/v1/odr/./orders", nil, 401},
		{"encoded slash", "POST", "/api/v1/odr%2Forders/", []string{"Authorization", "Bearer x"}, 400},
		{"format suffix, no token", "POST", "/api/v1/odr/orders.json", nil, 401},
		{"method override", "PUT", "/api/v1/odr/orders/", []string{"Authorization", "Bearer x", "X-HTTP-Method-Override", "POST"}, 400},
		{"unknown method", "PROPFIND", "/api/v1/odr/orders/", []string{"Authorization", "Bearer x"}, 405},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			code, h, b := call(t, tt.method, st.url+tt.path, body, append([]string{"Content-Type", "application/json"}, tt.header...)...)
			var e struct{ Detail, Code string }
			decodeJSON(t, b, &e)
			if code != tt.status || e.Code == "" || e.Detail == "" || h.Get("X-Request-Id") == "" {
				t.Fatalf("%d %s", code, b)
			}
		})
	}
	if n := st.backend.orders.Load(); n != 0 {
		t.Fatalf("%d refused orders reached the backend", n)
	}
	// A canonical but invalid token passes exgate (it holds no signing
	// key); the backend's own 401 passes through unchanged.
	code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/", body,
		"Authorization", "Bearer bm90.YQ.and0", "Content-Type", "application/json")
	var e struct{ Detail, Code string }
	decodeJSON(t, b, &e)
	if code != 401 || e.Code != "token_not_valid" || st.backend.orders.Load() != 1 {
		t.Fatalf("%d %s (backend saw %d)", code, b, st.backend.orders.Load())
	}
}

func TestAdminEndpoints(t *testing.T) {
	st := startStack(t, nil)
	admin := "http://" + st.app.adminAd
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, b := call(t, "GET", admin+p, ""); code != 200 {
			t.Fatalf("%s: %d %s", p, code, b)
		}
	}
	st.app.gw.SetDraining()
	if code, _, _ := call(t, "GET", admin+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining: %d", code)
	}
	if code, _, _ := call(t, "GET", admin+"/healthz", ""); code != 200 {
		t.Fatalf("healthz while draining: %d", code)
	}
}

// TestDrainBeforeClose: on shutdown /readyz turns 503 at once while the
// listener keeps serving for server.drain_delay, then it closes.
func TestDrainBeforeClose(t *testing.T) {
	s := sim.New(sim.Options{})
	bs := httptest.NewServer(s)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 400 * time.Millisecond
	a, err := start(cfg, deps{log: zap.NewNop(), now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.shutdown() }()
	time.Sleep(100 * time.Millisecond)
	if code, _, _ := call(t, "GET", "http://"+a.adminAd+"/readyz", ""); code != 503 {
		t.Errorf("readyz while draining: %d, want 503", code)
	}
	if code, _, _ := call(t, "GET", "http://"+a.addr+"/api/v1/mkt/currencies/", ""); code != 200 {
		t.Errorf("traffic during the drain delay: %d, want 200", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + a.addr + "/api/v1/mkt/currencies/"); err == nil {
		t.Error("the listener still accepts after shutdown")
	}
}
