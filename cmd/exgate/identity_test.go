package main

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/jwttest"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/sim"
)

// verifying turns identity verification on with the reference backend's
// secret (the default key reads it from EXGATE_JWT_SECRET, which
// secretEnv answers).
func verifying(c *config.Config) {
	c.Identity.Verify = true
	// The built-in table counted tokens; verification counts accounts.
	for i := range c.Routes {
		for j := range c.Routes[i].Limits {
			if l := &c.Routes[i].Limits[j]; l.Key == config.KeyToken {
				l.Key, l.Name = config.KeyAccount, config.KeyAccount
			}
		}
	}
}

// devToken signs a token as the reference backend does, with claims
// changed by over (nil deletes one).
func devToken(t *testing.T, key any, m jwt.SigningMethod, kid string, over jwt.MapClaims) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"token_type": "access", "user_id": 1, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "jti": "x"}
	return jwttest.Sign(t, m, key, kid, c, over)
}

// TestAccountsShareOneBucketAcrossReplicas: two replicas verify tokens
// and share one real Redis. Two tokens of the account "dev", used
// alternately on both replicas by 50 clients against a 100/hour limit,
// get exactly 100 requests through together; a refreshed token continues
// the same bucket; the second dev account has a bucket of its own.
func TestAccountsShareOneBucketAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	urls, backend := replicas(t, 2, []string{srv.Addr}, func(c *config.Config) {
		verifying(c)
		l := &c.Route("list_markets").Limits[1]
		// Per hour: one request refills every 36s, so the empty bucket
		// stays empty for the refreshed token's request below however
		// slowly a loaded machine gets there.
		l.Rate, l.Burst = config.Rate{N: 100, Period: time.Hour}, 100
		c.Limiter.OnStoreError = config.StoreClosed
		// No shedding: 50 clients of one address are past their share of
		// an overload limit a loaded machine lowered (503 overloaded),
		// which is not what is counted here.
		c.Limiter.Redis.Timeout = time.Second
		c.Overload.Enabled = false
	})
	s := backend.h.(*sim.Server)
	t1, refresh, _ := s.IssueToken("dev")
	t2, _, _ := s.IssueToken("dev")
	other, _, _ := s.IssueToken("dev2")
	if t1 == t2 {
		t.Fatal("the backend issued one token twice")
	}
	var ok, limited, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 6; j++ {
				tok := [2]string{t1, t2}[(i+j)%2]
				switch code, _ := get(t, urls[(i+j/2)%2]+"/api/v1/mkt/markets/", "Authorization", "Bearer "+tok); code {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	refill := int64(time.Since(start) / (36 * time.Second))
	if ok.Load() < 100 || ok.Load() > 100+refill || bad.Load() != 0 {
		t.Fatalf("two tokens of one account on two replicas: %d allowed, %d limited, %d other; want exactly 100 (+%d refilled)",
			ok.Load(), limited.Load(), bad.Load(), refill)
	}

	// A refreshed token is the same account: still limited.
	code, _, b := call(t, "POST", urls[0]+"/api/v1/usr/refresh_token/", `{"refresh":"`+refresh+`"}`, "Content-Type", "application/json")
	var fresh struct{ Access string }
	decodeJSON(t, b, &fresh)
	if code != 200 || fresh.Access == "" || fresh.Access == t1 {
		t.Fatalf("refresh: %d %s", code, b)
	}
	if code, _ := get(t, urls[1]+"/api/v1/mkt/markets/", "Authorization", "Bearer "+fresh.Access); code != 429 {
		t.Fatalf("a refreshed token got %d; it must continue its account's bucket", code)
	}
	// The other account is untouched (a replica may lease a few requests
	// of a key at once, so remaining is a little under 99).
	if code, h := get(t, urls[1]+"/api/v1/mkt/markets/", "Authorization", "Bearer "+other); code != 200 || !strings.Contains(h.Get("RateLimit"), "r=9") {
		t.Fatalf("dev2: %d %q", code, h.Get("RateLimit"))
	}
}

// TestRefusedTokensCostNothing: every token that does not verify is
// answered 401 token_not_valid by exgate on each route that reads tokens,
// with nothing forwarded and not one Redis key written.
func TestRefusedTokensCostNothing(t *testing.T) {
	srv := redistest.Start(t)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := jwttest.PublicKeyPEM(t, &rk.PublicKey)
	pubFile := jwttest.WritePublicKey(t, &rk.PublicKey, "rsa.pem")
	urls, backend := replicas(t, 1, []string{srv.Addr}, func(c *config.Config) {
		verifying(c)
		c.Identity.JWT.Keys = append(c.Identity.JWT.Keys,
			config.JWTKey{ID: "rsa", Algorithms: []string{"RS256"}, PublicKeyFile: pubFile})
	})
	strict, _ := replicas(t, 1, []string{srv.Addr}, func(c *config.Config) {
		verifying(c)
		c.Identity.JWT.Issuer, c.Identity.JWT.Audience = "https://exchange", "api"
	})
	dev := []byte(sim.DevSecret)
	hs := func(over jwt.MapClaims) string { return devToken(t, dev, jwt.SigningMethodHS256, "", over) }
	good := hs(nil)
	now := time.Now()
	tokens := map[string]string{
		"forged signature":                  good[:len(good)-8] + "AAAAAAAA",
		"another secret":                    devToken(t, []byte("not-the-issuer-secret-000"), jwt.SigningMethodHS256, "", nil),
		"alg none":                          devToken(t, jwt.UnsafeAllowNoneSignatureType, jwt.SigningMethodNone, "", nil) + "AA",
		"HS256 with the RSA public key":     devToken(t, pubPEM, jwt.SigningMethodHS256, "rsa", nil),
		"HS256 with the RSA key, no kid":    devToken(t, pubPEM, jwt.SigningMethodHS256, "", nil),
		"RS256 by another RSA key":          devToken(t, mustRSA(t), jwt.SigningMethodRS256, "rsa", nil),
		"expired beyond leeway":             hs(jwt.MapClaims{"exp": now.Add(-31 * time.Second).Unix()}),
		"nbf in the future":                 hs(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()}),
		"refresh token as access":           hs(jwt.MapClaims{"token_type": "refresh"}),
		"garbage":                           "garbage",
		"garbage with dots":                 "eyJ.eyJ.eyJ",
		"padding":                           good + "=",
		"unused bits set":                   good[:len(good)-1] + string(rune(good[len(good)-1]+1)),
		"standard alphabet":                 strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+",
		"four segments":                     good + ".AA",
		"no user":                           hs(jwt.MapClaims{"user_id": nil}),
		"wrong issuer and audience, strict": "strict:" + hs(jwt.MapClaims{"iss": "https://evil", "aud": "other"}),
		"valid elsewhere, strict":           "strict:" + good,
	}
	routes := []struct{ method, path, body string }{
		{"POST", "/api/v1/odr/orders/", `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`},
		{"GET", "/api/v1/mkt/markets/", ""},
	}
	for name, tok := range tokens {
		t.Run(name, func(t *testing.T) {
			base := urls[0]
			if rest, ok := strings.CutPrefix(tok, "strict:"); ok {
				base, tok = strict[0], rest
			}
			for _, r := range routes {
				code, h, b := call(t, r.method, base+r.path, r.body, "Authorization", "Bearer "+tok, "Content-Type", "application/json")
				if code != 401 || errCode(t, b) != "token_not_valid" || !strings.Contains(h.Get("WWW-Authenticate"), "invalid_token") {
					t.Fatalf("%s %s: %d %s", r.method, r.path, code, b)
				}
			}
		})
	}
	if n := backend.proxied.Load(); n != 0 {
		t.Errorf("%d refused requests reached the backend", n)
	}
	if n, err := srv.Client().DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Errorf("Redis holds %d keys (%v) after refused tokens only", n, err)
	}
	// The same gateway accepts the genuine token.
	if code, _, b := call(t, "GET", urls[0]+"/api/v1/mkt/markets/", "", "Authorization", "Bearer "+good); code != 200 {
		t.Fatalf("a valid token: %d %s", code, b)
	}
}

// TestForgedTokenRefusalsCached: a forged token sent three times through
// the gateway is verified once; the two other refusals are answered from
// the cache of refused tokens, counted by reason in
// exgate_auth_failures_cached_total as well as exgate_auth_failures_total,
// and none reaches the backend.
func TestForgedTokenRefusalsCached(t *testing.T) {
	c := &counted{h: sim.New(sim.Options{})}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	cfg.Limiter.Store = config.StoreMemory
	verifying(cfg)
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
	forged := devToken(t, []byte("not-the-issuer-secret-000"), jwt.SigningMethodHS256, "", nil)
	for range 3 {
		code, _, b := call(t, "GET", "http://"+a.addr+"/api/v1/mkt/markets/", "", "Authorization", "Bearer "+forged)
		if code != 401 || errCode(t, b) != "token_not_valid" {
			t.Fatalf("forged token: %d %s", code, b)
		}
	}
	m := scrapeAdmin(t, a.adminAd)
	if got := sample(m, `exgate_auth_failures_total{reason="bad_signature"}`); got != "3" {
		t.Errorf("bad_signature refusals = %q, want 3", got)
	}
	if got := sample(m, `exgate_auth_failures_cached_total{reason="bad_signature"}`); got != "2" {
		t.Errorf("bad_signature refusals from the cache = %q, want 2", got)
	}
	if n := c.proxied.Load(); n != 0 {
		t.Errorf("%d refused requests reached the backend", n)
	}
}

func mustRSA(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestAccountPlacesAnIdentifierOnce: with verification, duplicate
// protection is keyed by the account, so the same order identifier sent
// with two tokens of one account is placed once; the other account's
// identifier space is its own.
func TestAccountPlacesAnIdentifierOnce(t *testing.T) {
	srv := redistest.Start(t)
	urls, backend := replicas(t, 2, []string{srv.Addr}, verifying)
	s := backend.h.(*sim.Server)
	t1, _, _ := s.IssueToken("dev")
	t2, _, _ := s.IssueToken("dev")
	other, _, _ := s.IssueToken("dev2")
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"once-1"}`
	for i, tok := range []string{t1, t2, t1, t2} {
		code, h, b := call(t, "POST", urls[i%2]+"/api/v1/odr/orders/", order, "Authorization", "bearer "+tok, "Content-Type", "application/json")
		if code != 201 || (i > 0) != (h.Get("Idempotent-Replayed") == "true") {
			t.Fatalf("order %d: %d replayed=%q %s", i, code, h.Get("Idempotent-Replayed"), b)
		}
	}
	if n := backend.orders.Load(); n != 1 {
		t.Fatalf("one identifier of one account placed %d times", n)
	}
	if code, h, b := call(t, "POST", urls[0]+"/api/v1/odr/orders/", order, "Authorization", "Bearer "+other, "Content-Type", "application/json"); code != 201 || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the other account: %d %s", code, b)
	}
	if n := backend.orders.Load(); n != 2 {
		t.Fatalf("orders placed: %d, want 2", n)
	}
}

// TestUsersFileReload: an account's tier comes from the users file, and a
// reload (SIGHUP's path) moves it to another tier without a restart.
func TestUsersFileReload(t *testing.T) {
	s := sim.New(sim.Options{})
	backend := httptest.NewServer(s)
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "exgate.yaml")
	conf := fmt.Sprintf(`
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: { url: %q }
server: { drain_delay: 0s }
log: { access: false }
identity: { verify: true, users_file: users.yaml }
tiers: { vip: { list_markets: { rate: 500/1m } } }
`, backend.URL)
	writeFile := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("exgate.yaml", conf)
	writeFile("users.yaml", "users:\n  \"1\": vip\n")
	cfg, err := config.Load(path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv, configPath: path})
	tok, _, _ := s.IssueToken("dev") // user 1
	policy := func() string {
		t.Helper()
		code, h := get(t, "http://"+a.addr+"/api/v1/mkt/markets/", "Authorization", "Bearer "+tok)
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		return h.Get("RateLimit-Policy")
	}
	if p := policy(); !strings.Contains(p, `"account";q=500`) {
		t.Fatalf("vip from the users file: %q", p)
	}
	writeFile("users.yaml", "users: {}\n")
	if err := a.reload(); err != nil {
		t.Fatal(err)
	}
	if p := policy(); !strings.Contains(p, `"account";q=200`) {
		t.Fatalf("after the reload: %q", p)
	}
	writeFile("users.yaml", "users:\n  \"1\": gold\n")
	if err := a.reload(); err == nil || !strings.Contains(err.Error(), `identity.users_file: `) || !strings.Contains(err.Error(), `unknown tier "gold"`) {
		t.Fatalf("a bad users file: %v", err)
	}
}

// TestReferenceBackendRS256ThroughJWKS: the reference backend signing
// with RS256 and exgate verifying with its JWKS, as docs/production.md
// sets them up: the backend's tokens place orders through exgate, and a
// token of the development HS256 secret is refused by exgate itself.
func TestReferenceBackendRS256ThroughJWKS(t *testing.T) {
	key := mustRSA(t)
	s := sim.New(sim.Options{SigningKey: key})
	c := &counted{h: s}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, s.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	verifying(cfg)
	cfg.Identity.JWT.Keys = nil
	cfg.Identity.JWT.JWKSFile, cfg.Identity.JWT.JWKSAlgorithms = jwks, []string{"RS256"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
	waitCatalogue(t, a)
	gw := "http://" + a.addr

	access := authenticate(t, gw)
	if !strings.HasPrefix(access, "eyJhbGciOiJSUzI1NiIs") {
		t.Fatalf("the backend's token is not RS256: %s", access)
	}
	order := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`
	code, _, b := call(t, "POST", gw+"/api/v1/odr/orders/", order, "Content-Type", "application/json", "Authorization", "Bearer "+access)
	if code != 201 {
		t.Fatalf("order with the backend's RS256 token: %d %s", code, b)
	}
	before := c.orders.Load()
	hs, _, _ := sim.New(sim.Options{}).IssueToken("dev")
	code, _, b = call(t, "POST", gw+"/api/v1/odr/orders/", order, "Content-Type", "application/json", "Authorization", "Bearer "+hs)
	if code != 401 || !strings.Contains(string(b), "token_not_valid") || c.orders.Load() != before {
		t.Errorf("order with an HS256 token of the development secret: %d %s, %d orders reached the backend", code, b, c.orders.Load()-before)
	}
}

// TestClaimsReadAlikeByExgateAndBackend: a token that spells user_id
// twice, exactly and in another case, names one user to exgate and to
// the reference backend (both read the exact name, as SimpleJWT does):
// the orders the backend lists for it are that user's, and exgate counts
// it in that user's account bucket. Decoding into a Go struct, the
// backend read the last spelling, another user than exgate's account.
func TestClaimsReadAlikeByExgateAndBackend(t *testing.T) {
	urls, backend := replicas(t, 1, nil, verifying)
	s := backend.h.(*sim.Server)
	base := urls[0] + "/api/v1/odr/orders/"
	genuine := map[int]string{}
	for user, key := range map[int]string{1: "dev", 2: "dev2"} {
		genuine[user], _, _ = s.IssueToken(key)
	}
	order := `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"100","base_amount":"0.001"}`
	if code, _, b := call(t, "POST", base, order, "Authorization", "Bearer "+genuine[1], "Content-Type", "application/json"); code != 201 {
		t.Fatalf("user 1's order: %d %s", code, b)
	}
	now := time.Now()
	for _, tt := range []struct {
		name    string
		payload string
		user    int
	}{
		{"exact name first", `{"token_type":"access","user_id":1,"USER_ID":2,"exp":%d,"iat":%d,"jti":"a"}`, 1},
		{"exact name last", `{"token_type":"access","User_Id":1,"user_id":2,"exp":%d,"iat":%d,"jti":"b"}`, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			crafted := jwttest.SignPayload(t, jwt.SigningMethodHS256, []byte(sim.DevSecret), fmt.Sprintf(tt.payload, now.Add(time.Hour).Unix(), now.Unix()))
			code, h1, want := call(t, "GET", base, "", "Authorization", "Bearer "+genuine[tt.user])
			if code != 200 {
				t.Fatalf("user %d's own token: %d %s", tt.user, code, want)
			}
			code, h2, got := call(t, "GET", base, "", "Authorization", "Bearer "+crafted)
			if code != 200 || string(got) != string(want) {
				t.Errorf("the backend read the token as another user than %d: %d %s, user %d's orders are %s", tt.user, code, got, tt.user, want)
			}
			r1, r2 := accountRemaining(t, h1), accountRemaining(t, h2)
			if r2 != r1-1 {
				t.Errorf("exgate counted the token in another bucket than user %d's account: remaining %d after that account's %d", tt.user, r2, r1)
			}
		})
	}
}

// accountRemaining reads the remaining requests of the "account" limit
// from an answer's RateLimit header.
func accountRemaining(t *testing.T, h http.Header) int {
	t.Helper()
	v := h.Get("RateLimit")
	var n int
	if _, err := fmt.Sscanf(v, `"account";r=%d;`, &n); err != nil {
		t.Fatalf("RateLimit %q: %v", v, err)
	}
	return n
}
