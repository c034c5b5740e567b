package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
)

// TestTokenIDsOfManyClientsOnOneHTTP2Connection: a trusted proxy carries
// many clients' requests, each client with its own token and its own
// X-Request-ID, as concurrent streams of one HTTP/2 connection, the
// connection whose last token's id the gateway keeps (tokenMemo). Each
// token gets exactly its own limit, never another's id; a padded spelling
// of a token the connection has just been accepted with is refused every
// time; each answer carries its own request's id; the backend gets each
// request's own token and id; and each access log line names the token id
// of its own request.
func TestTokenIDsOfManyClientsOnOneHTTP2Connection(t *testing.T) {
	const clients, perClient, limit = 12, 7, 4
	addr, be, logs, k, client := tokenMemoH2Gateway(t, limit)
	defer client.CloseIdleConnections()

	token := func(i int) string {
		return "eyJhIjoxfQ.eyJiIjoyfQ." + base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("signature-of-%d", i)))
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		ok    = map[int]int{}
		wg    sync.WaitGroup
	)
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { mu.Lock(); conns[i.Conn] = true; mu.Unlock() }}
	send := func(i, j int, tok string) (*http.Response, string) {
		id := fmt.Sprintf("c%d-%d", i, j)
		req, _ := http.NewRequest("GET", "https://"+addr+"/api/v1/mth/matches/BTC_USDT/", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Request-Id", id)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		res, err := client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Error(err)
			return nil, id
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.ProtoMajor != 2 {
			t.Errorf("request %s over %s, want HTTP/2", id, res.Proto)
		}
		if got := res.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != id {
			t.Errorf("request %s answered with X-Request-Id %q", id, got)
		}
		return res, id
	}
	// One connection, opened first; at most 64 streams at once (the
	// server allows 100, past which the client would dial another).
	if res, _ := send(-1, 0, token(-1)); res == nil || res.StatusCode != http.StatusOK {
		t.Fatal("the first request failed")
	}
	ok[-1] = 0
	streams := make(chan struct{}, 64)
	for i := range clients {
		for j := range perClient {
			wg.Add(2)
			go func() {
				defer wg.Done()
				streams <- struct{}{}
				defer func() { <-streams }()
				res, id := send(i, j, token(i))
				if res == nil {
					return
				}
				switch res.StatusCode {
				case http.StatusOK:
					mu.Lock()
					ok[i]++
					mu.Unlock()
				case http.StatusTooManyRequests:
				default:
					t.Errorf("request %s: %d", id, res.StatusCode)
				}
			}()
			go func() { // the same token, padded: not canonical
				defer wg.Done()
				streams <- struct{}{}
				defer func() { <-streams }()
				if res, id := send(i, perClient+j, token(i)+"="); res != nil && res.StatusCode != http.StatusUnauthorized {
					t.Errorf("request %s with a padded token: %d, want 401", id, res.StatusCode)
				}
			}()
		}
	}
	wg.Wait()
	if len(conns) != 1 {
		t.Errorf("the requests went over %d connections, want one", len(conns))
	}
	for i := range clients {
		if ok[i] != limit {
			t.Errorf("client %d's token had %d requests through, want its limit %d", i, ok[i], limit)
		}
	}
	checkTokensReached(t, be, logs, k, token, clients, perClient, limit)
}

// tokenMemoH2Gateway serves, over TLS with HTTP/2, a gateway whose
// list_matches route limits each token to limit requests, in memory, and
// trusts 127.0.0.0/8 as proxies; it returns its address, its backend and
// access log, the limiter's keyer, and a client of one connection.
func tokenMemoH2Gateway(t *testing.T, limit int64) (string, *backend, *observer.ObservedLogs, *limiter.Keyer, *http.Client) {
	t.Helper()
	cfg := config.Default()
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Limiter.Store = config.StoreMemory
	cfg.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
	rt := cfg.Route("list_matches")
	rt.Auth = config.AuthOptional
	rt.Limits = []config.Limit{{Key: config.KeyToken, When: config.WhenToken, Rate: config.Rate{N: limit, Period: time.Hour}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	enf, err := limiter.NewEnforcer(limiter.EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	gw, err := newGateway(cfg, Options{Logger: zap.New(core), Limits: enf, Rules: limiter.Compile(cfg, nil)})
	if err != nil {
		t.Fatal(err)
	}
	certs, ca := apiCertificates(t)
	addr := serveTLS(t, cfg, gw, nil, certs)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}},
		ForceAttemptHTTP2: true,
		MaxConnsPerHost:   1,
	}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	return addr, be, logs, k, client
}

// checkTokensReached checks that the backend got each request's own
// token and id, and that each access log line names its own request's
// token id and holds no token.
func checkTokensReached(t *testing.T, be *backend, logs *observer.ObservedLogs, k *limiter.Keyer, token func(int) string, clients, perClient, limit int) {
	t.Helper()
	// The backend got each request's own token and id.
	got := be.all()
	if len(got) != 1+clients*limit {
		t.Fatalf("the backend got %d requests, want %d", len(got), 1+clients*limit)
	}
	for _, r := range got[1:] {
		var i, j int
		if _, err := fmt.Sscanf(r.Header.Get("X-Request-Id"), "c%d-%d.", &i, &j); err != nil {
			t.Fatalf("backend X-Request-Id %q", r.Header.Get("X-Request-Id"))
		}
		if a := r.Header.Get("Authorization"); a != "Bearer "+token(i) {
			t.Errorf("request c%d-%d reached the backend with Authorization %q, want client %d's", i, j, a, i)
		}
	}
	// Each access log line names its own request's token id.
	lines := logs.FilterMessage("request").All()
	if len(lines) != 1+clients*perClient*2 {
		t.Fatalf("%d access log lines, want %d", len(lines), 1+clients*perClient*2)
	}
	for _, l := range lines[1:] {
		m := l.ContextMap()
		var i, j int
		if _, err := fmt.Sscanf(fmt.Sprint(m["request_id"]), "c%d-%d", &i, &j); err != nil {
			t.Fatalf("access log request_id %v", m["request_id"])
		}
		if j < perClient && m["token_id"] != k.ID(token(i))[:12] {
			t.Errorf("access log of c%d-%d: token_id %v, want client %d's %s", i, j, m["token_id"], i, k.ID(token(i))[:12])
		}
		for f, v := range m {
			if strings.Contains(fmt.Sprint(v), "signature-of") || strings.Contains(fmt.Sprint(v), base64.RawURLEncoding.EncodeToString([]byte("signature-of"))) {
				t.Errorf("access log field %s holds a token: %v", f, v)
			}
		}
	}
}

// TestTokenMemoFollowsReloads: the id a connection keeps of its last
// token (tokenMemo) carries no tier and no limit: after a reload gives
// the token's id a tier, the next request of the same kept-alive
// connection is counted in the tier's limit, and after a reload takes it
// away, in the route's again, still spent; another token on the
// connection keeps its own count throughout.
func TestTokenMemoFollowsReloads(t *testing.T) {
	var cfg *config.Config
	limited := func(c *config.Config) {
		rt := c.Route("list_matches")
		rt.Auth = config.AuthOptional
		rt.Limits = []config.Limit{{Key: config.KeyToken, When: config.WhenToken, Rate: config.Rate{N: 2, Period: time.Hour}}}
	}
	e := startLimited(t, nil, func(c *config.Config) { limited(c); cfg = c })
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	send := func(token string) (int, string) {
		t.Helper()
		fmt.Fprintf(conn, "GET /api/v1/mth/matches/BTC_USDT/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Ratelimit-Policy")
	}
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	a, b := "opaque-token-a", "opaque-token-b"
	reload := func(tiered bool) {
		t.Helper()
		next := config.Default()
		next.Upstream = cfg.Upstream
		next.Limiter.Store = config.StoreMemory
		limited(next)
		var tokens map[string]string
		if tiered {
			next.TokensFile = "tokens.yaml" // read by the caller: its tiers are given to Compile
			next.Tiers = map[string]map[string]config.TierLimit{"pro": {"list_matches": {Rate: config.Rate{N: 10, Period: time.Hour}}}}
			tokens = map[string]string{k.ID(a): "pro"}
		}
		if err := next.Validate(); err != nil {
			t.Fatal(err)
		}
		e.gw.Reload(next, limiter.Compile(next, tokens), nil)
	}
	steps := []struct {
		reload *bool // reload first, with a tier for a or without
		token  string
		status int
		quota  string // RateLimit-Policy's q
	}{
		{nil, a, 200, "q=2"}, {nil, a, 200, "q=2"}, {nil, a, 429, "q=2"}, {nil, b, 200, "q=2"},
		{ptr(true), a, 200, "q=10"}, {nil, b, 200, "q=2"}, {nil, a, 200, "q=10"}, {nil, b, 429, "q=2"},
		{ptr(false), a, 429, "q=2"}, {nil, b, 429, "q=2"},
	}
	for i, s := range steps {
		if s.reload != nil {
			reload(*s.reload)
		}
		status, policy := send(s.token)
		if status != s.status || !strings.Contains(policy, s.quota) {
			t.Fatalf("step %d (%s): %d with RateLimit-Policy %q, want %d with %s", i, s.token, status, policy, s.status, s.quota)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestDuplicatesPerTokenOnOneConnection: duplicate protection keys an
// order's identifier by its token's id, which a connection keeps for its
// last token (tokenMemo): two tokens taking turns on one kept-alive
// connection with one identifier each have their own order placed once
// and their own answer replayed, never the other's, with the route's
// limits on or off (the id worked out by the limits or by the claim).
func TestDuplicatesPerTokenOnOneConnection(t *testing.T) {
	for _, limits := range []bool{true, false} {
		t.Run(fmt.Sprintf("limits=%v", limits), func(t *testing.T) {
			e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"for":"`+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`"}`)
			}, nil, func(c *config.Config) {
				if !limits {
					c.Route("place_order").Limits = nil
					c.Routes = slices.DeleteFunc(c.Routes, func(r config.Route) bool { return r.Validate == config.ValidateBulk })
				}
			})
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(conn)
			body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"o-7"}`
			for i, s := range []struct{ token, replayed string }{
				{"tok-a", ""}, {"tok-b", ""}, {"tok-a", "true"}, {"tok-b", "true"}, {"tok-b", "true"}, {"tok-a", "true"},
			} {
				fmt.Fprintf(conn, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
					s.token, len(body), body)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != s.replayed || string(b) != `{"for":"`+s.token+`"}` {
					t.Errorf("order %d of %s: %d, replayed %q, %s; want 201, %q, its own answer", i, s.token, res.StatusCode, res.Header.Get("Idempotent-Replayed"), b, s.replayed)
				}
			}
			if n := e.backend.count(); n != 2 {
				t.Errorf("the backend got %d orders, want 2: one per token", n)
			}
		})
	}
}
