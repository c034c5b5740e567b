package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// fuzzGateway is the whole pipeline — paths, routes, auth, limits,
// validation, duplicate protection — in front of an in-process backend
// that answers 201 to everything it receives.
func fuzzGateway(f testing.TB) *Gateway {
	f.Helper()
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	cfg.Route("list_markets").Limits[0].Rate = config.Rate{N: 50, Period: 1e9} // trip limits now and then
	cfg.Route("list_markets").Limits[0].Burst = 50
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	v := oneMarketValidator(f, cfg)
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	gw, err := newGateway(cfg, Options{
		Transport: backendEcho{}, Limits: enf, Validator: v,
		Idempotency: idempotency.NewMemory(idempotency.OptionsFrom(cfg.Idempotency)),
	})
	if err != nil {
		f.Fatal(err)
	}
	return gw
}

// backendEcho answers 201 with a marker header, after reading the body.
type backendEcho struct{}

func (backendEcho) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 201, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/json"}, "X-Backend": {"1"}},
		Body:    io.NopCloser(strings.NewReader(`{"ok":true}`)),
		Request: r, ContentLength: 11,
	}, nil
}

// gatewaySeeds are requests of every kind, as they come on the wire: GETs,
// orders (one with an identifier), bulks, refusals of the head, the path,
// the body, preflights.
var gatewaySeeds = []string{
	"GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET //api/./v1/mth/matches/BTC_USDT HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
	"POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 74\r\n\r\n" +
		`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}  `,
	"POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 96\r\n\r\n" +
		`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.00","base_amount":1e-3,"identifier":"x"}`,
	"POST /api/v1/odr/%6frders HTTP/1.1\r\nHost: x\r\nAuthorization: bearer  x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n0\r\n\r\n",
	"DELETE /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /api/v1/mkt/%2e%2e/%2fetc HTTP/1.1\r\nHost: x\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /api/v1/odr/orders/bulk.json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 79\r\n\r\n" +
		`[{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"},17]`,
	"POST /api/v1/odr/orders/bulk/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n[1,\"2\"]",
	"POST /api/v1/odr/orders/bulk/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\nContent-Length: 92\r\n\r\n" +
		`[{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"b1"}]`,
	"GET /api/v1/odr/orders/%7B1,2%7D/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n",
	"OPTIONS /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\nAccess-Control-Request-Method: POST\r\n\r\n",
	"GET /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: POST\r\n\r\n",
}

// FuzzGateway sends arbitrary requests (as net/http would parse them from
// the wire) through the whole pipeline: exgate never panics, never answers
// 500, and every answer it gives itself is a JSON error in the one shape
// with a request id.
func FuzzGateway(f *testing.F) {
	for _, s := range gatewaySeeds {
		f.Add([]byte(s))
	}
	gw := fuzzGateway(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http refuses it before exgate sees it
		}
		req.RemoteAddr = "192.0.2.1:1234"
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode == http.StatusInternalServerError {
			t.Fatalf("500 for %q: %s", raw, rec.Body.String())
		}
		if res.Header.Get("X-Request-Id") == "" {
			t.Fatalf("no X-Request-Id for %q", raw)
		}
		if res.Header.Get("X-Backend") != "" || res.Header.Get(idempotency.ReplayedHeader) != "" {
			return // the backend's answer (or its replay) passes through
		}
		if res.StatusCode < 400 {
			t.Fatalf("exgate answered %d itself for %q", res.StatusCode, raw)
		}
		var e struct {
			Detail string              `json:"detail"`
			Code   string              `json:"code"`
			Fields map[string][]string `json:"fields"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || e.Code == "" || e.Detail == "" || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("answer %d to %q is not the error shape: %v %+v", res.StatusCode, raw, err, e)
		}
	})
}

// orderPathSpellings are the spellings of the order path, byte for byte,
// that TestOrderRouteCannotBeBypassed sends.
var orderPathSpellings = []string{
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

// TestOrderRouteCannotBeBypassed sends every spelling of the order path we
// could think of, byte for byte, without a token. Each must be refused by
// exgate (400, or 401 because it matched place_order), and none may reach
// a lenient backend's order handler. With a token, the spellings that are
// accepted reach the backend as exactly the route's canonical path.
func TestOrderRouteCannotBeBypassed(t *testing.T) {
	e := startEnv(t, nil)
	for _, sp := range orderPathSpellings {
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
			if strings.Contains(sp, "?") {
				// An order route takes no query string (query.go).
				assertError(t, res, http.StatusBadRequest, "invalid_query")
				if n := e.backend.orders.Load() - before; n != 0 {
					t.Fatalf("spelling %q reached the order handler with a query", sp)
				}
				return
			}
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

func TestHeaderTooLarge(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Server.MaxHeaderBytes = 8 << 10 })
	// Over the limit: exgate's JSON 431, the HTTP/1.1 connection closed
	// after it; up to twice the limit net/http leaves the answer to exgate.
	for _, n := range []int{9 << 10, 15 << 10} {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "X-Big", strings.Repeat("a", n))
		if !res.Close {
			t.Errorf("%d bytes of headers: the connection is kept after the 431", n)
		}
		assertError(t, res, http.StatusRequestHeaderFieldsTooLarge, "request_header_too_large")
	}
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

// TestRefuseClosesWhileBodyUnread: a refused request whose body of
// unknown length (chunked) is still unread is answered with Connection:
// close, so that the client cannot make exgate read the rest of it; one
// whose body was read whole (an order or bulk refused after its checks)
// or has a known length keeps its connection for the next request.
func TestRefuseClosesWhileBodyUnread(t *testing.T) {
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) {
		l := &c.Route("place_order").Limits[0]
		l.Rate, l.Burst = config.Rate{N: 1, Period: time.Minute}, 1
	})
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"100.00","base_amount":"0.5"}`
	chunked := func(body string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body) }
	head := func(path, token, contentType string) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " + contentType + "\r\n"
		if token != "" {
			h += "Authorization: Bearer " + token + "\r\n"
		}
		return h
	}
	const orders, bulk = "/api/v1/odr/orders/", "/api/v1/odr/orders/bulk/"
	spent := head(orders, "tok-spent", "application/json") + "Content-Length: " + strconv.Itoa(len(order)) + "\r\n\r\n" + order
	for _, tc := range []struct {
		name   string
		before string // sent and answered first on a connection of its own
		raw    string
		status int
		closed bool
	}{
		{name: "no token, chunked", raw: head(orders, "", "application/json") + "Transfer-Encoding: chunked\r\n\r\n" + chunked(order),
			status: http.StatusUnauthorized, closed: true},
		{name: "not JSON, chunked", raw: head(orders, "tok-ct", "text/plain") + "Transfer-Encoding: chunked\r\n\r\n" + chunked(order),
			status: http.StatusUnsupportedMediaType, closed: true},
		// An order is read and checked before its limits are decided
		// (limitAndCheck): over its limit, it is refused read whole.
		{name: "over its limit, chunked, read whole", before: spent,
			raw:    head(orders, "tok-spent", "application/json") + "Transfer-Encoding: chunked\r\n\r\n" + chunked(order),
			status: http.StatusTooManyRequests, closed: false},
		{name: "order over validation.max_body_bytes, chunked", raw: head(orders, "tok-big", "application/json") +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked(strings.Repeat(" ", 9<<10)),
			status: http.StatusRequestEntityTooLarge, closed: true},
		{name: "invalid order, chunked, read whole", raw: head(orders, "tok-invalid", "application/json") +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked(`{"symbol":"BTC_USDT"}`),
			status: http.StatusBadRequest, closed: false},
		{name: "bulk over its limit's burst, chunked, read whole", raw: head(bulk, "tok-bulk", "application/json") +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked("["+order+","+order+"]"),
			status: http.StatusRequestEntityTooLarge, closed: false},
		{name: "no token, known length", raw: head(orders, "", "application/json") + "Content-Length: " + strconv.Itoa(len(order)) + "\r\n\r\n" + order,
			status: http.StatusUnauthorized, closed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != "" {
				if res := rawExchange(t, e.addr, tc.before); res.StatusCode != http.StatusCreated {
					t.Fatalf("first request: %d", res.StatusCode)
				}
			}
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			go func() { _, _ = io.WriteString(c, tc.raw) }()
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			if res.StatusCode != tc.status || res.Close != tc.closed {
				t.Fatalf("answer %d, Connection: close %v; want %d, %v", res.StatusCode, res.Close, tc.status, tc.closed)
			}
			if tc.closed {
				return
			}
			_, _ = io.WriteString(c, "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, err := http.ReadResponse(br, nil); err != nil {
				t.Fatalf("the connection kept after the refusal does not answer the next request: %v", err)
			}
		})
	}
}

// rawExchange sends raw on a connection of its own and reads the answer.
func rawExchange(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res
}

// TestRequestStateZeroAfterEachRequest: the state a request leaves in the
// pool is zero after each of gatewaySeeds' requests, sent twice (an order's
// identifier claimed, then replayed), through a gateway with limits and
// duplicate protection, through one with neither, whose state finish
// clears but for those two parts and the trace's (Gateway.clear), and
// through one that traces every request: nothing of a request is left for
// the next one to read.
func TestRequestStateZeroAfterEachRequest(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	plain, err := newGateway(cfg, Options{Transport: backendEcho{}, Validator: oneMarketValidator(t, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	traced, err := newGateway(cfg, Options{Transport: backendEcho{}, Validator: oneMarketValidator(t, cfg),
		Tracer: newSpans(t, sdktrace.AlwaysSample()).tracer()})
	if err != nil {
		t.Fatal(err)
	}
	for _, gw := range []struct {
		name string
		gw   *Gateway
	}{{"limits and duplicate protection", fuzzGateway(t)}, {"neither", plain}, {"traced", traced}} {
		t.Run(gw.name, func(t *testing.T) {
			for i := range 2 * len(gatewaySeeds) {
				raw := gatewaySeeds[i%len(gatewaySeeds)]
				req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
				if err != nil {
					t.Fatal(err)
				}
				req.RemoteAddr = "192.0.2.1:1234"
				gw.gw.ServeHTTP(httptest.NewRecorder(), req)
				st := gw.gw.pool.Get().(*requestState) // the state the request put back, unless the pool dropped it
				left := *st
				left.proxy, left.gotConn = nil, nil // the state's own, kept (newState)
				if !reflect.ValueOf(left).IsZero() {
					t.Errorf("%q left its state not zero: %+v", raw, left)
				}
				gw.gw.pool.Put(st)
			}
		})
	}
}
