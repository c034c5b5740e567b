package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/edge"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/upstream"
)

// backend is a test backend that records what reaches it. It behaves like
// a lenient backend: it routes by the decoded, cleaned, lower-cased path,
// so a request that reaches "order handler" under any spelling is counted.
type backend struct {
	mu       sync.Mutex
	requests []recorded
	orders   atomic.Int64 // requests a lenient backend would route to its order handler
	handler  http.HandlerFunc
	arrived  chan<- string // when set, gets each request's path as it arrives, before its body is read
}

// drfOrderView is what a Django REST framework backend with
// format_suffix_patterns routes to its order view.
var drfOrderView = regexp.MustCompile(`^/api/v1/odr/orders(\.[a-z0-9]+)?$`)

type recorded struct {
	Method, RequestURI, Path string
	Host                     string
	Header                   http.Header
	Body                     string
	ContentLength            int64
	TransferEncoding         []string
	BodyErr                  error // reading the body failed: the request came broken
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.arrived != nil {
		b.arrived <- r.URL.Path
	}
	body, err := io.ReadAll(r.Body)
	b.mu.Lock()
	b.requests = append(b.requests, recorded{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Host: r.Host, Header: r.Header.Clone(),
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

// all returns what the backend received, in order.
func (b *backend) all() []recorded {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]recorded(nil), b.requests...)
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
	return serveLogged(t, cfg, be, opts, logs)
}

// serveLogged is serve with the loggers of opts, which write to logs.
func serveLogged(t *testing.T, cfg *config.Config, be *backend, opts Options, logs *observer.ObservedLogs) *env {
	t.Helper()
	gw, err := newGateway(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := edge.NewServer(cfg, gw, zap.NewNop(), nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		// Shutdown counts a connection that has sent no request as active
		// for its first 5 s: close the test clients' spare connections
		// (dialed by http.DefaultClient while others were busy, then
		// never used) so that it does not wait them out.
		http.DefaultClient.CloseIdleConnections()
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

func TestBackendDown(t *testing.T) {
	dead := unreachable.Refused(t)
	e := startEnv(t, func(c *config.Config) { c.Upstream.URL = config.MustURL("http://" + dead) })
	// Nothing of the request reached a backend: exgate says the service
	// is unavailable, and when to try again.
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	if res.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", res.Header.Get("Retry-After"))
	}
	assertError(t, res, http.StatusServiceUnavailable, "upstream_unavailable")
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
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("504 after %v, before the route timeout", d)
	}
}

// hangUpOnEntered sends req, whose context cancel ends, and hangs up once
// the backend says on entered that it holds the request; it returns what
// the client's Do returned.
func hangUpOnEntered(req *http.Request, cancel context.CancelFunc, entered <-chan struct{}) error {
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
	return <-errc
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
	_ = hangUpOnEntered(req, cancel, entered)
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
				got.Get("X-Forwarded-Host") != "" { // the client's dropped; none of exgate's without forward_hosts
				t.Fatalf("backend saw XFF %q, X-Real-Ip %q, proto %q, Forwarded %q, X-Forwarded-Host %q",
					got.Get("X-Forwarded-For"), got.Get("X-Real-Ip"), got.Get("X-Forwarded-Proto"), got.Get("Forwarded"), got.Get("X-Forwarded-Host"))
			}
		})
	}
}

// TestBackendHost: the backend gets the Host the client sent when it is
// one of upstream.forward_hosts (the name it builds its absolute links
// from: a Location, DRF's pagination), whatever its case, port or final
// dot, or any with "*"; another Host, or none (HTTP/1.0), goes as the
// instance's address, as it always did before forward_hosts. On main
// every backend got the instance's address, and handed it to clients.
// X-Forwarded-Host names the client's Host exactly when the backend gets
// it as Host, and is absent otherwise: on main it carried any Host the
// client chose, and a backend that builds its links from it (Django's
// USE_X_FORWARDED_HOST, Rails, Express behind "trust proxy") built them
// from that name, the Host poisoning forward_hosts keeps from Host.
func TestBackendHost(t *testing.T) {
	api := []string{"api.exchange.example", "192.0.2.7", "2001:db8::1"}
	tests := []struct {
		name  string
		hosts []string // upstream.forward_hosts
		raw   string   // the request sent, %s its path
		want  string   // the Host the backend gets; "instance": the instance's host:port
	}{
		{"a name", api, "GET %s HTTP/1.1\r\nHost: api.exchange.example\r\n\r\n", "api.exchange.example"},
		{"a name and port", api, "GET %s HTTP/1.1\r\nHost: api.exchange.example:8443\r\n\r\n", "api.exchange.example:8443"},
		{"another case, a final dot", api, "GET %s HTTP/1.1\r\nHost: API.Exchange.Example.\r\n\r\n", "API.Exchange.Example."},
		{"an address", api, "GET %s HTTP/1.1\r\nHost: 192.0.2.7:8080\r\n\r\n", "192.0.2.7:8080"},
		{"an IPv6 address", api, "GET %s HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", "[2001:db8::1]:443"},
		{"absolute form", api, "GET http://api.exchange.example%s HTTP/1.1\r\nHost: other.example\r\n\r\n", "api.exchange.example"},
		{"a name not listed", api, "GET %s HTTP/1.1\r\nHost: evil.example\r\n\r\n", "instance"},
		{"a name the listed one ends", api, "GET %s HTTP/1.1\r\nHost: evil-api.exchange.example\r\n\r\n", "instance"},
		{"a name under the listed one", api, "GET %s HTTP/1.1\r\nHost: x.api.exchange.example\r\n\r\n", "instance"},
		{"a listed name, a port that is not digits", api, "GET %s HTTP/1.1\r\nHost: api.exchange.example:.evil.example\r\n\r\n", "instance"},
		{"a listed name, a port of letters", api, "GET %s HTTP/1.1\r\nHost: api.exchange.example:evil\r\n\r\n", "instance"},
		{"a listed name in brackets", api, "GET %s HTTP/1.1\r\nHost: [api.exchange.example]\r\n\r\n", "instance"},
		{"a listed IPv6 address, more after it", api, "GET %s HTTP/1.1\r\nHost: [2001:db8::1].evil.example\r\n\r\n", "instance"},
		{"any, with *", []string{"*"}, "GET %s HTTP/1.1\r\nHost: anything.example\r\n\r\n", "anything.example"},
		{"HTTP/1.0 without Host", []string{"*"}, "GET %s HTTP/1.0\r\n\r\n", "instance"},
		{"none listed (the default)", nil, "GET %s HTTP/1.1\r\nHost: api.exchange.example\r\n\r\n", "instance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t, func(c *config.Config) { c.Upstream.ForwardHosts = tt.hosts })
			res := rawRequest(t, e.addr, fmt.Sprintf(tt.raw, "/api/v1/mkt/markets/"))
			res.Body.Close()
			want := tt.want
			if want == "instance" {
				want = e.gw.fleet.Service("").Instances()[0].URL.Host
			}
			got := e.backend.last(t)
			if res.StatusCode != http.StatusOK || got.Host != want {
				t.Errorf("%d; the backend got Host %q, want %q", res.StatusCode, got.Host, want)
			}
			wantXFH := ""
			if tt.want != "instance" {
				wantXFH = tt.want
			}
			if xfh := strings.Join(got.Header["X-Forwarded-Host"], ", "); xfh != wantXFH {
				t.Errorf("the backend got X-Forwarded-Host %q, want %q", xfh, wantXFH)
			}
		})
	}
	g := &Gateway{forwardHosts: api}
	if n := testing.AllocsPerRun(100, func() { g.forwardsHost("API.exchange.example:443") }); n != 0 {
		t.Errorf("forwardsHost allocates %v times", n)
	}
}

// TestUserAgentForwarded checks that the backend receives the client's
// User-Agent as sent, and none (not Go's own) when the client sent none:
// rewrite sets what ReverseProxy would, in a shared value.
func TestUserAgentForwarded(t *testing.T) {
	tests := []struct {
		name, sent string
		want       []string
	}{
		{"none", "", nil},
		{"the client's", "curl/8.5.0", []string{"curl/8.5.0"}},
	}
	e := startEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the shared value is the same on the next request
				res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "User-Agent", tt.sent)
				res.Body.Close()
				if got := e.backend.last(t).Header["User-Agent"]; !slices.Equal(got, tt.want) {
					t.Fatalf("backend saw User-Agent %q, want %q", got, tt.want)
				}
			}
		})
	}
	if noUserAgent[0] != "" {
		t.Fatalf("the shared empty User-Agent became %q", noUserAgent[0])
	}
}

func TestUpstreamBasePath(t *testing.T) {
	e := startEnv(t, nil)
	u := config.MustURL(e.gw.fleet.Service("").Instances()[0].URL.String() + "/prefix/")
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

func TestAccessLogNeverHoldsTheToken(t *testing.T) {
	e := startLimited(t, nil, nil)
	const token = "eyJhbGciOiJIUzI1NiJ9.very-secret-token"
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", "Bearer "+token)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	entries := e.logs.FilterMessage("request").All()
	if len(entries) != 1 {
		t.Fatalf("%d access log lines", len(entries))
	}
	f := entries[0].ContextMap()
	if f["token_id"] != k.ID(token)[:12] || f["limit"] != "token" || f["limit_decision"] != "allowed" || f["client"] != "127.0.0.1" {
		t.Errorf("access log fields %v", f)
	}
	for k, v := range f {
		if strings.Contains(fmt.Sprint(v), "very-secret") {
			t.Errorf("access log field %s holds the token: %v", k, v)
		}
	}
}

// TestAccessLogEvidenceNotSampled: with log sampling keeping one line of
// a message an hour, the access log still has a line for every order,
// every cancel and every refusal (exgate's or the backend's); the other
// requests' lines are sampled.
func TestAccessLogEvidenceNotSampled(t *testing.T) {
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	core, logs := observer.New(zap.InfoLevel)
	e := serveLogged(t, cfg, be, Options{
		Logger:   zap.New(zapcore.NewSamplerWithOptions(core, time.Hour, 1, 0)),
		Evidence: zap.New(core),
	}, logs)
	const n = 10
	send := func(method, path string, header ...string) {
		for range n {
			var body io.Reader = strings.NewReader(`{}`)
			if method == "DELETE" {
				body = nil // a cancel by id takes no body
			}
			res := do(t, method, e.url+path, body, header...)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	token := []string{"Authorization", "Bearer opaque-token-1"}
	send("GET", "/api/v1/mkt/markets/")                // sampled
	send("GET", "/api/v1/odr/fills/", token...)        // sampled
	send("GET", "/api/v1/odr/orders/", token...)       // sampled: a status read
	send("POST", "/api/v1/odr/orders/")                // 401: a refusal, and an order
	send("POST", "/api/v1/odr/orders/", token...)      // orders
	send("DELETE", "/api/v1/odr/orders/17/", token...) // cancels
	send("POST", "/api/v1/odr/orders/bulk/", token...) // a bulk (refused: no validator)
	send("GET", "/api/v1/mkt%2Fmarkets/")              // refused path
	be.handler = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }
	send("GET", "/api/v1/mkt/currencies/") // the backend's refusal

	count := map[string]int{}
	for _, l := range logs.FilterMessage("request").All() {
		f := l.ContextMap()
		count[fmt.Sprint(f["route"], " ", f["status"])]++
	}
	want := map[string]int{
		"place_order 401": n, "place_order 200": n, "cancel_order 200": n, "bulk_orders 503": n,
		"default 400": n, "list_currencies 404": n,
	}
	sampled := count["list_markets 200"] + count["list_fills 200"] + count["list_orders 200"]
	delete(count, "list_markets 200")
	delete(count, "list_fills 200")
	delete(count, "list_orders 200")
	if !maps.Equal(count, want) || sampled != 1 {
		t.Errorf("access log lines %v and %d of the other requests', want %v and 1", count, sampled, want)
	}
}

// TestAccessLogNamesTheClient: a line says the request's protocol and
// user agent — cut at 256 bytes, and never with the request's token,
// should the client have put it there — and why a 401 refused its
// credentials.
func TestAccessLogNamesTheClient(t *testing.T) {
	e := startEnv(t, nil)
	const token = "Zm9yZ2VkLXNlY3JldC10b2tlbg"
	for _, tc := range []struct {
		name     string
		header   []string
		ua, fail string
	}{
		{"no credentials", nil, "curl/8.14.1", "no_credentials"},
		{"another scheme", []string{"Authorization", "Basic " + token}, "python-requests/2.32", "not_bearer"},
		{"a malformed token", []string{"Authorization", "Bearer a b"}, "ccxt/4.2", "malformed_token"},
		{"a non-canonical JWT", []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln="}, "bot/1", "noncanonical"},
		{"the token in the user agent", []string{"Authorization", "Bearer " + token}, "bot/1 (" + token + ")", ""},
		{"a long user agent", []string{"Authorization", "Bearer " + token}, strings.Repeat("u", 1000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := do(t, "GET", e.url+"/api/v1/odr/fills/", nil, append([]string{"User-Agent", tc.ua}, tc.header...)...)
			res.Body.Close()
			lines := e.logs.FilterMessage("request").All()
			f := lines[len(lines)-1].ContextMap()
			wantUA := strings.ReplaceAll(tc.ua, token, "[token]")
			if len(wantUA) > 256 {
				wantUA = wantUA[:256] + "…"
			}
			if f["protocol"] != "HTTP/1.1" || f["user_agent"] != wantUA || f["auth_failure"] != nil && f["auth_failure"] != tc.fail ||
				tc.fail != "" && f["auth_failure"] != tc.fail {
				t.Errorf("access log %v", f)
			}
			for k, v := range f {
				if strings.Contains(fmt.Sprint(v), token) {
					t.Errorf("access log field %s holds the token: %v", k, v)
				}
			}
		})
	}
	// Two Authorization headers.
	res := rawRequest(t, e.addr, "GET /api/v1/odr/fills/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n")
	res.Body.Close()
	lines := e.logs.FilterMessage("request").All()
	if f := lines[len(lines)-1].ContextMap(); f["auth_failure"] != "repeated_header" || f["user_agent"] != nil {
		t.Errorf("access log of two Authorization headers: %v", f)
	}
}

// newGateway is New with the dependencies a test leaves nil built from
// cfg as the composition root builds them (cmd/exgate): the backend
// Transport of upstream, a Fleet of cfg's static lists (which need no
// Run) on the gateway's clock, and cfg's limits without token tiers.
func newGateway(cfg *config.Config, opts Options) (*Gateway, error) {
	if opts.Fleet == nil {
		if s, _ := cfg.Upstream.Service(config.DefaultService); len(s.URLs) == 0 {
			return nil, errors.New("proxy: upstream.url is not set")
		}
		now := opts.Now
		if now == nil {
			now = time.Now
		}
		oo := upstream.OverloadOptions(cfg.Overload)
		oo.Now = now
		opts.Fleet = upstream.NewFleet(cfg.Upstream, upstream.FleetOptions{Now: now, Overload: oo})
	}
	if opts.Transport == nil {
		opts.Transport = upstream.NewTransport(cfg.Upstream)
	}
	if opts.Rules == nil {
		opts.Rules = limiter.Compile(cfg, nil)
	}
	return New(cfg, opts)
}

// TestNewRefusesMissingDependencies: New builds none of the dependencies
// the composition root wires; a caller that forgets one is refused.
func TestNewRefusesMissingDependencies(t *testing.T) {
	cfg := config.Default()
	all := Options{Transport: upstream.NewTransport(cfg.Upstream), Fleet: upstream.NewFleet(cfg.Upstream, upstream.FleetOptions{}),
		Rules: limiter.Compile(cfg, nil)}
	for _, tc := range []struct {
		name    string
		without func(*Options)
		want    string
	}{
		{"transport", func(o *Options) { o.Transport = nil }, "Options.Transport is nil"},
		{"fleet", func(o *Options) { o.Fleet = nil }, "Options.Fleet is nil"},
		{"rules", func(o *Options) { o.Rules = nil }, "Options.Rules is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := all
			tc.without(&opts)
			if _, err := New(cfg, opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New without its %s: %v, want an error saying %q", tc.name, err, tc.want)
			}
		})
	}
	if _, err := New(cfg, all); err != nil {
		t.Errorf("New with every dependency: %v", err)
	}
}
