package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/sim"
)

// errCode decodes exgate's error shape and returns its code.
func errCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Detail, Code string
		Fields       map[string][]string
	}
	decodeJSON(t, b, &e)
	if e.Code != "" && e.Detail == "" {
		t.Errorf("error without a detail: %s", b)
	}
	return e.Code
}

// TestInvalidOrdersNeverReachBackend sends orders exgate must refuse and
// counts them at the reference backend: none arrives; a valid order does.
func TestInvalidOrdersNeverReachBackend(t *testing.T) {
	st := startStack(t, nil)
	token := authenticate(t, st.url)
	auth := []string{"Authorization", "Bearer " + token}
	jsonCT := []string{"Content-Type", "application/json"}
	cases := []struct {
		name   string
		body   string
		header []string
		status int
		code   string
		field  string
	}{
		{"no content type", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`, nil, 415, "unsupported_media_type", ""},
		{"form content type", `symbol=BTC_USDT`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", ""},
		{"too large", `{"symbol":"BTC_USDT","identifier":"` + strings.Repeat("a", 9000) + `"}`, jsonCT, 413, "request_too_large", ""},
		{"not JSON", `symbol: BTC_USDT`, jsonCT, 400, "parse_error", ""},
		{"trailing data", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"} {}`, jsonCT, 400, "parse_error", ""},
		{"duplicate key", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","base_amount":"1000"}`, jsonCT, 400, "invalid_order", "base_amount"},
		{"unknown market", `{"symbol":"DOGE_USDT","type":"market","side":"buy","base_amount":"1"}`, jsonCT, 400, "invalid_order", "symbol"},
		{"delisted market", `{"symbol":"LUNC_USDT","type":"market","side":"buy","base_amount":"1"}`, jsonCT, 400, "invalid_order", "symbol"},
		{"price off the increment", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.001","base_amount":"0.001"}`, jsonCT, 400, "invalid_order", "price"},
		{"too many decimals", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.0000001"}`, jsonCT, 400, "invalid_order", "base_amount"},
		{"zero amount", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0"}`, jsonCT, 400, "invalid_order", "base_amount"},
		{"limit without price", `{"symbol":"BTC_USDT","type":"limit","side":"buy","base_amount":"0.001"}`, jsonCT, 400, "invalid_order", "price"},
		{"bad side", `{"symbol":"BTC_USDT","type":"market","side":"hold","base_amount":"0.001"}`, jsonCT, 400, "invalid_order", "side"},
		{"float exponent beyond precision", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":1e-9}`, jsonCT, 400, "invalid_order", "base_amount"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, h, b := call(t, "POST", st.url+"/api/v1/odr/orders/", tc.body, append(append([]string{}, auth...), tc.header...)...)
			if code != tc.status || errCode(t, b) != tc.code || h.Get("X-Request-Id") == "" {
				t.Fatalf("%d %s, want %d %s", code, b, tc.status, tc.code)
			}
			if tc.field != "" && !strings.Contains(string(b), `"fields":{"`+tc.field+`":[`) {
				t.Errorf("body %s does not name field %s", b, tc.field)
			}
		})
	}
	if n := st.backend.orders.Load(); n != 0 {
		t.Fatalf("%d refused orders reached the backend", n)
	}
	// JavaScript clients send numbers, exponent form included.
	code, _, b := call(t, "POST", st.url+"/api/v1/odr/orders/",
		`{"symbol":"BTC_USDT","type":"limit","side":"sell","price":6.5e4,"base_amount":1e-3}`, append(auth, jsonCT...)...)
	if code != 201 || st.backend.orders.Load() != 1 {
		t.Fatalf("valid order: %d %s (backend saw %d)", code, b, st.backend.orders.Load())
	}
}

// order posts one order with an identifier and returns status, headers
// and body.
func order(t *testing.T, url, token, identifier, amount string) (int, http.Header, []byte) {
	t.Helper()
	body := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"100.00","base_amount":%q,"identifier":%q}`, amount, identifier)
	return call(t, "POST", url+"/api/v1/odr/orders/", body, "Authorization", "Bearer "+token, "Content-Type", "application/json")
}

// TestIdenticalOrdersPlacedOnce: 100 concurrent identical orders through
// two replicas sharing Redis reach the backend once; later repeats get
// the first response replayed; another body under the same identifier is
// refused.
func TestIdenticalOrdersPlacedOnce(t *testing.T) {
	srv := redistest.Start(t)
	urls, backend := replicas(t, 2, []string{srv.Addr}, nil)
	token := authenticate(t, urls[0])
	var placed, inProgress, replayed, other atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, h, b := order(t, urls[i%2], token, "twice-never", "0.001")
			switch {
			case code == 201 && h.Get("Idempotent-Replayed") == "true":
				replayed.Add(1)
			case code == 201:
				placed.Add(1)
			case code == 409 && strings.Contains(string(b), `"code":"request_in_progress"`):
				inProgress.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected answer %d %s", code, b)
			}
		}()
	}
	wg.Wait()
	if backend.orders.Load() != 1 || placed.Load() != 1 || other.Load() != 0 {
		t.Fatalf("backend saw %d orders; placed %d, replayed %d, in progress %d, other %d",
			backend.orders.Load(), placed.Load(), replayed.Load(), inProgress.Load(), other.Load())
	}
	code, h, first := order(t, urls[1], token, "twice-never", "0.001")
	if code != 201 || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(first), `"identifier":"twice-never"`) {
		t.Errorf("repeat after completion: %d %v %s", code, h.Get("Idempotent-Replayed"), first)
	}
	code, _, b := order(t, urls[0], token, "twice-never", "0.002")
	if code != 409 || errCode(t, b) != "duplicate_identifier" {
		t.Errorf("other body, same identifier: %d %s", code, b)
	}
	// Another token may use the same identifier.
	other2 := authenticate(t, urls[0])
	if other2 == token {
		t.Skip("the backend issued the same token twice")
	}
	if code, _, b := order(t, urls[0], other2, "twice-never", "0.001"); code != 201 || backend.orders.Load() != 2 {
		t.Errorf("same identifier, another token: %d %s", code, b)
	}
}

// slowBackend is the reference backend behind a switch: it can answer
// after a delay, or refuse connections entirely.
type slowBackend struct {
	h     http.Handler
	delay atomic.Int64 // ns
}

func (s *slowBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d := time.Duration(s.delay.Load()); d > 0 && r.Method == "POST" {
		time.Sleep(d)
	}
	s.h.ServeHTTP(w, r)
}

// TestOrderOutcomes: an order that never left exgate (backend down) can
// be retried with its identifier; one that may have been placed (backend
// too slow) is never sent twice; with the duplicate-protection store
// down, orders with an identifier are refused, not risked.
func TestOrderOutcomes(t *testing.T) {
	srv := redistest.Start(t)
	sb := &slowBackend{h: sim.New(sim.Options{})}
	c := &counted{h: sb}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Redis.Addrs = []string{srv.Addr}
	// Deadlines a loaded machine meets: only the backend's delay below
	// (3s) goes beyond the route's timeout; a store timing out would
	// refuse the order with duplicate_protection_unavailable.
	cfg.Limiter.Redis.Timeout = time.Second // the most it may be
	cfg.Idempotency.Timeout = 2 * time.Second
	cfg.Route("place_order").Timeout = time.Second
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
	waitCatalogue(t, a)
	url := "http://" + a.addr
	token := authenticate(t, url)

	// Slow backend: 504, the order may have been placed; a retry is told
	// so and is not sent again.
	sb.delay.Store(int64(3 * time.Second))
	code, _, b := order(t, url, token, "slow-one", "0.001")
	if code != 504 || errCode(t, b) != "gateway_timeout" {
		t.Fatalf("slow backend: %d %s", code, b)
	}
	sb.delay.Store(0)
	code, _, b = order(t, url, token, "slow-one", "0.001")
	if code != 409 || errCode(t, b) != "outcome_unknown" {
		t.Errorf("retry after a timeout: %d %s", code, b)
	}
	if n := c.orders.Load(); n != 1 {
		t.Errorf("backend saw %d orders for one identifier, want 1", n)
	}

	// Backend down: the order never left (503 upstream_unavailable); a
	// retry with the same identifier, once the backend is back, is placed.
	addr := bs.Listener.Addr().String()
	bs.CloseClientConnections()
	bs.Listener.Close()
	code, _, b = order(t, url, token, "down-one", "0.001")
	if code != 503 || errCode(t, b) != "upstream_unavailable" {
		t.Fatalf("backend down: %d %s", code, b)
	}
	ln, err := listenRetry(addr)
	if err != nil {
		t.Fatal(err)
	}
	back := &http.Server{Handler: c}
	go func() { _ = back.Serve(ln) }()
	t.Cleanup(func() { _ = back.Close() })
	code, _, b = order(t, url, token, "down-one", "0.001")
	if code != 201 {
		t.Errorf("retry once the backend is back: %d %s", code, b)
	}

	// Store down: an order with an identifier is refused; one without is
	// not affected by duplicate protection.
	before := c.orders.Load()
	srv.Stop()
	code, _, b = order(t, url, token, "store-down", "0.001")
	if code != 503 || errCode(t, b) != "duplicate_protection_unavailable" {
		t.Errorf("store down: %d %s", code, b)
	}
	code, _, b = call(t, "POST", url+"/api/v1/odr/orders/", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`,
		"Authorization", "Bearer "+token, "Content-Type", "application/json")
	if code != 201 || c.orders.Load() != before+1 {
		t.Errorf("order without identifier, store down: %d %s", code, b)
	}
}

// listenRetry listens on addr again, waiting for the old socket to go.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, err
}

// TestOrderClaimRidesWithLimits: with the limits and duplicate protection
// in one Redis, an order's identifier claim is decided in the round trip
// of its limits. An order with an identifier costs one script run before
// the backend (and one to record its response); replays and conflicts,
// answered by the claim, are charged nothing; a request its limit
// refuses claims nothing, whatever its body, and is refused before its
// order is read once the deny cache knows it; and with Redis stopped an
// order with an identifier is refused 503 once the claim's deadline has
// passed.
func TestOrderClaimRidesWithLimits(t *testing.T) {
	srv := redistest.Start(t)
	const limitTimeout, claimTimeout = time.Second, 2 * time.Second // far beyond a loaded machine's stalls while Redis answers
	urls, backend := replicas(t, 1, []string{srv.Addr}, func(cfg *config.Config) {
		l := &cfg.Route("place_order").Limits[0]
		l.Rate, l.Burst = config.Rate{N: 4, Period: time.Hour}, 4
		cfg.Limiter.Redis.Timeout = limitTimeout
		cfg.Idempotency.Timeout = claimTimeout
		cfg.Idempotency.KeyPrefix = "rides:"
	})
	url := urls[0]
	token := authenticate(t, url)
	scripts := func() int64 {
		c := srv.CommandCalls()
		return c["evalsha"] + c["eval"]
	}

	if code, _, b := order(t, url, token, "rides-0", "0.001"); code != 201 { // the scripts are loaded
		t.Fatalf("order: %d %s", code, b)
	}
	before := scripts()
	code, _, b := order(t, url, token, "rides-1", "0.001")
	if code != 201 {
		t.Fatalf("order: %d %s", code, b)
	}
	if n := scripts() - before; n != 2 {
		t.Errorf("an order with an identifier ran %d scripts, want 2 (limits and claim, then its response)", n)
	}
	code, h, _ := order(t, url, token, "rides-1", "0.001")
	if code != 201 || h.Get("Idempotent-Replayed") != "true" || !strings.Contains(h.Get("RateLimit"), ";r=2;") {
		t.Errorf("replay: %d replayed=%q RateLimit=%q, want 201, true, r=2 (a replay is charged nothing)",
			code, h.Get("Idempotent-Replayed"), h.Get("RateLimit"))
	}
	code, h, b = order(t, url, token, "rides-1", "0.002")
	if code != 409 || errCode(t, b) != "duplicate_identifier" || !strings.Contains(h.Get("RateLimit"), ";r=2;") {
		t.Errorf("conflict: %d %s RateLimit=%q, want 409, r=2 (charged nothing)", code, b, h.Get("RateLimit"))
	}
	for _, id := range []string{"rides-2", "rides-3"} {
		if code, _, b := order(t, url, token, id, "0.001"); code != 201 {
			t.Fatalf("order %s: %d %s", id, code, b)
		}
	}
	// The limit is spent: refused, and no claim is made.
	if code, _, b := order(t, url, token, "rides-over", "0.001"); code != 429 || errCode(t, b) != "throttled" {
		t.Errorf("over the limit: %d %s", code, b)
	}
	if keys, err := srv.Do("KEYS", "rides:*rides-over"); err != nil || len(keys.([]any)) != 0 {
		t.Errorf("a refused order's claim: KEYS = %v %v, want none", keys, err)
	}
	// An invalid order from a throttled client gets the limit's answer.
	code, _, b = call(t, "POST", url+"/api/v1/odr/orders/", `{"symbol":"BTC_USDT","identifier":"rides-bad"}`,
		"Authorization", "Bearer "+token, "Content-Type", "application/json")
	if code != 429 || errCode(t, b) != "throttled" {
		t.Errorf("invalid order over the limit: %d %s", code, b)
	}
	// Known to the deny cache as throttled: refused before its order is
	// read. The body, chunked, is never finished here: reading it would
	// wait for the rest.
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: exgate\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"symbol\"\r\n", token)
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != 429 {
		t.Errorf("throttled client, order body not sent whole: %v %v, want 429 without the body read", res, err)
	}
	if n := backend.orders.Load(); n != 4 {
		t.Errorf("backend saw %d orders, want 4", n)
	}

	// Redis stopped: the round trip's deadline is the claim's (the
	// longer), then 503. (That it is one round trip, not one per step,
	// is the script count above.)
	fresh := authenticate(t, url)
	srv.Freeze()
	defer srv.Thaw()
	start := time.Now()
	code, _, b = order(t, url, fresh, "rides-paused", "0.001")
	d := time.Since(start)
	if code != 503 || errCode(t, b) != "duplicate_protection_unavailable" {
		t.Errorf("order with Redis stopped: %d %s", code, b)
	}
	if d < claimTimeout {
		t.Errorf("order with Redis stopped answered after %v, want the claim's deadline (%v)", d, claimTimeout)
	}
	t.Logf("order with an identifier, Redis stopped: answered after %v (limiter timeout %v, idempotency timeout %v)", d, limitTimeout, claimTimeout)
}

// TestOrderClaimRidesWithLimitsCluster: in a Redis Cluster an order's
// claim rides in the round trip of its limits although they live on
// different masters: with the claim's master, or every master, stopped
// the order is refused 503 once the claim's deadline has passed; an
// order refused by its limit, on the other master, leaves no claim
// behind (the identifier is free, the account's share back).
func TestOrderClaimRidesWithLimitsCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	const limitTimeout, claimTimeout = time.Second, 2 * time.Second // far beyond a loaded machine's stalls while Redis answers
	urls, backend := replicas(t, 1, cl.Addrs, func(cfg *config.Config) {
		l := &cfg.Route("place_order").Limits[0]
		l.Rate, l.Burst = config.Rate{N: 3, Period: time.Hour}, 3
		cfg.Limiter.Redis.Timeout = limitTimeout
		cfg.Idempotency.Timeout = claimTimeout
		cfg.Idempotency.KeyPrefix = "cl:"
		cfg.Idempotency.ReplicaAcks = 0 // masters without replicas (idempotency's TestJoinedClusterReplicaAcks has them)
	})
	url := urls[0]
	keysOn := func(pattern string) map[*redistest.Server][]any { return keysOn(t, cl, pattern) }
	token, claimNode, _ := splitToken(t, cl, url, "cl:")

	// The claim's master stopped, then every master: the claim's
	// deadline, then 503.
	masters := map[string][]*redistest.Server{"the claim's master": {claimNode}, "every master": cl.Servers}
	for _, name := range []string{"the claim's master", "every master"} {
		for _, s := range masters[name] {
			s.Freeze()
		}
		start := time.Now()
		code, _, b := order(t, url, token, "paused-"+strconv.Itoa(len(masters[name])), "0.001")
		d := time.Since(start)
		for _, s := range masters[name] {
			s.Thaw()
		}
		if code != 503 || errCode(t, b) != "duplicate_protection_unavailable" {
			t.Errorf("order with %s stopped: %d %s", name, code, b)
		}
		if d < claimTimeout {
			t.Errorf("order with %s stopped answered after %v, want the claim's deadline (%v)", name, d, claimTimeout)
		}
		t.Logf("order with an identifier, Cluster, %s stopped: answered after %v (limiter timeout %v, idempotency timeout %v)", name, d, limitTimeout, claimTimeout)
		time.Sleep(400 * time.Millisecond) // past the limiter's backoff
	}
	// (The sleeps: past the limiter's fail-fast backoff, 250ms, which
	// decides orders in process, on_store_error: local, and sends no
	// claim.)
	share := func() any {
		v, err := claimNode.Do("HGETALL", keysOn("cl:%*")[claimNode][0])
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(v)
	}
	// Orders until the limit refuses one (the paused order's charge was
	// given back when its claim's run failed).
	var over string
	var before any
	for i := 0; over == "" && i < 5; i++ {
		before = share()
		id := "over-" + strconv.Itoa(i)
		switch code, _, b := order(t, url, token, id, "0.001"); {
		case code == 429 && errCode(t, b) == "throttled":
			over = id
		case code != 201:
			t.Fatalf("order %s: %d %s", id, code, b)
		}
	}
	if over == "" {
		t.Fatal("the limit of 3 an hour refused none of 5 more orders")
	}
	if keys := keysOn("cl:*" + over); len(keys) != 0 {
		t.Errorf("a refused order's claim left behind: %v", keys)
	}
	if after := share(); after != before {
		t.Errorf("account share after a refused order = %v, want it back at %v", after, before)
	}
	if n := backend.orders.Load(); n < 2 {
		t.Errorf("backend saw %d orders, want the placed ones", n)
	}
}

// keysOn returns, by node of cl, the keys matching pattern.
func keysOn(t *testing.T, cl *redistest.Cluster, pattern string) map[*redistest.Server][]any {
	t.Helper()
	out := map[*redistest.Server][]any{}
	for _, s := range cl.Servers {
		v, err := s.Do("KEYS", pattern)
		if err != nil {
			t.Fatal(err)
		}
		if ks := v.([]any); len(ks) > 0 {
			out[s] = ks
		}
	}
	return out
}

// splitToken returns a token whose place_order limit and claims (under
// the idempotency key prefix) live on different masters of cl, found by
// placing an order through the exgate at url, and those two masters. The
// Cluster is flushed between tries.
func splitToken(t *testing.T, cl *redistest.Cluster, url, prefix string) (token string, claimNode, limitNode *redistest.Server) {
	t.Helper()
	for try := 0; try < 20; try++ {
		for _, s := range cl.Servers {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}
		tok := authenticate(t, url)
		if code, _, b := order(t, url, tok, "find", "0.001"); code != 201 {
			t.Fatalf("order: %d %s", code, b)
		}
		limits, claims := keysOn(t, cl, "rate:*place_order*"), keysOn(t, cl, prefix+"*")
		if len(limits) != 1 || len(claims) != 1 {
			t.Fatalf("limit keys %v, claim keys %v: want each on one master", limits, claims)
		}
		for c := range claims {
			for l := range limits {
				if c != l {
					return tok, c, l
				}
			}
		}
	}
	t.Fatal("no token with its limit and its claims on different masters")
	return "", nil, nil
}

// TestOrderClaimKeptWhenLimitNodeFails: in a Redis Cluster, an order
// whose claim was taken on its account's master while the master of its
// limit failed goes on with its claim under on_store_error open (placed
// once, recorded for replay), and under closed is refused with the claim
// freed.
func TestOrderClaimKeptWhenLimitNodeFails(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	app := func(onStoreError string) (string, *counted) {
		urls, backend := replicas(t, 1, cl.Addrs, func(cfg *config.Config) {
			cfg.Limiter.OnStoreError = onStoreError
			cfg.Limiter.TokenSpray.MaxTokens = 0 // no spray check: the order's limit and claim only
			cfg.Limiter.Redis.Timeout = time.Second
			cfg.Idempotency.Timeout = 2 * time.Second
			cfg.Idempotency.KeyPrefix = "kept:"
			cfg.Idempotency.ReplicaAcks = 0
		})
		return urls[0], backend
	}
	open, openBackend := app(config.StoreOpen)
	closed, _ := app(config.StoreClosed)
	token, _, limitNode := splitToken(t, cl, open, "kept:")

	for _, tc := range []struct {
		url, id    string
		code       int
		errCode    string
		claimState string // the first byte of the claim's entry, "" for none
	}{
		{open, "open-1", 201, "", "d"},
		{closed, "closed-1", 503, "rate_limit_unavailable", ""},
	} {
		t.Run(tc.id, func(t *testing.T) {
			placed := openBackend.orders.Load()
			limitNode.Freeze()
			code, _, b := order(t, tc.url, token, tc.id, "0.001")
			limitNode.Thaw()
			if code != tc.code || (tc.errCode != "" && errCode(t, b) != tc.errCode) {
				t.Fatalf("order with its limit's master stopped: %d %s, want %d %s", code, b, tc.code, tc.errCode)
			}
			keys := keysOn(t, cl, "kept:*"+tc.id)
			state := ""
			for node, ks := range keys {
				v, err := node.Do("GET", ks[0])
				if err != nil {
					t.Fatal(err)
				}
				state = v.(string)[:1]
			}
			if state != tc.claimState {
				t.Errorf("claim entry state %q, want %q", state, tc.claimState)
			}
			if tc.code == 201 {
				if n := openBackend.orders.Load() - placed; n != 1 {
					t.Errorf("backend saw %d orders, want 1", n)
				}
				time.Sleep(400 * time.Millisecond) // past the limiter's backoff
				if code, h, _ := order(t, tc.url, token, tc.id, "0.001"); code != 201 || h.Get("Idempotent-Replayed") != "true" {
					t.Errorf("retry: %d replayed=%q, want the recorded answer", code, h.Get("Idempotent-Replayed"))
				}
			}
		})
	}
}

// TestOrderClaimAfterGuardNodeFails: in a Redis Cluster, an order whose
// spray check goes first alone, to a master that is gone (its
// connections refused), never sent its claim: under on_store_error open
// it is claimed on its own on its account's master, which is up, and
// placed once — not refused as if duplicate protection had failed.
func TestOrderClaimAfterGuardNodeFails(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	const claimTimeout = 2 * time.Second // far beyond a loaded machine's stalls while Redis answers
	urls, backend := replicas(t, 1, cl.Addrs, func(cfg *config.Config) {
		cfg.Limiter.OnStoreError = config.StoreOpen
		cfg.Limiter.TokenSpray.Window = time.Second // the spray answer cached no longer
		cfg.Limiter.Redis.Timeout = time.Second
		cfg.Idempotency.Timeout = claimTimeout
		cfg.Idempotency.KeyPrefix = "gd:"
		cfg.Idempotency.ReplicaAcks = 0
	})
	url := urls[0]
	// A token whose claims live on another master than the address's
	// spray set.
	var token string
	var guardNode *redistest.Server
	for try := 0; guardNode == nil && try < 20; try++ {
		for _, s := range cl.Servers {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}
		token = authenticate(t, url)
		if code, _, b := order(t, url, token, "find", "0.001"); code != 201 {
			t.Fatalf("order: %d %s", code, b)
		}
		guards, claims := keysOn(t, cl, "*spray*"), keysOn(t, cl, "gd:*")
		if len(guards) != 1 || len(claims) != 1 {
			t.Fatalf("spray keys %v, claim keys %v: want each on one master", guards, claims)
		}
		for g := range guards {
			if _, same := claims[g]; !same {
				guardNode = g
			}
		}
	}
	if guardNode == nil {
		t.Fatal("no token with its claims on another master than the spray set")
	}
	time.Sleep(1200 * time.Millisecond) // the spray answer expired: the next order sends the check
	placed := backend.orders.Load()
	guardNode.Stop()
	start := time.Now()
	code, _, b := order(t, url, token, "guard-down", "0.001")
	d := time.Since(start)
	if code != 201 {
		t.Errorf("order with the spray set's master gone: %d %s, want 201 (claimed on its own)", code, b)
	}
	if n := backend.orders.Load() - placed; n != 1 {
		t.Errorf("backend saw %d orders, want 1", n)
	}
	t.Logf("order, the spray set's master gone: %d after %v (idempotency timeout %v)", code, d, claimTimeout)
}
