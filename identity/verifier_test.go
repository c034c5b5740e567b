package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/jwttest"
)

const testSecret = "test-hmac-secret-0123456789abcdef"

// testKeys are signing keys made once per test binary.
var testKeys = sync.OnceValue(func() (k struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}) {
	k.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.rsa2, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, k.ed, _ = ed25519.GenerateKey(rand.Reader)
	return k
})

// writePublic writes pub as a PEM "PUBLIC KEY" file and returns its path.
func writePublic(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	return jwttest.WritePublicKey(t, pub, "key.pem")
}

// clock is a settable clock.
type clock struct{ t atomic.Int64 }

func newClock() *clock               { c := &clock{}; c.t.Store(time.Now().UnixNano()); return c }
func (c *clock) now() time.Time      { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) { c.t.Add(int64(d)) }

func accountKey(u string) string { return "acct:" + u }

// sign returns a token with the given claims over defaults (access
// token of user 42, valid for 5 minutes from c).
func sign(t testing.TB, c *clock, m jwt.SigningMethod, key any, kid string, over jwt.MapClaims) string {
	t.Helper()
	now := c.now()
	claims := jwt.MapClaims{"token_type": "access", "user_id": 42, "exp": now.Add(5 * time.Minute).Unix(),
		"iat": now.Unix(), "jti": "j"}
	return jwttest.Sign(t, m, key, kid, claims, over)
}

func newVerifier(t testing.TB, c *clock, mut func(*config.JWT)) *Verifier {
	t.Helper()
	cfg := config.DefaultIdentity().JWT
	cfg.Keys[0].SecretEnv = "TEST_SECRET"
	if mut != nil {
		mut(&cfg)
	}
	v, err := New(cfg, Options{
		Getenv: func(k string) (string, bool) {
			return map[string]string{"TEST_SECRET": testSecret}[k], k == "TEST_SECRET"
		},
		AccountKey: accountKey, Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	k := testKeys()
	c := newClock()
	v := newVerifier(t, c, func(j *config.JWT) {
		j.Keys = append(j.Keys,
			config.JWTKey{ID: "rsa", Algorithms: []string{"RS256", "PS256"}, PublicKeyFile: writePublic(t, &k.rsa.PublicKey)},
			config.JWTKey{ID: "ec", Algorithms: []string{"ES256"}, PublicKeyFile: writePublic(t, &k.ec.PublicKey)},
			config.JWTKey{ID: "ed", Algorithms: []string{"EdDSA"}, PublicKeyFile: writePublic(t, k.ed.Public())},
		)
		j.TierClaim = "tier"
		j.CacheSize = 0
	})
	rsaPEM, _ := os.ReadFile(v.cfg.Keys[1].PublicKeyFile)
	hs := func(over jwt.MapClaims) string {
		return sign(t, c, jwt.SigningMethodHS256, []byte(testSecret), "", over)
	}
	tests := []struct {
		name   string
		token  string
		reason Reason
		user   string
	}{
		{"HS256", hs(nil), "", "42"},
		{"HS256 string user", hs(jwt.MapClaims{"user_id": "alice"}), "", "alice"},
		{"string user, read as a string", hs(jwt.MapClaims{"user_id": " +0042 "}), "", " +0042 "},
		{"RS256", sign(t, c, jwt.SigningMethodRS256, k.rsa, "rsa", nil), "", "42"},
		{"PS256", sign(t, c, jwt.SigningMethodPS256, k.rsa, "rsa", nil), "", "42"},
		{"ES256", sign(t, c, jwt.SigningMethodES256, k.ec, "ec", nil), "", "42"},
		{"EdDSA", sign(t, c, jwt.SigningMethodEdDSA, k.ed, "ed", nil), "", "42"},
		{"within leeway", hs(jwt.MapClaims{"exp": c.now().Add(-20 * time.Second).Unix()}), "", "42"},
		{"forged signature", hs(nil)[:len(hs(nil))-4] + "AAAA", ReasonSignature, ""},
		{"other secret", sign(t, c, jwt.SigningMethodHS256, []byte("another-secret-0123456789"), "", nil), ReasonSignature, ""},
		{"RS256 by another key", sign(t, c, jwt.SigningMethodRS256, k.rsa2, "rsa", nil), ReasonSignature, ""},
		{"alg none", sign(t, c, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", nil) + "AA", ReasonAlgorithm, ""},
		{"HS256 with the RSA public key's bytes", sign(t, c, jwt.SigningMethodHS256, rsaPEM, "rsa", nil), ReasonAlgorithm, ""},
		{"ES256 on the RSA kid", sign(t, c, jwt.SigningMethodES256, k.ec, "rsa", nil), ReasonAlgorithm, ""},
		{"RS512 not allowed", sign(t, c, jwt.SigningMethodRS512, k.rsa, "rsa", nil), ReasonAlgorithm, ""},
		{"unknown kid", sign(t, c, jwt.SigningMethodRS256, k.rsa, "nope", nil), ReasonUnknownKey, ""},
		{"expired beyond leeway", hs(jwt.MapClaims{"exp": c.now().Add(-31 * time.Second).Unix()}), ReasonExpired, ""},
		{"nbf in the future", hs(jwt.MapClaims{"nbf": c.now().Add(time.Minute).Unix()}), ReasonNotYetValid, ""},
		{"iat in the future", hs(jwt.MapClaims{"iat": c.now().Add(time.Minute).Unix()}), ReasonIssuedFuture, ""},
		{"no exp", hs(jwt.MapClaims{"exp": nil}), ReasonMissingClaim, ""},
		{"refresh token", hs(jwt.MapClaims{"token_type": "refresh"}), ReasonWrongType, ""},
		{"no token type", hs(jwt.MapClaims{"token_type": nil}), ReasonWrongType, ""},
		{"no user", hs(jwt.MapClaims{"user_id": nil}), ReasonMissingClaim, ""},
		{"fractional user", hs(jwt.MapClaims{"user_id": 4.5}), ReasonMalformed, ""},
		{"object user", hs(jwt.MapClaims{"user_id": map[string]any{}}), ReasonMalformed, ""},
		{"garbage", "eyJ4.eyJ4.eyJ4", ReasonMalformed, ""},
		{"opaque token", "not-a-jwt", ReasonMalformed, ""},
		{"padding", hs(nil) + "=", ReasonNoncanonical, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, reason := v.Verify(tt.token)
			if reason != tt.reason || id.User != tt.user {
				t.Fatalf("Verify = %+v, %q; want user %q, reason %q", id, reason, tt.user, tt.reason)
			}
			if tt.reason == "" && id.Account != accountKey(tt.user) {
				t.Fatalf("account %q", id.Account)
			}
		})
	}
	t.Run("integer user keys", func(t *testing.T) {
		vi := newVerifier(t, c, func(j *config.JWT) { j.UserClaimType = config.UserClaimInteger; j.CacheSize = 0 })
		for _, tt := range []struct {
			user   any
			want   string
			reason Reason
		}{
			{42, "42", ""},
			{"42", "42", ""},
			{" +0042 ", "42", ""}, // Django's int() reads user 42
			{"4_2", "42", ""},
			{"alice", "", ReasonMalformed}, // no integer: no user of the backend
			{"4.2", "", ReasonMalformed},
		} {
			id, reason := vi.Verify(hs(jwt.MapClaims{"user_id": tt.user}))
			if id.User != tt.want || reason != tt.reason {
				t.Errorf("user_id %#v: Verify = %+v, %q; want user %q, reason %q", tt.user, id, reason, tt.want, tt.reason)
			}
		}
	})
	t.Run("tier claim", func(t *testing.T) {
		if id, _ := v.Verify(hs(jwt.MapClaims{"tier": "vip"})); id.Tier != "vip" {
			t.Fatalf("tier %q", id.Tier)
		}
	})
}

func TestVerifyIssuerAudience(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, func(j *config.JWT) { j.Issuer, j.Audience = "https://issuer", "exchange" })
	hs := func(over jwt.MapClaims) string {
		return sign(t, c, jwt.SigningMethodHS256, []byte(testSecret), "", over)
	}
	for _, tt := range []struct {
		name   string
		claims jwt.MapClaims
		reason Reason
	}{
		{"both", jwt.MapClaims{"iss": "https://issuer", "aud": []string{"other", "exchange"}}, ""},
		{"wrong issuer", jwt.MapClaims{"iss": "https://evil", "aud": "exchange"}, ReasonWrongIssuer},
		{"no issuer", jwt.MapClaims{"aud": "exchange"}, ReasonMissingClaim},
		{"wrong audience", jwt.MapClaims{"iss": "https://issuer", "aud": "other"}, ReasonWrongAudience},
		{"no audience", jwt.MapClaims{"iss": "https://issuer"}, ReasonMissingClaim},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, r := v.Verify(hs(tt.claims)); r != tt.reason {
				t.Fatalf("reason %q, want %q", r, tt.reason)
			}
		})
	}
}

func TestVerifyCache(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, nil)
	tok := sign(t, c, jwt.SigningMethodHS256, []byte(testSecret), "", jwt.MapClaims{"exp": c.now().Add(time.Minute).Unix()})
	if _, r := v.Verify(tok); r != "" {
		t.Fatal(r)
	}
	if v.cache.len() != 1 {
		t.Fatalf("cache holds %d", v.cache.len())
	}
	// Served from the cache: even a parser that refuses everything
	// would not be asked.
	v.parser = jwt.NewParser(jwt.WithValidMethods([]string{"HS512"}))
	if id, r := v.Verify(tok); r != "" || id.User != "42" {
		t.Fatalf("cached: %+v %q", id, r)
	}
	// Past exp + leeway the cache no longer answers, and the token is
	// refused.
	v.parser = jwt.NewParser(jwt.WithTimeFunc(c.now), jwt.WithLeeway(30*time.Second), jwt.WithValidMethods([]string{"HS256"}))
	c.add(time.Minute + 31*time.Second)
	if _, r := v.Verify(tok); r != ReasonExpired {
		t.Fatalf("after expiry: %q", r)
	}
	// Other spellings never share the entry.
	if _, r := v.Verify(tok + "="); r != ReasonNoncanonical {
		t.Fatalf("padded: %q", r)
	}
}

func TestCacheBounded(t *testing.T) {
	const size = 128
	cc := newCache(size)
	for i := 0; i < 10000; i++ {
		cc.put("token-"+string(rune(i)), Identity{User: "u"}, 1<<62, 0)
	}
	if n := cc.len(); n > size {
		t.Fatalf("cache grew to %d", n)
	}
}

// jwksServer serves a JWKS document that the test can replace, and
// counts the fetches.
type jwksServer struct {
	*httptest.Server
	doc     atomic.Value // []byte
	fetches atomic.Int64
	fail    atomic.Bool
}

func newJWKSServer(t *testing.T, keys ...jose.JSONWebKey) *jwksServer {
	s := &jwksServer{}
	s.set(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		if s.fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(s.doc.Load().([]byte))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(t *testing.T, keys ...jose.JSONWebKey) {
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	s.doc.Store(b)
}

func TestJWKSRotation(t *testing.T) {
	k := testKeys()
	c := newClock()
	srv := newJWKSServer(t, jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"})
	v := newVerifier(t, c, func(j *config.JWT) {
		j.Keys = nil
		j.JWKSURL = config.MustURL(srv.URL + "/jwks")
		j.JWKSAlgorithms = []string{"RS256", "ES256"}
		j.JWKSMinInterval = 10 * time.Second
	})
	if srv.fetches.Load() != 1 {
		t.Fatalf("%d fetches at start", srv.fetches.Load())
	}
	if _, r := v.Verify(sign(t, c, jwt.SigningMethodRS256, k.rsa, "k1", nil)); r != "" {
		t.Fatalf("k1: %q", r)
	}

	// The issuer rotates to k2 (an EC key): the first token naming k2
	// makes exgate fetch again, without a restart.
	srv.set(t, jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"},
		jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "k2", Algorithm: "ES256", Use: "sig"})
	c.add(11 * time.Second)
	if _, r := v.Verify(sign(t, c, jwt.SigningMethodES256, k.ec, "k2", nil)); r != "" {
		t.Fatalf("k2 after rotation: %q", r)
	}
	if srv.fetches.Load() != 2 {
		t.Fatalf("%d fetches after rotation", srv.fetches.Load())
	}

	// A flood of unknown kids: at most one fetch per floor interval.
	before := srv.fetches.Load()
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := sign(t, c, jwt.SigningMethodRS256, k.rsa, "unknown-"+strings.Repeat("x", i%7), nil)
			if _, r := v.Verify(tok); r != ReasonUnknownKey {
				t.Errorf("unknown kid: %q", r)
			}
		}()
	}
	wg.Wait()
	if n := srv.fetches.Load() - before; n != 0 {
		t.Fatalf("%d fetches within the floor interval after the last one", n)
	}
	c.add(10 * time.Second)
	for i := 0; i < 50; i++ {
		v.Verify(sign(t, c, jwt.SigningMethodRS256, k.rsa, "unknown-again", nil))
	}
	if n := srv.fetches.Load() - before; n != 1 {
		t.Fatalf("%d fetches in the next interval, want 1", n)
	}

	// The issuer fails: the last good set stays in force.
	srv.fail.Store(true)
	c.add(time.Minute)
	v.remote.fetchIfDue(t.Context())
	if _, r := v.Verify(sign(t, c, jwt.SigningMethodES256, k.ec, "k2", nil)); r != "" {
		t.Fatalf("k2 while the issuer fails: %q", r)
	}
	// A JWKS key allows only what jwks_algorithms and its own alg allow.
	if _, r := v.Verify(sign(t, c, jwt.SigningMethodPS256, k.rsa, "k1", nil)); r != ReasonAlgorithm {
		t.Fatalf("PS256 on an RS256 JWKS key: %q", r)
	}
}

func TestJWKSFileSkipsWhatItMustNotUse(t *testing.T) {
	k := testKeys()
	doc, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: []byte("symmetric-secret-0123456789"), KeyID: "oct", Algorithm: "HS256"},
		{Key: k.ec, KeyID: "private"},
		{Key: &k.rsa.PublicKey, KeyID: "enc", Use: "enc"},
		{Key: &k.ec.PublicKey, KeyID: "ec"},
	}})
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := ReadJWKSFile(p, []string{"ES256", "HS256"})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].kid != "ec" || strings.Join(keys[0].algs, ",") != "ES256" {
		t.Fatalf("keys %+v", keys)
	}
}

func TestStaticKeyProblems(t *testing.T) {
	k := testKeys()
	dir := t.TempDir()
	priv := filepath.Join(dir, "priv.pem")
	der, _ := x509.MarshalPKCS8PrivateKey(k.rsa)
	_ = os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	garbage := filepath.Join(dir, "garbage.pem")
	_ = os.WriteFile(garbage, []byte("not pem"), 0o600)
	for _, tt := range []struct {
		name string
		key  config.JWTKey
		want string
	}{
		{"short secret", config.JWTKey{Algorithms: []string{"HS256"}, SecretEnv: "SHORT"}, "keys[0].secret_env: SHORT must hold an HMAC secret of at least 16 bytes"},
		{"missing file", config.JWTKey{Algorithms: []string{"RS256"}, PublicKeyFile: filepath.Join(dir, "none.pem")}, "no such file"},
		{"private key", config.JWTKey{Algorithms: []string{"RS256"}, PublicKeyFile: priv}, "holds a private key"},
		{"not PEM", config.JWTKey{Algorithms: []string{"RS256"}, PublicKeyFile: garbage}, "no PEM block"},
		{"wrong algorithm", config.JWTKey{Algorithms: []string{"ES256"}, PublicKeyFile: writePublic(t, &k.rsa.PublicKey)}, "a 2048-bit RSA key cannot verify ES256"},
		{"wrong curve", config.JWTKey{Algorithms: []string{"ES384"}, PublicKeyFile: writePublic(t, &k.ec.PublicKey)}, "ECDSA P-256 key cannot verify ES384"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := StaticKeys([]config.JWTKey{tt.key}, func(string) (string, bool) { return "short", true })
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "identity.jwt.keys[0]") {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
