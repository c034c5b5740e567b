package limiter

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/netip"
	"sync"
)

// TokenIDLen is the length of a token id: 32 lower-case hex digits, the
// first 128 bits of HMAC-SHA256(secret, token).
const TokenIDLen = 32

// MinSecretLen is the shortest key secret accepted, in bytes.
const MinSecretLen = 16

// Keyer turns bearer tokens into token ids: HMAC-SHA256 of the token
// under a secret, so that a raw token never reaches Redis, logs or
// metrics, and an id cannot be turned back into its token. Every replica
// sharing limits must use the same secret. It is safe for concurrent use.
type Keyer struct {
	pool sync.Pool // hash.Hash (HMAC under the secret)
}

// NewKeyer returns a Keyer for secret, which must be at least
// MinSecretLen bytes.
func NewKeyer(secret []byte) (*Keyer, error) {
	if len(secret) < MinSecretLen {
		return nil, errors.New("limiter: the key secret must be at least 16 bytes")
	}
	s := append([]byte(nil), secret...)
	k := &Keyer{}
	k.pool.New = func() any { return hmac.New(sha256.New, s) }
	return k, nil
}

// RandomSecret returns a fresh random secret, for a single process whose
// limits are not shared (memory backend, dev mode).
func RandomSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// appendID appends the id of token to dst.
func (k *Keyer) appendID(dst []byte, token string) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	_, _ = h.Write([]byte(token))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	k.pool.Put(h)
	var out [TokenIDLen]byte
	hex.Encode(out[:], sum[:TokenIDLen/2])
	return append(dst, out[:]...)
}

// ID returns the token id of token.
func (k *Keyer) ID(token string) string {
	var buf [TokenIDLen]byte
	return string(k.appendID(buf[:0], token))
}

// AccountID returns the key of a verified account: the HMAC of its user
// claim under the secret, in a domain of its own (a NUL byte, which no
// token holds, separates it from token ids), so that a user id never
// reaches Redis or logs and no token id equals an account's key.
func (k *Keyer) AccountID(user string) string {
	var buf [TokenIDLen]byte
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	_, _ = h.Write(accountDomain)
	_, _ = h.Write([]byte(user))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	k.pool.Put(h)
	hex.Encode(buf[:], sum[:TokenIDLen/2])
	return string(buf[:])
}

var accountDomain = []byte("account\x00")

// IsTokenID reports whether s has the form of a token id.
func IsTokenID(s string) bool {
	if len(s) != TokenIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// AddrGroup returns the address a client is limited as: IPv4 addresses
// as they are, IPv6 addresses reduced to their first v6Prefix bits (a
// /64 is what one subscriber usually gets), so that a client cannot
// multiply its allowance by cycling through its own IPv6 range.
func AddrGroup(a netip.Addr, v6Prefix int) netip.Addr {
	a = a.Unmap()
	if a.Is6() && v6Prefix > 0 && v6Prefix < 128 {
		if p, err := a.WithZone("").Prefix(v6Prefix); err == nil {
			return p.Addr()
		}
	}
	return a.WithZone("")
}
