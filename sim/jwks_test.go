package sim

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// TestRS256Tokens: with a signing key the server issues RS256 tokens
// carrying its key's kid, accepts them, refuses HS256 tokens (even of the
// development secret) and publishes the key as a JWKS whose key verifies
// the tokens; without one it publishes nothing.
func TestRS256Tokens(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{SigningKey: key}, false)

	res := h.do(t, "GET", "/.well-known/jwks.json", "", nil)
	if res.status != http.StatusOK || res.header.Get("Content-Type") != "application/json" {
		t.Fatalf("jwks: %d %s", res.status, res.raw)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(res.raw, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("jwks %s: %v", res.raw, err)
	}
	jwk := set.Keys[0]
	if jwk.KeyID == "" || jwk.Algorithm != "RS256" || jwk.Use != "sig" || !jwk.IsPublic() {
		t.Fatalf("jwks key %+v", jwk)
	}

	// The access token the harness got at start, and one from the endpoint.
	res = h.do(t, "POST", "/api/v1/usr/authenticate/", "", map[string]string{"api_key": "dev", "secret_key": "dev"})
	var tok struct{ Access, Refresh string }
	if err := json.Unmarshal(res.raw, &tok); err != nil || res.status != http.StatusOK {
		t.Fatalf("authenticate: %d %s", res.status, res.raw)
	}
	for _, access := range []string{h.access, tok.Access} {
		parsed, err := jwt.Parse(access, func(tk *jwt.Token) (any, error) {
			if tk.Header["kid"] != jwk.KeyID {
				t.Errorf("token kid %v, the JWKS says %s", tk.Header["kid"], jwk.KeyID)
			}
			return jwk.Key, nil
		}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(h.clock.Now))
		if err != nil || !parsed.Valid {
			t.Fatalf("the JWKS key does not verify the token: %v", err)
		}
		if res := h.do(t, "GET", "/api/v1/odr/orders/", access, nil); res.status != http.StatusOK {
			t.Errorf("RS256 token refused: %d %s", res.status, res.raw)
		}
	}
	hs := New(Options{Now: h.clock.Now})
	forged, _, _ := hs.IssueToken("dev")
	if res := h.do(t, "GET", "/api/v1/odr/orders/", forged, nil); res.status != http.StatusUnauthorized {
		t.Errorf("HS256 token of the development secret: %d, want 401", res.status)
	}
	res = h.do(t, "POST", "/api/v1/usr/refresh_token/", "", map[string]string{"refresh": tok.Refresh})
	if res.status != http.StatusOK {
		t.Errorf("refresh with an RS256 refresh token: %d %s", res.status, res.raw)
	}

	if res := newHarness(t, Options{}, false).do(t, "GET", "/.well-known/jwks.json", "", nil); res.status != http.StatusNotFound {
		t.Errorf("jwks of an HS256 server: %d, want 404", res.status)
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := NewChecked(Options{SigningKey: small}); err == nil {
		t.Error("a 1024-bit signing key accepted")
	}
}
