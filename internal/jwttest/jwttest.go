// Package jwttest signs JSON Web Tokens and encodes public keys for tests
// of token verification: tokens the way an issuer such as
// djangorestframework-simplejwt signs them, keys the way an operator hands
// them to exgate (a PEM "PUBLIC KEY" file).
package jwttest

import (
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Sign returns a token signed with key by m whose claims are claims with
// over applied: a value in over replaces the claim, a nil value deletes
// it. kid, when not "", is set in the token's header. claims is not
// modified.
func Sign(t testing.TB, m jwt.SigningMethod, key any, kid string, claims, over jwt.MapClaims) string {
	t.Helper()
	c := maps.Clone(claims)
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SignPayload returns a token signed with key by m whose payload is the
// JSON text payload as given, byte for byte: claims a map cannot hold,
// such as one name in two spellings in a chosen order, or a name twice.
func SignPayload(t testing.TB, m jwt.SigningMethod, key any, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"` + m.Alg() + `","typ":"JWT"}`))
	signing := head + "." + enc.EncodeToString([]byte(payload))
	sig, err := m.Sign(signing, key)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// PublicKeyPEM returns pub encoded as a PEM "PUBLIC KEY" block (PKIX).
func PublicKeyPEM(t testing.TB, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// WritePublicKey writes pub as a PEM "PUBLIC KEY" file named name in a new
// temporary directory of t and returns the file's path.
func WritePublicKey(t testing.TB, pub crypto.PublicKey, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, PublicKeyPEM(t, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
