package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
)

const testKeySecret = "test-key-secret-0123456789abcdef"

// startLimited is startEnv with rate limits enforced by store (a memory
// limiter when nil).
func startLimited(t *testing.T, store ratelimit.Store, mut func(*config.Config)) *env {
	t.Helper()
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Limiter.Store = config.StoreMemory
	if mut != nil {
		mut(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k, _ := limiter.NewKeyer([]byte(testKeySecret))
	if store == nil {
		store = ratelimit.NewMemory(ratelimit.MemoryOptions{})
	}
	enf, err := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, cfg, be, Options{Limits: enf, Rules: limiter.Compile(cfg, nil)})
}

// smallMatches sets list_matches to 3/1m per address.
func smallMatches(c *config.Config) {
	c.Route("list_matches").Limits[0].Rate = config.Rate{N: 3, Period: time.Minute}
	c.Route("list_matches").Limits[0].Burst = 0
}

func TestThrottledAnswer(t *testing.T) {
	e := startLimited(t, nil, smallMatches)
	for i := 0; i < 3; i++ {
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
		wantRL := `"address";r=` + strconv.Itoa(2-i) + ";t="
		if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, wantRL) {
			t.Errorf("request %d: RateLimit = %q, want prefix %q", i, got, wantRL)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"address";q=3;w=60` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
		if got := res.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("backend response changed: Content-Type %q", got)
		}
	}
	before := e.backend.count()
	res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
	ra := res.Header.Get("Retry-After")
	rl := res.Header.Get("RateLimit")
	body := assertError(t, res, http.StatusTooManyRequests, "throttled")
	secs, err := strconv.Atoi(ra)
	if err != nil || secs < 1 || secs > 20 {
		t.Fatalf("Retry-After = %q, want whole seconds, about 20", ra)
	}
	if want := "Request was throttled. Expected available in " + ra + " seconds."; body.Detail != want {
		t.Errorf("detail = %q, want %q", body.Detail, want)
	}
	if rl != `"address";r=0;t=`+ra {
		t.Errorf("RateLimit = %q, want t equal to Retry-After", rl)
	}
	if e.backend.count() != before {
		t.Error("a throttled request reached the backend")
	}
}

// TestTooManyTokensAnswer: once an address has presented its token_spray
// max_tokens, further tokens share one allowance; when an abuser spends
// it, a newcomer's token behind that address gets 429 too_many_tokens,
// which says it is not its own limit, with a wait no longer than the
// window — never "throttled" as if its own token were spent.
func TestTooManyTokensAnswer(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		c.Limiter.TokenSpray = config.TokenSpray{MaxTokens: 1, Window: time.Minute}
		r := c.Route("list_markets")
		r.Limits = []config.Limit{{Name: config.KeyToken, Key: config.KeyToken, When: config.WhenAlways, Rate: config.Rate{N: 2, Period: time.Hour}, Burst: 2}}
	})
	get := func(token string) *http.Response {
		return do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", "Bearer "+token)
	}
	for _, tok := range []string{"abuser-1", "abuser-2", "abuser-3"} { // one admitted, then the shared bucket of 2
		res := get(tok)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	res := get("newcomer")
	ra := res.Header.Get("Retry-After")
	body := assertError(t, res, http.StatusTooManyRequests, "too_many_tokens")
	if secs, err := strconv.Atoi(ra); err != nil || secs < 1 || secs > 60 {
		t.Errorf("Retry-After = %q, want at most the 60 s window (the shared bucket refills in 30 min)", ra)
	}
	if !strings.Contains(body.Detail, "not") || !strings.HasSuffix(body.Detail, "Expected available in "+ra+" seconds.") {
		t.Errorf("detail = %q", body.Detail)
	}
}

func TestLimitsBeforeBody(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		c.Route("place_order").Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
		c.Route("place_order").Limits[0].Burst = 0
	})
	order := func(body io.Reader) *http.Response {
		return do(t, "POST", e.url+"/api/v1/odr/orders/", body, "Authorization", "Bearer tok", "Content-Type", "application/json")
	}
	res := order(strings.NewReader(`{}`))
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("first order: %d", res.StatusCode)
	}
	// Over the limit, the body is not even waited for: the answer comes
	// while the client has sent only the start of it, whether its length
	// is declared (and over the size limit) or chunked.
	before := e.backend.count()
	for _, head := range []string{
		"Content-Length: 2097152\r\n\r\n{\"symbol\":",
		"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
	} {
		res := rawRequest(t, e.addr, "POST /api/v1/odr/orders/ HTTP/1.1\r\nHost: x\r\n"+
			"Authorization: Bearer tok\r\nContent-Type: application/json\r\n"+head)
		assertError(t, res, http.StatusTooManyRequests, "throttled")
	}
	if e.backend.count() != before {
		t.Error("a throttled order reached the backend")
	}
	// Without a token: 401 comes first and costs nothing.
	assertError(t, do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader("{}")), http.StatusUnauthorized, "not_authenticated")
}

// down is a store that always fails.
type down struct{}

func (down) Allow(context.Context, string, ratelimit.Limit) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("dial tcp: connection refused")
}

func (down) AllowN(context.Context, string, ratelimit.Limit, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("dial tcp: connection refused")
}

func (down) AllowAll(context.Context, *ratelimit.Request, *ratelimit.Answer) error {
	return errors.New("dial tcp: connection refused")
}

func (down) Refund(context.Context, *ratelimit.Request) error {
	return errors.New("dial tcp: connection refused")
}

func TestStoreDownClosedIs503(t *testing.T) {
	e := startLimited(t, down{}, func(c *config.Config) { c.Limiter.OnStoreError = config.StoreClosed })
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	if res.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", res.Header.Get("Retry-After"))
	}
	assertError(t, res, http.StatusServiceUnavailable, "rate_limit_unavailable")
	if e.backend.count() != 0 {
		t.Error("request reached the backend")
	}
}

func TestReloadChangesLimits(t *testing.T) {
	var cfg *config.Config
	e := startLimited(t, nil, func(c *config.Config) { smallMatches(c); cfg = c })
	get := func() int {
		res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for i := 0; i < 3; i++ {
		get()
	}
	if c := get(); c != 429 {
		t.Fatalf("4th request: %d", c)
	}
	next := config.Default()
	next.Upstream = cfg.Upstream
	next.Route("list_matches").Limits[0].Rate = config.Rate{N: 100, Period: time.Minute}
	next.Route("list_matches").Limits[0].Burst = 0
	next.Route("list_matches").Limits[0].Name = "per_minute"
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	e.gw.Reload(next, limiter.Compile(next, nil), nil)
	res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("RateLimit-Policy"), `"per_minute";q=100`) {
		t.Errorf("after reload: %d %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
}

// TestRateLimitFieldsTellTheStateAfterTheAnswer: every answer's rate-limit
// fields describe the client's limits as the store holds them after it.
// Two limits on one route, the second with the smaller burst: a bulk above
// the second's burst (413) shows the first uncharged; a bulk refused for
// its size (429) shows what it left; a bulk shed while the backend is full
// (503, its charge given back) shows what the answer before it showed;
// requests the second limit refuses charge the first nothing. On the
// memory store and on Redis behind the deny cache.
func TestRateLimitFieldsTellTheStateAfterTheAnswer(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T) ratelimit.Store
	}{{"memory", func(*testing.T) ratelimit.Store { return ratelimit.NewMemory(ratelimit.MemoryOptions{}) }}}
	if !testing.Short() {
		stores = append(stores, struct {
			name  string
			store func(t *testing.T) ratelimit.Store
		}{"redis", func(t *testing.T) ratelimit.Store {
			rl := newTestRedisLimits(t)
			t.Cleanup(func() { _ = rl.Close() })
			return ratelimit.NewDenyCache(rl, 100, nil)
		}})
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			release, held := make(chan struct{}), make(chan struct{})
			free := sync.OnceFunc(func() { close(release) })
			defer free() // on failure too, so that the held request ends
			e := startOrdersStore(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/mkt/currencies/" {
					close(held)
					<-release
					w.WriteHeader(http.StatusOK)
					return
				}
				placedBulk(w, r)
			}, nil, func(c *config.Config) {
				c.Validation.Bulk.MaxOrders = 20
				c.Route("place_order").Limits = []config.Limit{
					{Name: "hourly", Key: config.KeyToken, When: config.WhenAlways, Rate: config.Rate{N: 10, Period: time.Hour}, Burst: 10},
					{Name: "minute", Key: config.KeyToken, When: config.WhenAlways, Rate: config.Rate{N: 3, Period: time.Minute}, Burst: 3},
				}
				// Tokens of the pro tier place bulks of up to 20; the
				// test's token is in no tier.
				c.TokensFile = "tokens.yaml"
				pro := config.TierLimit{Rate: config.Rate{N: 100, Period: time.Hour}, Burst: 20}
				c.Tiers = map[string]map[string]config.TierLimit{"pro": {"place_order": pro}}
				c.Overload.FixedLimit = 1
				c.Overload.MaxWait.Place = 20 * time.Millisecond
			}, st.store(t), nil)
			var last fields
			step := func(orders, status int, code string, want fields) {
				t.Helper()
				res := postBulk(t, e, bulkOf(orders, ""))
				if code != "" {
					assertError(t, res, status, code)
				} else if res.Body.Close(); res.StatusCode != status {
					t.Fatalf("bulk of %d: %d, want %d", orders, res.StatusCode, status)
				}
				got := rateLimitFields(t, res)
				// The clock moves on between answers: t may be a second
				// less than the state it describes.
				if got.name != want.name || got.r != want.r || got.t > want.t || got.t < want.t-1 {
					t.Fatalf("bulk of %d (%d): RateLimit %s r=%d t=%d, want %s r=%d t=%d", orders, status, got.name, got.r, got.t, want.name, want.r, want.t)
				}
				if ra := res.Header.Get("Retry-After"); status == http.StatusTooManyRequests && ra != strconv.FormatInt(got.t, 10) {
					t.Errorf("Retry-After %s, t=%d: they differ", ra, got.t)
				}
				last = got
			}
			step(1, http.StatusCreated, "", fields{"minute", 2, 20})
			step(4, http.StatusRequestEntityTooLarge, CodeBulkExceedsLimit, fields{"hourly", 9, 360})
			step(3, http.StatusTooManyRequests, "throttled", fields{"minute", 2, 20})
			before := last
			done := make(chan struct{})
			go func() { // holds the one slot until released
				defer close(done)
				res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
				res.Body.Close()
			}()
			<-held
			step(2, http.StatusServiceUnavailable, "overloaded", before)
			free()
			<-done
			step(2, http.StatusCreated, "", fields{"minute", 0, 60})
			for range 3 {
				step(1, http.StatusTooManyRequests, "throttled", fields{"minute", 0, 20})
			}
			step(4, http.StatusRequestEntityTooLarge, CodeBulkExceedsLimit, fields{"hourly", 7, 1080})
			if n := e.backend.count(); n != 3 { // two bulks and the held request
				t.Errorf("backend saw %d requests, want 3", n)
			}
		})
	}
}

// fields are the parts of a RateLimit field.
type fields struct {
	name string
	r, t int64
}

// rateLimitFields parses res's RateLimit field ("name";r=R;t=T).
func rateLimitFields(t *testing.T, res *http.Response) fields {
	t.Helper()
	v := res.Header.Get("RateLimit")
	name, rest, ok1 := strings.Cut(strings.TrimPrefix(v, `"`), `";r=`)
	r, tt, ok2 := strings.Cut(rest, ";t=")
	var f fields
	var err1, err2 error
	f.name = name
	f.r, err1 = strconv.ParseInt(r, 10, 64)
	f.t, err2 = strconv.ParseInt(tt, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		t.Fatalf("RateLimit %q", v)
	}
	return f
}

// TestTokenIDPerConnection sends requests with two tokens in turn on one
// connection, whose last token's id the gateway keeps (tokenMemo): each
// token is counted in its own limit, never in the other's, whichever came
// last; and the token the connection last sent, spelled otherwise (a
// padded JWT), is refused as any non-canonical token is.
func TestTokenIDPerConnection(t *testing.T) {
	e := startLimited(t, nil, func(c *config.Config) {
		rt := c.Route("list_matches")
		rt.Auth = config.AuthOptional
		rt.Limits = []config.Limit{{Key: config.KeyToken, When: config.WhenToken, Rate: config.Rate{N: 2, Period: time.Minute}}}
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func(token string) *http.Response {
		t.Helper()
		fmt.Fprintf(conn, "GET /api/v1/mth/matches/BTC_USDT/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	a, b := "eyJhIjoxfQ.eyJiIjoyfQ.c2lnYQ", "eyJhIjoxfQ.eyJiIjoyfQ.c2lnYg"
	steps := []struct {
		token  string
		status int
		left   string // the RateLimit header's remaining, for a 200
	}{
		{a, 200, "1"}, {b, 200, "1"}, {b, 200, "0"}, {a, 200, "0"}, {a, 429, ""}, {b, 429, ""},
		{a + "=", 401, ""}, // the last token accepted, padded: not canonical
	}
	for i, s := range steps {
		res := send(s.token)
		if res.StatusCode != s.status {
			t.Fatalf("request %d (token %q): %d, want %d", i, s.token, res.StatusCode, s.status)
		}
		if want := `"token";r=` + s.left + ";"; s.status == 200 && !strings.HasPrefix(res.Header.Get("RateLimit"), want) {
			t.Errorf("request %d: RateLimit %q, want prefix %q", i, res.Header.Get("RateLimit"), want)
		}
	}
}
