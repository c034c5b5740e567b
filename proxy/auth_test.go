package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/identity"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
)

// signedToken returns an HS256 access token as djangorestframework-simplejwt
// writes it.
func signedToken(t testing.TB, secret string, userID any, typ string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"token_type": typ, "user_id": userID, "exp": time.Now().Add(5 * time.Minute).Unix(),
		"iat": time.Now().Unix(), "jti": time.Now().String(),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// spellings returns other spellings of a canonical JWT that lenient
// decoders read as the same token: the unused bits of the signature's last
// character set, padding, and the standard alphabet.
func spellings(token string) map[string]string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := map[string]string{}
	last := strings.IndexByte(alphabet, token[len(token)-1])
	sig := token[strings.LastIndexByte(token, '.')+1:]
	unused := map[int]int{2: 4, 3: 2}[len(sig)%4]
	for bits := 1; bits < 1<<unused; bits++ {
		out["unused bits "+string(rune('0'+bits))] = token[:len(token)-1] + string(alphabet[last|bits])
	}
	out["padding"] = token + strings.Repeat("=", 4-len(sig)%4)
	std := strings.NewReplacer("-", "+", "_", "/").Replace(token)
	if std == token {
		std = token[:len(token)-1] + "+" // still no token: '+' is refused
	}
	out["standard alphabet"] = std
	out["fourth segment"] = token + ".AA"
	return out
}

// TestOneTokenOneSpelling sends the canonical spelling of a token, with
// the scheme in any case, and its other spellings: the canonical one
// reaches the backend as exactly "Bearer <token>"; every other spelling is
// refused by exgate with 401 token_not_valid and reaches nothing.
func TestOneTokenOneSpelling(t *testing.T) {
	e := startLimited(t, nil, nil)
	token := signedToken(t, "s3cret", 7, "access")
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		t.Run("scheme "+scheme, func(t *testing.T) {
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", scheme+" "+token)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := e.backend.last(t).Header["Authorization"]; len(got) != 1 || got[0] != "Bearer "+token {
				t.Fatalf("backend got Authorization %q", got)
			}
		})
	}
	for name, spelled := range spellings(token) {
		t.Run(name, func(t *testing.T) {
			n := e.backend.count()
			for _, route := range []string{"GET /api/v1/mkt/markets/", "POST /api/v1/odr/orders/"} {
				method, path, _ := strings.Cut(route, " ")
				res := do(t, method, e.url+path, strings.NewReader(`{}`),
					"Authorization", "Bearer "+spelled, "Content-Type", "application/json")
				assertError(t, res, http.StatusUnauthorized, "token_not_valid")
			}
			if e.backend.count() != n {
				t.Fatal("a refused spelling reached the backend")
			}
		})
	}
}

// fuzzSecret signs the tokens FuzzTokenPath's gateway verifies.
const fuzzSecret = "fuzz-signing-secret-0123456789"

// recordAuth is a backend that answers 200 and keeps the Authorization
// header it last received.
type recordAuth struct{ last atomic.Pointer[string] }

func (b *recordAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	h := strings.Join(r.Header["Authorization"], "\x00")
	b.last.Store(&h)
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"X-Backend": {"1"}}, Body: http.NoBody, Request: r,
	}, nil
}

// FuzzTokenPath sends arbitrary Authorization headers through a gateway
// that verifies tokens: exgate never answers 500, every answer it gives
// itself is the error shape, and whatever reaches the backend carries
// exactly "Bearer <token>" for a token that verifies.
func FuzzTokenPath(f *testing.F) {
	good := signedToken(f, fuzzSecret, 42, "access")
	for _, s := range []string{"Bearer " + good, "bearer " + good, "Bearer " + good + "=", "Bearer a.b.c", "Basic eA==",
		"Bearer " + signedToken(f, fuzzSecret, 42, "refresh"), "Bearer " + signedToken(f, "another-secret-0123456", 42, "access"),
		"Bearer eyJhbGciOiJub25lIn0.eyJ1c2VyX2lkIjo0Mn0.", "Bearer  " + good, ""} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
	}
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	cfg.Identity.Verify = true
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	cfg.Route("place_order").Validate = "" // the token path, not the body
	enf, v := verifiedLimits(f, cfg, ratelimit.NewMemory(ratelimit.MemoryOptions{}), fuzzSecret)
	be := &recordAuth{}
	gw, err := newGateway(cfg, Options{Transport: be, Limits: enf, Rules: limiter.Compile(cfg, nil), Verifier: v})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, auth string, route uint8) {
		target := "/api/v1/mkt/markets/"
		method := "GET"
		if route%2 == 1 {
			method, target = "POST", "/api/v1/odr/orders/"
		}
		req := httptest.NewRequest(method, target, nil)
		if auth != "" {
			req.Header["Authorization"] = []string{auth}
		}
		be.last.Store(nil)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode == http.StatusInternalServerError {
			t.Fatalf("500 for %q", auth)
		}
		if res.Header.Get("X-Backend") != "" {
			got := be.last.Load()
			if auth == "" {
				if method != "GET" || got == nil || *got != "" {
					t.Fatalf("an anonymous %s reached the backend with Authorization %v", method, got)
				}
				return
			}
			tok := auth[len("Bearer "):]
			if got == nil || *got != "Bearer "+tok || !strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
				t.Fatalf("backend got %v for %q", got, auth)
			}
			if _, reason := v.Verify(tok); reason != "" || !identity.CanonicalJWS(tok) {
				t.Fatalf("a token that does not verify (%s) reached the backend: %q", reason, auth)
			}
			return
		}
		var e struct {
			Detail string `json:"detail"`
			Code   string `json:"code"`
		}
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || e.Code == "" || e.Detail == "" || res.StatusCode < 400 {
			t.Fatalf("answer %d to %q is not the error shape: %v %+v", res.StatusCode, auth, err, e)
		}
	})
}

// TestVerifiedTokensShareOneBucket: on one instance, two tokens of one
// account draw on one bucket exactly, a token of another account has its
// own, and the access log names the account by an HMAC prefix only.
func TestVerifiedTokensShareOneBucket(t *testing.T) {
	const secret = "one-instance-secret-0123456789"
	be := &backend{}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Identity.Verify = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// A stopped clock: nothing refills during the run, so the count is
	// exact however long a loaded machine takes.
	stopped := time.Now()
	enf, v := verifiedLimits(t, cfg, ratelimit.NewMemory(ratelimit.MemoryOptions{Now: func() time.Time { return stopped }}), secret)
	e := serve(t, cfg, be, Options{Limits: enf, Rules: limiter.Compile(cfg, nil), Verifier: v})
	tokens := []string{signedToken(t, secret, 42, "access"), signedToken(t, secret, 42, "access")}
	if tokens[0] == tokens[1] {
		t.Fatal("two equal tokens")
	}
	allowed := 0
	for i := 0; i < 230; i++ {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", "Bearer "+tokens[i%2])
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			allowed++
		}
	}
	if allowed != 200 {
		t.Fatalf("two tokens of one account: %d allowed, want exactly 200", allowed)
	}
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", "Bearer "+signedToken(t, secret, "bob", "access"))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("another account: %d", res.StatusCode)
	}
	f := e.logs.FilterMessage("request").All()[0].ContextMap()
	if f["account"] != enf.AccountID("42")[:12] || f["token_id"] != nil {
		t.Fatalf("access log fields %v", f)
	}
	for name, val := range f {
		if s, _ := val.(string); strings.Contains(s, tokens[0][:20]) || s == "42" {
			t.Fatalf("access log field %s holds the token or the user id: %v", name, val)
		}
	}
}

// TestAuthFailuresCountedByReason: each refused token is counted under
// its reason, never under anything of the user or the token.
func TestAuthFailuresCountedByReason(t *testing.T) {
	const secret = "reasons-secret-0123456789abcdef"
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL("http://backend.invalid:9000")
	cfg.Identity.Verify = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	enf, v := verifiedLimits(t, cfg, ratelimit.NewMemory(ratelimit.MemoryOptions{}), secret)
	reg := prometheus.NewRegistry()
	m, _ := metrics.New(reg, metrics.BuildInfo{})
	core, logs := observer.New(zap.InfoLevel)
	gw, err := newGateway(cfg, Options{Transport: backendEcho{}, Limits: enf, Verifier: v, Metrics: m, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	good := signedToken(t, secret, 42, "access")
	for _, tc := range []struct{ token, reason string }{
		{signedToken(t, "some-other-secret-0123456789", 42, "access"), "bad_signature"},
		{signedToken(t, secret, 42, "refresh"), "wrong_type"},
		{signedToken(t, secret, 42, "refresh"), "wrong_type"},
		{good + "=", "noncanonical"},
		{"opaque", "malformed"},
	} {
		req := httptest.NewRequest("GET", "/api/v1/mkt/markets/", nil)
		req.Header["Authorization"] = []string{"Bearer " + tc.token}
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("%q: %d", tc.token, rec.Code)
		}
		// The access log line says why, as the metric does.
		lines := logs.FilterMessage("request").All()
		if f := lines[len(lines)-1].ContextMap(); f["auth_failure"] != tc.reason || f["code"] != "token_not_valid" {
			t.Errorf("%s: access log %v", tc.reason, f)
		}
	}
	want := `
# HELP exgate_auth_failures_total Bearer tokens refused at the edge, by reason (malformed, noncanonical, bad_signature, bad_algorithm, unknown_key, expired, not_yet_valid, issued_in_future, missing_claim, wrong_type, wrong_issuer, wrong_audience).
# TYPE exgate_auth_failures_total counter
exgate_auth_failures_total{reason="bad_signature"} 1
exgate_auth_failures_total{reason="malformed"} 1
exgate_auth_failures_total{reason="noncanonical"} 1
exgate_auth_failures_total{reason="wrong_type"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "exgate_auth_failures_total"); err != nil {
		t.Fatal(err)
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

// verifiedLimits returns the limits over store, keyed with testKeySecret,
// and a verifier of cfg's JWTs signed with secret that names accounts as
// those limits key them: a gateway's Limits and Verifier for
// identity.verify.
func verifiedLimits(tb testing.TB, cfg *config.Config, store ratelimit.Store, secret string) (*limiter.Enforcer, *identity.Verifier) {
	tb.Helper()
	k, err := limiter.NewKeyer([]byte(testKeySecret))
	if err != nil {
		tb.Fatal(err)
	}
	enf, err := limiter.NewEnforcer(limiter.EnforcerOptions{Store: store, Keyer: k})
	if err != nil {
		tb.Fatal(err)
	}
	v, err := identity.New(cfg.Identity.JWT, identity.Options{
		Getenv: func(string) (string, bool) { return secret, true }, AccountKey: enf.AccountID,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return enf, v
}
