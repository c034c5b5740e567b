package identity

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/exgate/exgate/config"
)

// cachedRefusals counts the refusals a Verifier answers from its cache of
// refused tokens, by reason.
func cachedRefusals(v *Verifier) map[Reason]int {
	hits := map[Reason]int{}
	v.onRefused = func(r Reason) { hits[r]++ }
	return hits
}

// TestRefusedTokensCached: a token refused for a reason it cannot outgrow
// is answered from the cache at its next request, with the same reason,
// for at most refusedTTL; a token not in canonical spelling is refused
// before the cache is asked and never stored; a not-yet-valid token is
// answered from the cache only until it becomes valid, then verifies.
func TestRefusedTokensCached(t *testing.T) {
	k := testKeys()
	c := newClock()
	v := newVerifier(t, c, func(j *config.JWT) {
		j.Keys = append(j.Keys, config.JWTKey{ID: "rsa", Algorithms: []string{"RS256"}, PublicKeyFile: writePublic(t, &k.rsa.PublicKey)})
	})
	hits := cachedRefusals(v)
	hs := func(over jwt.MapClaims) string {
		return sign(t, c, jwt.SigningMethodHS256, []byte(testSecret), "", over)
	}
	for _, tc := range []struct {
		name   string
		token  string
		reason Reason
		cached bool
	}{
		{"forged RS256 signature", sign(t, c, jwt.SigningMethodRS256, k.rsa2, "rsa", nil), ReasonSignature, true},
		{"forged HS256 signature", sign(t, c, jwt.SigningMethodHS256, []byte("another-secret-0123456789"), "", nil), ReasonSignature, true},
		{"algorithm no key allows", sign(t, c, jwt.SigningMethodRS512, k.rsa, "rsa", nil), ReasonAlgorithm, true},
		{"alg none", sign(t, c, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", nil) + "AA", ReasonAlgorithm, true},
		{"unknown kid", sign(t, c, jwt.SigningMethodRS256, k.rsa, "nope", nil), ReasonUnknownKey, true},
		{"malformed", "eyJ4.eyJ4.eyJ4", ReasonMalformed, true},
		{"expired", hs(jwt.MapClaims{"exp": c.now().Add(-time.Hour).Unix()}), ReasonExpired, true},
		{"refresh token", hs(jwt.MapClaims{"token_type": "refresh"}), ReasonWrongType, true},
		{"no user", hs(jwt.MapClaims{"user_id": nil}), ReasonMissingClaim, true},
		{"not canonical", hs(nil) + "=", ReasonNoncanonical, false},
		{"not a JWT", "opaque-token", ReasonMalformed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(hits)
			for i := range 3 {
				if _, r := v.Verify(tc.token); r != tc.reason {
					t.Fatalf("request %d: reason %q, want %q", i, r, tc.reason)
				}
			}
			want := 0
			if tc.cached {
				want = 2 // every request after the first
			}
			if hits[tc.reason] != want {
				t.Fatalf("%d of 3 refusals answered from the cache, want %d", hits[tc.reason], want)
			}
		})
	}

	t.Run("refusals expire", func(t *testing.T) {
		tok := sign(t, c, jwt.SigningMethodRS256, k.rsa2, "rsa", jwt.MapClaims{"jti": "expire"})
		clear(hits)
		v.Verify(tok)
		v.Verify(tok)
		c.add(refusedTTL)
		v.Verify(tok)
		if hits[ReasonSignature] != 1 {
			t.Fatalf("%d refusals from the cache, want 1 (verified again after %s)", hits[ReasonSignature], refusedTTL)
		}
	})

	for _, tc := range []struct {
		claim  string
		reason Reason
	}{{"nbf", ReasonNotYetValid}, {"iat", ReasonIssuedFuture}} {
		t.Run(tc.claim+" in the future", func(t *testing.T) {
			tok := hs(jwt.MapClaims{tc.claim: c.now().Add(20 * time.Second).Unix(), "exp": c.now().Add(time.Hour).Unix()})
			clear(hits)
			c.add(-40 * time.Second) // 60s early; the leeway is 30s
			for range 2 {
				if _, r := v.Verify(tok); r != tc.reason {
					t.Fatalf("reason %q, want %q", r, tc.reason)
				}
			}
			if hits[tc.reason] != 1 {
				t.Fatalf("%d refusals from the cache, want 1", hits[tc.reason])
			}
			c.add(31 * time.Second) // within the leeway of the claim: valid
			if id, r := v.Verify(tok); r != "" || id.User != "42" {
				t.Fatalf("a token that became valid: %+v %q", id, r)
			}
			c.add(9 * time.Second)
		})
	}
}

// TestRefusedTokenNewKey: refusals that depend on the keys do not outlive
// a JWKS fetch that brings another key set. A token naming a kid the
// issuer publishes later is refused (from the cache, as without it) only
// until a fetch is due again, and then its request fetches the new key
// and verifies; a token refused for its signature verifies as soon as a
// refresh brings the key that signed it under its kid.
func TestRefusedTokenNewKey(t *testing.T) {
	k := testKeys()
	c := newClock()
	k1 := jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}
	srv := newJWKSServer(t, k1)
	v := newVerifier(t, c, func(j *config.JWT) {
		j.Keys = nil
		j.JWKSURL = config.MustURL(srv.URL + "/jwks")
		j.JWKSAlgorithms = []string{"RS256", "ES256"}
		j.JWKSMinInterval = 10 * time.Second
	})
	hits := cachedRefusals(v)

	t.Run("unknown kid, then published", func(t *testing.T) {
		tok := sign(t, c, jwt.SigningMethodES256, k.ec, "k2", nil)
		for range 3 {
			if _, r := v.Verify(tok); r != ReasonUnknownKey {
				t.Fatalf("k2 before it is published: %q", r)
			}
		}
		if hits[ReasonUnknownKey] != 2 {
			t.Fatalf("%d unknown_key refusals from the cache, want 2", hits[ReasonUnknownKey])
		}
		srv.set(t, k1, jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "k2", Algorithm: "ES256", Use: "sig"})
		before := srv.fetches.Load()
		c.add(10 * time.Second) // a fetch is due again
		if id, r := v.Verify(tok); r != "" || id.User != "42" {
			t.Fatalf("k2 once published and a fetch is due: %+v %q", id, r)
		}
		if n := srv.fetches.Load() - before; n != 1 {
			t.Fatalf("%d fetches, want 1", n)
		}
	})

	t.Run("bad signature, then the key rotates under its kid", func(t *testing.T) {
		tok := sign(t, c, jwt.SigningMethodRS256, k.rsa2, "k1", nil)
		clear(hits)
		for range 2 {
			if _, r := v.Verify(tok); r != ReasonSignature {
				t.Fatalf("before the rotation: %q", r)
			}
		}
		if hits[ReasonSignature] != 1 {
			t.Fatalf("%d bad_signature refusals from the cache, want 1", hits[ReasonSignature])
		}
		srv.set(t, jose.JSONWebKey{Key: &k.rsa2.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"})
		c.add(10 * time.Second)
		v.remote.fetchIfDue(t.Context()) // the periodic refresh
		if id, r := v.Verify(tok); r != "" || id.User != "42" {
			t.Fatalf("after the refresh brought its key: %+v %q", id, r)
		}
	})

	t.Run("reasons that keys do not decide survive a refresh", func(t *testing.T) {
		tok := sign(t, c, jwt.SigningMethodRS256, k.rsa2, "k1", jwt.MapClaims{"exp": c.now().Add(-time.Hour).Unix()})
		clear(hits)
		v.Verify(tok)
		c.add(10 * time.Second)
		v.remote.fetchIfDue(t.Context())
		if _, r := v.Verify(tok); r != ReasonExpired || hits[ReasonExpired] != 1 {
			t.Fatalf("expired token after a refresh: %q, %d from the cache", r, hits[ReasonExpired])
		}
	})
}

// TestRefusedCacheBounded floods the cache of refused tokens with distinct
// forged tokens: it never holds more than its bound.
func TestRefusedCacheBounded(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, func(j *config.JWT) { j.RefusedCacheSize = 128 })
	for i := range 2000 {
		v.Verify(sign(t, c, jwt.SigningMethodHS256, []byte("another-secret-0123456789"), "", jwt.MapClaims{"jti": fmt.Sprint(i)}))
	}
	if n := v.refused.m.Len(); n > 128 || n == 0 {
		t.Fatalf("%d refused tokens held, want 1..128", n)
	}
}

// TestRefusedCacheOff: refused_cache_size 0 keeps no refusal.
func TestRefusedCacheOff(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, func(j *config.JWT) { j.RefusedCacheSize = 0 })
	hits := cachedRefusals(v)
	tok := sign(t, c, jwt.SigningMethodHS256, []byte("another-secret-0123456789"), "", nil)
	for range 3 {
		if _, r := v.Verify(tok); r != ReasonSignature {
			t.Fatal(r)
		}
	}
	if v.refused != nil || len(hits) != 0 {
		t.Fatalf("refusals answered from a cache that is off: %v", hits)
	}
}
