// Package identity establishes who sent a request: it reads bearer tokens
// in one canonical spelling, verifies JWT access tokens (HMAC, RSA,
// RSA-PSS, ECDSA and EdDSA keys from the environment, PEM files or JWKS
// documents) with github.com/golang-jwt/jwt/v5, and caches what it
// verified, so that rate limits and duplicate protection count per
// verified account rather than per token string (docs/identity.md).
package identity

import "strings"

// IsJWS reports whether token is read as a JWS compact serialization
// (a JWT): it holds two or more dots. JWT libraries split such a token
// into header, payload and signature whatever else it holds, so exgate
// reads it that way too.
func IsJWS(token string) bool {
	i := strings.IndexByte(token, '.')
	return i >= 0 && strings.IndexByte(token[i+1:], '.') >= 0
}

// CanonicalJWS reports whether token is a JWS compact serialization in its
// one canonical spelling: exactly three non-empty segments, each strict
// base64url (RFC 4648 §5 alphabet, no padding, the unused bits of the last
// character zero). JWT libraries decode leniently (golang-jwt and PyJWT
// ignore the unused bits, PyJWT also accepts padding and the standard
// alphabet), so one signed token has many spellings; only this one is
// accepted, so that every token id, bucket and cache key derives from one
// string per token.
func CanonicalJWS(token string) bool {
	for seg := 0; seg < 3; seg++ {
		end := strings.IndexByte(token, '.')
		if seg == 2 {
			if end >= 0 {
				return false // a fourth segment
			}
			end = len(token)
		} else if end < 0 {
			return false
		}
		if !canonicalBase64URL(token[:end]) {
			return false
		}
		if seg < 2 {
			token = token[end+1:]
		}
	}
	return true
}

// canonicalBase64URL reports whether s is non-empty, unpadded base64url
// whose last character carries no set unused bits.
func canonicalBase64URL(s string) bool {
	if s == "" || len(s)%4 == 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b64Value[s[i]] < 0 {
			return false
		}
	}
	last := b64Value[s[len(s)-1]]
	switch len(s) % 4 {
	case 2: // 12 bits for one byte: 4 unused
		return last&0x0f == 0
	case 3: // 18 bits for two bytes: 2 unused
		return last&0x03 == 0
	}
	return true
}

// b64Value maps a byte to its base64url value, or -1.
var b64Value = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()
