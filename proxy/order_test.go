package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
)

// startOrders is a gateway with order validation (a fixed catalogue) and
// duplicate protection (memory store) in front of a recording backend.
func startOrders(t *testing.T, handler http.HandlerFunc) *env {
	t.Helper()
	return startOrdersConfig(t, handler, nil, nil)
}

// startOrdersConfig is startOrders with the store's options changed by
// set and the configuration by mut (either may be nil).
func startOrdersConfig(t *testing.T, handler http.HandlerFunc, set func(*idempotency.Options), mut func(*config.Config)) *env {
	t.Helper()
	return startOrdersStore(t, handler, set, mut, ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil)
}

// startOrdersStore is startOrdersConfig with the rate-limit store and the
// metrics (nil for none) given.
func startOrdersStore(t *testing.T, handler http.HandlerFunc, set func(*idempotency.Options), mut func(*config.Config),
	store ratelimit.Store, m *metrics.Metrics) *env {
	t.Helper()
	return startOrdersWith(t, handler, mut, store, m, func(o idempotency.Options) idempotency.Store {
		if set != nil {
			set(&o)
		}
		return idempotency.NewMemory(o)
	})
}

// startOrdersWith is startOrdersStore with duplicate protection's store
// made by idem from the configuration's options, and the gateway's
// options changed by each of extra.
func startOrdersWith(t *testing.T, handler http.HandlerFunc, mut func(*config.Config), store ratelimit.Store,
	m *metrics.Metrics, idem func(idempotency.Options) idempotency.Store, extra ...func(*Options)) *env {
	t.Helper()
	be := &backend{handler: handler}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Route("place_order").Timeout = time.Second
	if mut != nil {
		mut(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	v := oneMarketValidator(t, cfg)
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	enf, _ := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
	opts := Options{Limits: enf, Validator: v, Idempotency: idem(idempotency.OptionsFrom(cfg.Idempotency)), Metrics: m}
	for _, f := range extra {
		f(&opts)
	}
	return serve(t, cfg, be, opts)
}

func postOrder(t *testing.T, e *env, body string, header ...string) *http.Response {
	t.Helper()
	h := append([]string{"Authorization", "Bearer tok", "Content-Type", "application/json"}, header...)
	return do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body), h...)
}

func placed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":1,"state":"active"}`)
}

// TestValidOrderForwardedCanonically: the backend receives the order
// exgate validated, re-encoded (known fields, decimals as exact strings,
// application/json, its own length), never the client's bytes.
func TestValidOrderForwardedCanonically(t *testing.T) {
	e := startOrders(t, placed)
	tests := []struct {
		name   string
		body   string
		header []string
		want   string
	}{
		{"odd but valid: white space, exponents, key order, numbers",
			" {\n \"base_amount\" : 1e-3 ,\"side\":\"buy\",\t\"symbol\":\"BTC_USDT\",\"type\":\"limit\",\"price\":6.5E4 }\n", nil,
			`{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001","price":"65000"}`},
		{"a number a float cannot hold",
			`{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.000001","price":99999999999999999.99}`, nil,
			`{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.000001","price":"99999999999999999.99"}`},
		{"escapes decoded, nulls dropped, charset parameter dropped",
			`{"symbol":"BTC\u005fUSDT","type":"market","side":"s\u0065ll","base_amount":"0.5","price":null,"identifier":"\u0061b"}`,
			[]string{"Content-Type", "Application/JSON; charset=UTF-8", "Content-Encoding", "identity",
				// Headers that describe the client's bytes, not the canonical body.
				"Content-Md5", "XrY7u+Ae7tCTyyK7j1rNww==", "Digest", "sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=",
				"Content-Digest", "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:", "Repr-Digest", "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:",
				"Content-Range", "bytes 0-9/10"},
			`{"symbol":"BTC_USDT","type":"market","side":"sell","base_amount":"0.5","identifier":"ab"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := append([]string{"Authorization", "Bearer tok"}, tt.header...)
			if len(tt.header) == 0 {
				h = append(h, "Content-Type", "application/json")
			}
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(tt.body), h...)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 201 {
				t.Fatalf("status %d", res.StatusCode)
			}
			got := e.backend.last(t)
			if got.Body != tt.want || got.ContentLength != int64(len(tt.want)) {
				t.Errorf("backend got %q (length %d), want %q", got.Body, got.ContentLength, tt.want)
			}
			if ct := got.Header["Content-Type"]; len(ct) != 1 || ct[0] != "application/json" {
				t.Errorf("backend got Content-Type %q", ct)
			}
			if cl := got.Header.Get("Content-Length"); cl != strconv.Itoa(len(tt.want)) {
				t.Errorf("backend got Content-Length %q", cl)
			}
			for _, k := range []string{"Content-Encoding", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Content-Range"} {
				if v := got.Header[k]; v != nil {
					t.Errorf("backend got %s %q with the canonical body", k, v)
				}
			}
		})
	}
	// A chunked body is forwarded canonically, with its length.
	raw := "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"symbol\":\"BTC_U\r\n3c\r\nSDT\",\"type\":\"market\",\"side\":\"buy\",\"base_amount\":\"0.5\"}      \r\n0\r\n\r\n"
	res := rawRequest(t, e.addr, raw)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("chunked: %d", res.StatusCode)
	}
	got := e.backend.last(t)
	want := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	if got.Body != want || len(got.TransferEncoding) != 0 || got.ContentLength != int64(len(want)) {
		t.Errorf("chunked body forwarded as %q %v %d", got.Body, got.TransferEncoding, got.ContentLength)
	}
}

// TestTwoSpellingsOfOneOrderAreOneOrder: duplicate protection compares
// canonical encodings, so a retry spelled differently is replayed, and a
// different order under the same identifier is still refused.
// TestBodyDescribingHeaderAloneDropped sends orders with one header
// describing the client's bytes each: the head's scan finds each alone
// (isBodyDescribing), and the backend, sent the canonical body, gets none
// of them; the order's other headers are forwarded.
func TestBodyDescribingHeaderAloneDropped(t *testing.T) {
	e := startOrders(t, placed)
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	for _, k := range bodyDescribing {
		t.Run(k, func(t *testing.T) {
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body),
				"Authorization", "Bearer tok", "Content-Type", "application/json", k, "identity", "X-Client-Tag", "t1")
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 201 {
				t.Fatalf("status %d", res.StatusCode)
			}
			got := e.backend.last(t)
			if v := got.Header[k]; v != nil {
				t.Errorf("backend got %s %q with the canonical body", k, v)
			}
			if v := got.Header.Get("X-Client-Tag"); v != "t1" {
				t.Errorf("backend got X-Client-Tag %q, want t1", v)
			}
		})
	}
}

func TestTwoSpellingsOfOneOrderAreOneOrder(t *testing.T) {
	e := startOrders(t, placed)
	first := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.0015","identifier":"o-1"}`
	again := `{ "identifier":"o\u002d1", "base_amount":1.5e-3, "price":65000, "side":"buy","type":"limit","symbol":"BTC_USDT" }`
	other := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.01","base_amount":"0.0015","identifier":"o-1"}`
	res := postOrder(t, e, first)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("first: %d", res.StatusCode)
	}
	res = postOrder(t, e, again)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 201 || res.Header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("the same order spelled differently: %d, replayed %q; want the first response replayed",
			res.StatusCode, res.Header.Get(idempotency.ReplayedHeader))
	}
	assertError(t, postOrder(t, e, other), http.StatusConflict, "duplicate_identifier")
	if n := e.backend.count(); n != 1 {
		t.Errorf("backend received %d orders, want 1", n)
	}
}

// TestDuplicatesKeyedByTokenWithoutLimits: on an order route without
// limits, no limit works out the token's id, yet an identifier is still
// claimed per token: the same token's repeat is replayed, another token
// may use the identifier, and an order without one is placed each time.
func TestDuplicatesKeyedByTokenWithoutLimits(t *testing.T) {
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) {
		c.Route("place_order").Limits = nil
		c.Routes = slices.DeleteFunc(c.Routes, func(r config.Route) bool { return r.Validate == config.ValidateBulk })
	})
	withID := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"o-7"}`
	without := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5"}`
	for _, tc := range []struct {
		name, token, body, replayed string
	}{
		{"first", "tok-a", withID, ""},
		{"same token again", "tok-a", withID, "true"},
		{"another token", "tok-b", withID, ""},
		{"no identifier", "tok-a", without, ""},
		{"no identifier again", "tok-a", without, ""},
	} {
		res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(tc.body),
			"Authorization", "Bearer "+tc.token, "Content-Type", "application/json")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 201 || res.Header.Get(idempotency.ReplayedHeader) != tc.replayed {
			t.Errorf("%s: status %d, replayed %q; want 201, %q", tc.name, res.StatusCode, res.Header.Get(idempotency.ReplayedHeader), tc.replayed)
		}
	}
	if n := e.backend.count(); n != 4 {
		t.Errorf("backend received %d orders, want 4", n)
	}
}

func TestOrderRefusals(t *testing.T) {
	e := startOrders(t, placed)
	cases := []struct {
		name, body string
		header     []string
		status     int
		code       string
	}{
		{"fields", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1.001","base_amount":"-1"}`, nil, 400, "invalid_order"},
		{"parse", `{"symbol":`, nil, 400, "parse_error"},
		{"media type", `{}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"size", `{"identifier":"` + strings.Repeat("x", 9<<10) + `"}`, nil, 413, "request_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := []string{"Authorization", "Bearer tok", "Content-Type", "application/json"}
			if len(tc.header) > 0 {
				h = append([]string{"Authorization", "Bearer tok"}, tc.header...)
			}
			res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(tc.body), h...)
			body := assertError(t, res, tc.status, tc.code)
			if tc.code == "invalid_order" && (len(body.Fields["price"]) == 0 || len(body.Fields["base_amount"]) == 0) {
				t.Errorf("fields %v, want price and base_amount named together", body.Fields)
			}
		})
	}
	if e.backend.count() != 0 {
		t.Errorf("%d refused orders reached the backend", e.backend.count())
	}
}

// TestClaimedOrderSurvivesClientHangingUp: a client that gives up while
// its order is at the backend does not leave the outcome unknown; its
// retry gets the response replayed. The client gives up once the backend
// holds its order, and the backend answers once the client has given up;
// until exgate has kept that answer a retry is held (409
// request_in_progress, never sent), so the retry is repeated until it is
// answered otherwise.
func TestClaimedOrderSurvivesClientHangingUp(t *testing.T) {
	var calls atomic.Int64
	reached, release := make(chan struct{}, 1), make(chan struct{})
	e := startOrders(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			reached <- struct{}{}
			<-release
		}
		placed(w, r)
	})
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"hang-up"}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-reached:
			cancel()
		case <-release: // the request failed before the backend
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	_, err := http.DefaultClient.Do(req)
	close(release)
	if err == nil {
		t.Fatal("the client did not give up")
	}
	var status int
	var replayed string
	var b []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // only bounds a hang
		res := postOrder(t, e, body)
		b, _ = io.ReadAll(res.Body)
		res.Body.Close()
		status, replayed = res.StatusCode, res.Header.Get("Idempotent-Replayed")
		if status != http.StatusConflict || !strings.Contains(string(b), `"request_in_progress"`) || time.Now().After(deadline) {
			break
		}
	}
	if status != 201 || replayed != "true" || string(b) != `{"id":1,"state":"active"}` {
		t.Errorf("retry: %d %q %s", status, replayed, b)
	}
	if calls.Load() != 1 {
		t.Errorf("backend called %d times", calls.Load())
	}
}

// TestClaimKeptOnlyWhenAccepted: an order the backend accepted keeps its
// identifier and is replayed; one it refused (4xx) frees it, so a retry
// reaches the backend again; after a 5xx the outcome is unknown and the
// order is never sent twice.
func TestClaimKeptOnlyWhenAccepted(t *testing.T) {
	const refusal = `{"base_amount":["Insufficient balance."]}`
	for _, tc := range []struct {
		name      string
		status    int
		calls     int64
		retry     int    // status of the retries
		retryCode string // their code, for exgate's own answers
	}{
		{"accepted", http.StatusCreated, 1, http.StatusCreated, ""},
		{"refused", http.StatusBadRequest, 3, http.StatusBadRequest, ""},
		{"unauthenticated", http.StatusUnauthorized, 3, http.StatusUnauthorized, ""},
		{"failed", http.StatusInternalServerError, 1, http.StatusConflict, "outcome_unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			e := startOrders(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, refusal)
			})
			body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"once"}`
			for i := 0; i < 3; i++ {
				res := postOrder(t, e, body)
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				want, replayed := tc.status, false
				if i > 0 {
					want, replayed = tc.retry, tc.calls == 1 && tc.retryCode == ""
				}
				if res.StatusCode != want || (i > 0 && tc.retryCode != "" && !strings.Contains(string(b), `"code":"`+tc.retryCode+`"`)) ||
					(tc.retryCode == "" && string(b) != refusal) {
					t.Fatalf("attempt %d: %d %s, want %d", i, res.StatusCode, b, want)
				}
				if got := res.Header.Get("Idempotent-Replayed") == "true"; got != replayed {
					t.Errorf("attempt %d: replayed = %v", i, got)
				}
			}
			if calls.Load() != tc.calls {
				t.Errorf("backend called %d times, want %d", calls.Load(), tc.calls)
			}
		})
	}
}

// TestAccountShare: a client that fills its share of the store gets 503
// identifier_quota_exceeded for new identifiers; another client's orders
// go through. With opaque tokens the client is the address: a token it
// invents draws from the share its other tokens filled (each keeping its
// own identifiers), another address's token does not.
func TestAccountShare(t *testing.T) {
	e := startOrdersConfig(t, placed, func(o *idempotency.Options) { o.MaxPerAccount = 2 }, func(c *config.Config) {
		c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
	})
	order := func(token, from, id string) *http.Response {
		return do(t, "POST", e.url+"/api/v1/odr/orders/",
			strings.NewReader(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"`+id+`"}`),
			"Authorization", "Bearer "+token, "Content-Type", "application/json", "X-Forwarded-For", from)
	}
	const greedy, innocent = "203.0.113.7", "198.51.100.9"
	for _, tc := range []struct {
		name, token, from, id string
		status                int
		code                  string
		replayed              bool
	}{
		{"an order", "greedy", greedy, "a", 201, "", false},
		{"another token's order with the same identifier: its own", "invented", greedy, "a", 201, "", false},
		{"past the address's share", "greedy", greedy, "c", 503, "identifier_quota_exceeded", false},
		{"a token it invents, past the address's share", "invented2", greedy, "a", 503, "identifier_quota_exceeded", false},
		{"the same address's IPv4-mapped form, past the share", "invented3", "::ffff:" + greedy, "a", 503, "identifier_quota_exceeded", false},
		{"a replay past the share", "greedy", greedy, "a", 201, "", true},
		{"another address's token", "innocent", innocent, "a", 201, "", false},
		{"another address's second order", "innocent", innocent, "b", 201, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := order(tc.token, tc.from, tc.id)
			if tc.code != "" {
				assertError(t, res, tc.status, tc.code)
				return
			}
			res.Body.Close()
			if res.StatusCode != tc.status || (res.Header.Get("Idempotent-Replayed") == "true") != tc.replayed {
				t.Errorf("%d (replayed %q), want %d (replayed %v)", res.StatusCode, res.Header.Get("Idempotent-Replayed"), tc.status, tc.replayed)
			}
		})
	}
	if n := e.backend.count(); n != 4 {
		t.Errorf("backend got %d orders, want 4", n)
	}
}

// TestAccessLogNamesTheOrderAnswer: an order's access log line tells its
// answers apart: exgate's own refusals carry their code (one 503 is not
// another), a replay is marked replayed, and an answer of the backend
// carries neither.
func TestAccessLogNamesTheOrderAnswer(t *testing.T) {
	e := startOrdersConfig(t, placed, func(o *idempotency.Options) { o.MaxPerAccount = 1 }, nil)
	order := func(id, amount string) string {
		return `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"` + amount + `","identifier":"` + id + `"}`
	}
	for _, tc := range []struct {
		name, body string
		status     int
		code       any // the access log's "code", nil for none
		replayed   any // its "replayed", nil for none
	}{
		{"placed", order("a-1", "0.5"), 201, nil, nil},
		{"repeated", order("a-1", "0.5"), 201, nil, true},
		{"another order, same identifier", order("a-1", "0.6"), 409, "duplicate_identifier", nil},
		{"account's share full", order("a-2", "0.5"), 503, "identifier_quota_exceeded", nil},
		{"invalid", order("a-3", "-1"), 400, "invalid_order", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := postOrder(t, e, tc.body)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			lines := e.logs.FilterMessage("request").All()
			if res.StatusCode != tc.status || len(lines) == 0 {
				t.Fatalf("answered %d with %d access log lines, want %d", res.StatusCode, len(lines), tc.status)
			}
			m := lines[len(lines)-1].ContextMap()
			if m["request_id"] != res.Header.Get("X-Request-Id") || m["status"] != int64(tc.status) ||
				m["code"] != tc.code || m["replayed"] != tc.replayed {
				t.Errorf("access log %v, want status %d, code %v, replayed %v", m, tc.status, tc.code, tc.replayed)
			}
		})
	}
}

// TestOrderAnswerBrokenOff: a backend that breaks off its answer to an
// order (status and part of the body sent, then the connection dropped)
// leaves its client with a 502 in exgate's error shape, not a dropped
// connection: exgate reads an order's answer before writing any of it;
// one that stalls mid-body past the route's timeout, with a 504. The
// claim is settled by the status: after a 2xx or 5xx the outcome is
// unknown and a retry is not sent again; after a 4xx (not placed) a retry
// goes to the backend.
func TestOrderAnswerBrokenOff(t *testing.T) {
	// place_order's: long enough that the order reaches the backend
	// before it on a loaded machine, so that it cuts the answer mid-body.
	const timeout = time.Second
	for _, tc := range []struct {
		name      string
		status    int
		stall     bool   // the backend stalls mid-body rather than dropping the connection
		answer    int    // the first try's status
		code      string // and code
		retry     int    // the retry's status
		retryCode string // and code
		calls     int64  // orders the backend received
	}{
		{"accepted", http.StatusCreated, false, http.StatusBadGateway, "bad_gateway", http.StatusConflict, "outcome_unknown", 1},
		{"refused", http.StatusBadRequest, false, http.StatusBadGateway, "bad_gateway", http.StatusCreated, "", 2},
		{"failed", http.StatusInternalServerError, false, http.StatusBadGateway, "bad_gateway", http.StatusConflict, "outcome_unknown", 1},
		{"accepted, stalled", http.StatusCreated, true, http.StatusGatewayTimeout, "gateway_timeout", http.StatusConflict, "outcome_unknown", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 1 {
					placed(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, `{"id":1,`)
				w.(http.Flusher).Flush()
				if tc.stall {
					<-r.Context().Done() // until exgate's timeout gives up on it
					return
				}
				panic(http.ErrAbortHandler) // the connection dropped mid-body
			}, nil, func(c *config.Config) { c.Route("place_order").Timeout = timeout })
			body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"cut-off"}`
			res := postOrder(t, e, body) // fails the test on a transport error
			assertError(t, res, tc.answer, tc.code)
			res = postOrder(t, e, body)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.retry || (tc.retryCode != "" && !strings.Contains(string(b), `"code":"`+tc.retryCode+`"`)) {
				t.Errorf("retry: %d %s, want %d %s", res.StatusCode, b, tc.retry, tc.retryCode)
			}
			if n := calls.Load(); n != tc.calls {
				t.Errorf("backend received %d orders, want %d", n, tc.calls)
			}
			lines := e.logs.FilterMessage("request").All()
			if m := lines[0].ContextMap(); m["status"] != int64(tc.answer) || m["code"] != tc.code || m["aborted"] != nil {
				t.Errorf("access log of the broken-off answer: %v", m)
			}
		})
	}
}

// TestOrderAnswerRecorded: the answer to an identified order reaches its
// client whole, whatever its length and framing, and is kept for replay
// when it fits idempotency.max_response_bytes: a retry gets it again byte for byte.
// A longer one leaves the outcome unknown (409 outcome_unknown), and the
// order is never sent twice.
func TestOrderAnswerRecorded(t *testing.T) {
	const max = 1024
	for _, tc := range []struct {
		name     string
		size     int
		chunked  bool
		replayed bool
	}{
		{"short", 100, false, true},
		{"short, chunked", 100, true, true},
		{"as long as kept", max, false, true},
		{"as long as kept, chunked", max, true, true},
		{"a byte longer", max + 1, false, false},
		{"a byte longer, chunked", max + 1, true, false},
		{"long, chunked", 5 * max, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := `{"id":1,"pad":"` + strings.Repeat("x", tc.size-len(`{"id":1,"pad":""}`)) + `"}`
			var calls atomic.Int64
			e := startOrdersWith(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				if !tc.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, answer[:len(answer)/2])
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, answer[len(answer)/2:])
			}, func(c *config.Config) { c.Idempotency.MaxResponseBytes = max },
				ratelimit.NewMemory(ratelimit.MemoryOptions{}), nil,
				func(o idempotency.Options) idempotency.Store { return idempotency.NewMemory(o) })
			body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"recorded"}`
			for try := range 2 {
				res := postOrder(t, e, body)
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				switch {
				case err != nil:
					t.Fatalf("try %d: %v", try, err)
				case try == 0 || tc.replayed:
					if res.StatusCode != http.StatusCreated || string(b) != answer || (try == 1) != (res.Header.Get("Idempotent-Replayed") == "true") {
						t.Errorf("try %d: %d, replayed %q, %d bytes, want 201 and the backend's %d bytes",
							try, res.StatusCode, res.Header.Get("Idempotent-Replayed"), len(b), len(answer))
					}
				case res.StatusCode != http.StatusConflict || !strings.Contains(string(b), `"code":"outcome_unknown"`):
					t.Errorf("retry of an order whose answer was not kept: %d %s, want 409 outcome_unknown", res.StatusCode, b)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("backend received %d orders, want 1", n)
			}
		})
	}
}

// TestReadAnswerAllocations gates the allocations of reading an order's
// answer to record it: one buffer for a body of known length.
func TestReadAnswerAllocations(t *testing.T) {
	const answer = `{"id":1,"state":"active"}`
	rd := strings.NewReader(answer)
	read := func() {
		rd.Reset(answer)
		if b, err := readAnswer(rd, 1024, int64(len(answer))); err != nil || string(b) != answer {
			t.Fatalf("readAnswer = %q, %v", b, err)
		}
	}
	if n := testing.AllocsPerRun(100, read); n > 1 {
		t.Errorf("%v allocations per readAnswer, want 1", n)
	}
}
