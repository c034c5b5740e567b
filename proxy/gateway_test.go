package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
)

// backend is a test backend that records what reaches it. It behaves like
// a lenient backend: it routes by the decoded, cleaned, lower-cased path,
// so a request that reaches "order handler" under any spelling is counted.
type backend struct {
	mu       sync.Mutex
	requests []recorded
	orders   atomic.Int64 // requests a lenient backend would route to its order handler
	handler  http.HandlerFunc
}

// drfOrderView is what a Django REST framework backend with
// format_suffix_patterns routes to its order view.
var drfOrderView = regexp.MustCompile(`^/api/v1/odr/orders(\.[a-z0-9]+)?$`)

type recorded struct {
	Method, RequestURI, Path string
	Header                   http.Header
	Body                     string
	ContentLength            int64
	TransferEncoding         []string
	BodyErr                  error // reading the body failed: the request came broken
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	b.mu.Lock()
	b.requests = append(b.requests, recorded{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Header: r.Header.Clone(),
		Body: string(body), ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding, BodyErr: err,
	})
	b.mu.Unlock()
	if drfOrderView.MatchString(path.Clean(strings.ToLower(r.URL.Path))) {
		b.orders.Add(1)
	}
	if b.handler != nil {
		b.handler(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.requests)
}

func (b *backend) last(t *testing.T) recorded {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.requests) == 0 {
		t.Fatal("backend received nothing")
	}
	return b.requests[len(b.requests)-1]
}

// env is a gateway on a real loopback socket in front of a backend.
type env struct {
	url     string
	addr    string
	gw      *Gateway
	backend *backend
	logs    *observer.ObservedLogs
}

// startEnv starts the backend and a gateway configured by cfg (defaults
// when nil) and mutated by mut.
func startEnv(t *testing.T, mut func(*config.Config)) *env {
	t.Helper()
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	if mut != nil {
		mut(cfg)
	}
	return serve(t, cfg, be, Options{})
}

// serve runs a gateway for cfg and opts (logging to an observer) on a
// real loopback socket in front of be, until the test ends.
func serve(t *testing.T, cfg *config.Config, be *backend, opts Options) *env {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	opts.Logger = zap.New(core)
	gw, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, gw, zap.NewNop(), nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gw.CloseIdleConnections()
	})
	return &env{url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), gw: gw, backend: be, logs: logs}
}

// errorBody is the one error shape.
type errorBody struct {
	Detail string              `json:"detail"`
	Code   string              `json:"code"`
	Fields map[string][]string `json:"fields"`
}

// assertError checks that res is exgate's JSON error with status and code.
func assertError(t *testing.T, res *http.Response, status int, code string) errorBody {
	t.Helper()
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	if res.Header.Get("X-Request-Id") == "" {
		t.Fatal("no X-Request-Id on an error")
	}
	var e errorBody
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s is not the error shape: %v", body, err)
	}
	if e.Code != code || e.Detail == "" {
		t.Fatalf("error = %+v, want code %q and a detail", e, code)
	}
	return e
}

func do(t *testing.T, method, url string, body io.Reader, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// rawRequest sends bytes as they are and reads one response.
func rawRequest(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", raw, err)
	}
	return res
}

func TestPassThrough(t *testing.T) {
	e := startEnv(t, nil)
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "yes")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, `{"detail":"backend says no","code":"backend_code"}`)
	}
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/?page=2&x=%20y", nil, "Accept-Encoding", "gzip")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTeapot || string(body) != `{"detail":"backend says no","code":"backend_code"}` ||
		res.Header.Get("X-Backend") != "yes" {
		t.Fatalf("backend answer changed: %d %s %v", res.StatusCode, body, res.Header)
	}
	got := e.backend.last(t)
	if got.RequestURI != "/api/v1/mkt/markets/?page=2&x=%20y" {
		t.Fatalf("backend got %q", got.RequestURI)
	}
	if got.Header.Get("Accept-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding not passed through: %q", got.Header.Get("Accept-Encoding"))
	}
	if id := res.Header.Get("X-Request-Id"); id == "" || id != got.Header.Get("X-Request-Id") {
		t.Fatalf("request id: response %q, backend %q", id, got.Header.Get("X-Request-Id"))
	}
}

func TestBodyForwardedByteForByte(t *testing.T) {
	e := startEnv(t, nil)
	body := "{\"symbol\":\"BTC_USDT\",  \"price\": 1.10e3 ,\"x\":\"\\u00e9\"}\n"
	res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body),
		"Authorization", "Bearer abc.abc.abc", "Content-Type", "application/json")
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	got := e.backend.last(t)
	if got.Body != body || got.Header.Get("Authorization") != "Bearer abc.abc.abc" {
		t.Fatalf("backend got body %q, auth %q", got.Body, got.Header.Get("Authorization"))
	}
}

func TestRequestID(t *testing.T) {
	e := startEnv(t, nil)
	tests := []struct {
		name, sent string
		kept       bool
	}{
		{"absent", "", false},
		{"valid", "abc-123_x.y:z", true},
		{"too long", strings.Repeat("a", 129), false},
		{"bad chars", "abc def", false},
		{"log injection", "a\"}{\"x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.sent != "" {
				h = []string{"X-Request-Id", tt.sent}
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, h...)
			res.Body.Close()
			id := res.Header.Get("X-Request-Id")
			if back := e.backend.last(t).Header.Get("X-Request-Id"); back != id {
				t.Fatalf("backend saw %q, client %q", back, id)
			}
			if tt.kept != (id == tt.sent) || !validRequestID(id) {
				t.Fatalf("id = %q (sent %q)", id, tt.sent)
			}
		})
	}
}

func TestAuthRequired(t *testing.T) {
	e := startEnv(t, nil)
	body := `{"symbol":"BTC_USDT"}`
	tests := []struct {
		name   string
		header []string
		code   string // "" means forwarded
	}{
		{"none", nil, "not_authenticated"},
		{"empty", []string{"Authorization", ""}, "authentication_failed"},
		{"basic", []string{"Authorization", "Basic ZGV2OmRldg=="}, "authentication_failed"},
		{"scheme only", []string{"Authorization", "Bearer"}, "authentication_failed"},
		{"scheme and space", []string{"Authorization", "Bearer "}, "authentication_failed"},
		{"two words", []string{"Authorization", "Bearer a b"}, "authentication_failed"},
		{"bad char", []string{"Authorization", "Bearer a\"b"}, "authentication_failed"},
		{"padding inside", []string{"Authorization", "Bearer a=b"}, "authentication_failed"},
		{"too long", []string{"Authorization", "Bearer " + strings.Repeat("a", maxTokenLen+1)}, "authentication_failed"},
		{"two headers", []string{"Authorization", "Bearer a", "Authorization", "Bearer b"}, "authentication_failed"},
		{"opaque token", []string{"Authorization", "Bearer sig-_~+/=="}, ""},
		{"jwt", []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.sig-_A"}, ""},
		{"jwt padded", []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.sig-_A=="}, "token_not_valid"},
		{"jwt standard alphabet", []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJ4IjoxfQ.sig+/A"}, "token_not_valid"},
		{"lower-case scheme", []string{"Authorization", "bearer tok"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.backend.orders.Load()
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body),
				append([]string{"Content-Type", "application/json"}, tt.header...)...)
			if tt.code == "" {
				res.Body.Close()
				if res.StatusCode != http.StatusOK || e.backend.orders.Load() != before+1 {
					t.Fatalf("status %d, forwarded %d", res.StatusCode, e.backend.orders.Load()-before)
				}
				return
			}
			assertError(t, res, http.StatusUnauthorized, tt.code)
			if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("WWW-Authenticate = %q", res.Header.Get("WWW-Authenticate"))
			}
			if n := e.backend.orders.Load() - before; n != 0 {
				t.Fatalf("a refused order reached the backend (%d)", n)
			}
		})
	}
}

func TestOptionalAuth(t *testing.T) {
	e := startEnv(t, nil)
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("anonymous markets: %d", res.StatusCode)
	}
	n := e.backend.count()
	assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", "Bearer a b"),
		http.StatusUnauthorized, "authentication_failed")
	if e.backend.count() != n {
		t.Fatal("a malformed Authorization header reached the backend")
	}
}

// TestOrderRouteCannotBeBypassed sends every spelling of the order path we
// could think of, byte for byte, without a token. Each must be refused by
// exgate (400, or 401 because it matched place_order), and none may reach
// a lenient backend's order handler. With a token, the spellings that are
// accepted reach the backend as exactly the route's canonical path.
func TestOrderRouteCannotBeBypassed(t *testing.T) {
	e := startEnv(t, nil)
	spellings := []string{
		"/api/v1/odr/orders/",
		"/api/v1/odr/orders",
		"//api/v1/odr/orders/",
		"/api//v1/odr/orders/",
		"/api/v1/odr/orders//",
		"/api/v1/odr/./orders/",
		"/./api/v1/odr/orders/",
		"/api/v1/mkt/../odr/orders/",
		"/api/v1/odr/orders/.",
		"/api/v1/odr/orders/x/..",
		"/api/v1/odr/orders/x/../",
		"/api/v1/odr/%6frders/",
		"/api/v1/odr/%6Frders/",
		"/%61pi/v1/odr/orders/",
		"/api/v1/odr/%2e/orders/",
		"/api/v1/odr/orders/%2e",
		"/api/v1/odr/orders/%2e%2e/orders/",
		"/api/v1/mkt/%2e%2e/odr/orders/",
		"/API/V1/ODR/ORDERS/",
		"/Api/v1/odr/Orders",
		"/api/v1/odr%2forders/",
		"/api/v1/odr%2Forders/",
		"/api/v1/odr%5corders/",
		"/api/v1/odr/orders%2f",
		"/api/v1/odr/orders%252f",
		"/api/v1/odr/%252e%252e/odr/orders/",
		"/api/v1/odr/orders;/",
		"/api/v1/odr/orders/;",
		"/api/v1/odr/orders;jsessionid=1/",
		"/api/v1/odr/orders%3b/",
		"/api/v1/odr/orders/..;/orders/",
		"/api/v1/odr/orders%00/",
		"/api/v1/odr/orders%20/",
		"/api/v1/odr/orders%09",
		"/api/v1/odr/orders/%0d%0a",
		"/api/v1/odr/orders\\",
		"/api/v1/odr/orders/%5c",
		"/api/v1/odr/orders/%c0%ae",
		"/api/v1/odr/orders/#x",
		"/api/v1/odr/orders/?a=b",
		"/api/v1/odr/orders?/",
		"http://other.example/api/v1/odr/orders/",
		"/api/v1/../../api/v1/odr/orders/",
		// DRF format suffixes (format_suffix_patterns), with and without
		// the trailing slash.
		"/api/v1/odr/orders.json",
		"/api/v1/odr/orders.json/",
		"/api/v1/odr/orders.api",
		"/api/v1/odr/orders.api/",
		"/api/v1/odr/orders.JSON",
		"/api/v1/odr/orders%2ejson",
		"/api/v1/odr/orders/.json",
		"/api/v1/odr/orders.x.json",
		"/API/V1/ODR/ORDERS.json/",
		"/api/v1/odr/./orders.json",
		"/api/v1/odr/orders.json;x",
		"/api/v1/odr/orders.json%2f",
	}
	for _, sp := range spellings {
		t.Run(sp, func(t *testing.T) {
			before := e.backend.orders.Load()
			raw := "POST " + sp + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
			res := rawRequest(t, e.addr, raw)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d (%s): want 400 or 401", res.StatusCode, body)
			}
			if n := e.backend.orders.Load() - before; n != 0 {
				t.Fatalf("spelling %q reached the order handler without a token", sp)
			}
			if res.StatusCode == http.StatusBadRequest && res.Header.Get("Content-Type") != "application/json" {
				// net/http refuses what it cannot parse before exgate sees it.
				t.Logf("refused by net/http: %s", body)
			}
			if res.StatusCode != http.StatusUnauthorized {
				return
			}
			// Accepted spelling: with a token it reaches the backend as the
			// canonical path.
			raw = strings.Replace(raw, "Host: x\r\n", "Host: x\r\nAuthorization: Bearer tok\r\n", 1)
			res = rawRequest(t, e.addr, raw)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("with a token: status %d", res.StatusCode)
			}
			got := e.backend.last(t)
			if p, _, _ := strings.Cut(got.RequestURI, "?"); p != "/api/v1/odr/orders/" {
				t.Fatalf("backend received %q, want the canonical path", got.RequestURI)
			}
		})
	}
}

// TestOrderRouteCannotBeBypassedByMethodOverride: no override header turns
// a request on another route into one the backend's order view runs.
func TestOrderRouteCannotBeBypassedByMethodOverride(t *testing.T) {
	e := startEnv(t, nil)
	for _, method := range []string{"GET", "PUT", "PATCH", "OPTIONS", "DELETE"} {
		for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
			for _, p := range []string{"/api/v1/odr/orders/", "/api/v1/odr/orders.json", "/api/v1/mkt/markets/"} {
				t.Run(method+" "+h+" "+p, func(t *testing.T) {
					raw := method + " " + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n" + h +
						": POST\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
					res := rawRequest(t, e.addr, raw)
					assertError(t, res, http.StatusBadRequest, "method_override")
					if e.backend.count() != 0 {
						t.Fatal("reached the backend")
					}
				})
			}
		}
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
		{"GET", "/api/v1/odr/orders/%7B17,18%7D/", "tok", 200, "", "/api/v1/odr/orders/%7B17,18%7D/"},
		{"PUT", "/api/v1/odr/orders/", "", 401, "not_authenticated", ""},
		{"PATCH", "/api/v1/wlt/wallets/", "", 401, "not_authenticated", ""},
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

// TestMethodOverrideHeadersRefused: a GET cannot become an unguarded POST
// behind exgate by asking the backend's framework to override its method.
func TestMethodOverrideHeadersRefused(t *testing.T) {
	e := startEnv(t, nil)
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "x-http-method-override"} {
		t.Run(h, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/api/v1/mkt/markets/", nil)
			req.Header[h] = []string{"POST"} // as sent, not canonicalised by Go
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			assertError(t, res, http.StatusBadRequest, "method_override")
			if e.backend.count() != 0 {
				t.Fatal("reached the backend")
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

func TestInvalidPath(t *testing.T) {
	e := startEnv(t, nil)
	for _, p := range []string{"/a%2fb", "/a/%zz", "/..", "/a;b", "/a%00"} {
		t.Run(p, func(t *testing.T) {
			res := rawRequest(t, e.addr, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if res.StatusCode == http.StatusBadRequest && res.Header.Get("Content-Type") != "application/json" {
				res.Body.Close()
				return // refused by net/http's request-line parser
			}
			assertError(t, res, http.StatusBadRequest, "invalid_path")
		})
	}
	if e.backend.count() != 0 {
		t.Fatal("an invalid path reached the backend")
	}
}

func TestBackendDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	e := startEnv(t, func(c *config.Config) { c.Upstream.URL = config.MustURL("http://" + dead) })
	assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil), http.StatusBadGateway, "bad_gateway")
}

func TestBackendSlow(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	e := startEnv(t, func(c *config.Config) {
		c.Route("list_markets").Timeout = 300 * time.Millisecond // list_markets
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	start := time.Now()
	assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil), http.StatusGatewayTimeout, "gateway_timeout")
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("504 after %v, want about the route timeout", d)
	}
}

func TestClientGoneLogged499(t *testing.T) {
	entered := make(chan struct{}, 1)
	e := startEnv(t, nil)
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/mkt/markets/", nil)
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	<-errc
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range e.logs.FilterMessage("request").All() {
			if l.ContextMap()["status"] == int64(StatusClientClosed) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no access log with status 499; logs: %v", e.logs.All())
}

func TestHeaderTooLarge(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.MaxHeaderBytes = 8 << 10 })
	// Over the limit: exgate's JSON 431.
	assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Big", strings.Repeat("a", 9<<10)),
		http.StatusRequestHeaderFieldsTooLarge, "request_header_too_large")
	// Far over: net/http refuses before exgate; still 431, never the backend.
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Big", strings.Repeat("a", 64<<10))
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d", res.StatusCode)
	}
	if e.backend.count() != 0 {
		t.Fatal("oversize headers reached the backend")
	}
}

func TestBodyTooLarge(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.MaxBodyBytes = 1 << 10 })
	big := strings.Repeat("x", 64<<10)
	// Declared length over the limit: refused before anything is sent.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", strings.NewReader(big)),
		http.StatusRequestEntityTooLarge, "request_too_large")
	if e.backend.count() != 0 {
		t.Fatal("a body of declared oversize length reached the backend")
	}
	// Chunked over the limit: streamed up to the limit, then the upstream
	// request is broken off, so the backend never gets a complete one.
	assertError(t, do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader(big))),
		http.StatusRequestEntityTooLarge, "request_too_large")
	deadline := time.Now().Add(5 * time.Second)
	for e.backend.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if e.backend.count() == 1 {
		if got := e.backend.last(t); got.BodyErr == nil || len(got.Body) > 1<<10 {
			t.Fatalf("the backend read %d bytes of an oversize body and then %v, want a broken request", len(got.Body), got.BodyErr)
		}
	}
	// Chunked under the limit: streamed whole.
	res := do(t, "POST", e.url+"/api/v1/usr/authenticate/", io.MultiReader(strings.NewReader("small")))
	res.Body.Close()
	got := e.backend.last(t)
	if res.StatusCode != http.StatusOK || got.Body != "small" || got.BodyErr != nil {
		t.Fatalf("status %d, backend got %q (%v)", res.StatusCode, got.Body, got.BodyErr)
	}
}

func TestForwardedHeaders(t *testing.T) {
	tests := []struct {
		name           string
		trusted        []string
		xff, proto     string
		wantXFF        string
		wantReal       string
		wantProto      string
		wantHostHeader string
	}{
		{"untrusted peer spoofing", nil, "1.2.3.4", "https", "127.0.0.1", "127.0.0.1", "http", ""},
		{"trusted peer", []string{"127.0.0.0/8"}, "1.2.3.4", "https", "1.2.3.4, 127.0.0.1", "1.2.3.4", "https", ""},
		{"trusted chain", []string{"127.0.0.1", "10.0.0.0/8"}, "9.9.9.9, 1.2.3.4, 10.0.0.7", "", "9.9.9.9, 1.2.3.4, 10.0.0.7, 127.0.0.1", "1.2.3.4", "http", ""},
		{"trusted garbage", []string{"127.0.0.0/8"}, "1.2.3.4, garbage", "gopher", "1.2.3.4, garbage, 127.0.0.1", "127.0.0.1", "http", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) {
				for _, s := range tt.trusted {
					var p config.Prefix
					if err := p.UnmarshalText([]byte(s)); err != nil {
						t.Fatal(err)
					}
					c.ClientIP.TrustedProxies = append(c.ClientIP.TrustedProxies, p)
				}
			})
			h := []string{"X-Forwarded-For", tt.xff, "X-Real-Ip", "6.6.6.6", "Forwarded", "for=6.6.6.6", "X-Forwarded-Host", "evil.example"}
			if tt.proto != "" {
				h = append(h, "X-Forwarded-Proto", tt.proto)
			}
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, h...)
			res.Body.Close()
			got := e.backend.last(t).Header
			if got.Get("X-Forwarded-For") != tt.wantXFF || got.Get("X-Real-Ip") != tt.wantReal ||
				got.Get("X-Forwarded-Proto") != tt.wantProto || got.Get("Forwarded") != "" ||
				got.Get("X-Forwarded-Host") != strings.TrimPrefix(e.url, "http://") {
				t.Fatalf("backend saw XFF %q, X-Real-Ip %q, proto %q, Forwarded %q, X-Forwarded-Host %q",
					got.Get("X-Forwarded-For"), got.Get("X-Real-Ip"), got.Get("X-Forwarded-Proto"), got.Get("Forwarded"), got.Get("X-Forwarded-Host"))
			}
		})
	}
}

func TestUpstreamBasePath(t *testing.T) {
	e := startEnv(t, nil)
	u := config.MustURL(e.gw.target.String() + "/prefix/")
	e2 := startEnv(t, func(c *config.Config) { c.Upstream.URL = u })
	e2.backend = e.backend // the first env's backend serves both
	res := do(t, "GET", e2.url+"/api/v1/mkt/markets/", nil)
	res.Body.Close()
	if got := e.backend.last(t).RequestURI; got != "/prefix/api/v1/mkt/markets/" {
		t.Fatalf("backend got %q", got)
	}
}

func TestAccessLog(t *testing.T) {
	e := startEnv(t, nil)
	res := do(t, "GET", e.url+"//api/v1/mth/matches/BTC_USDT", nil, "Authorization", "Bearer secret-token")
	res.Body.Close()
	logs := e.logs.FilterMessage("request").All()
	if len(logs) != 1 {
		t.Fatalf("%d access log lines", len(logs))
	}
	m := logs[0].ContextMap()
	if m["route"] != "list_matches" || m["path"] != "/api/v1/mth/matches/BTC_USDT/" || m["status"] != int64(200) ||
		m["method"] != "GET" || m["request_id"] != res.Header.Get("X-Request-Id") || m["upstream_status"] != int64(200) {
		t.Fatalf("access log %v", m)
	}
	if d, ok := m["upstream_duration"].(time.Duration); !ok || d <= 0 {
		t.Errorf("upstream_duration = %v", m["upstream_duration"])
	}
	// A backend error passes through; its status is the upstream status.
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }
	res = do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
	res.Body.Close()
	logs = e.logs.FilterMessage("request").All()
	if m := logs[len(logs)-1].ContextMap(); m["status"] != int64(503) || m["upstream_status"] != int64(503) {
		t.Errorf("access log of a backend 503: %v", m)
	}
	for k, v := range m {
		if strings.Contains(fmt.Sprint(v), "secret-token") {
			t.Fatalf("access log field %s carries the token", k)
		}
	}
}
