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

	"github.com/exgate/exgate/clientip"
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
	pool sync.Pool // *keyHash
}

// keyHash is one HMAC under the secret with the buffers it needs, pooled
// so that working out an id allocates nothing but the id's string.
type keyHash struct {
	h   hash.Hash
	in  []byte // the message, copied: hash.Hash takes bytes, not strings
	sum [sha256.Size]byte
}

// NewKeyer returns a Keyer for secret, which must be at least
// MinSecretLen bytes.
func NewKeyer(secret []byte) (*Keyer, error) {
	if len(secret) < MinSecretLen {
		return nil, errors.New("limiter: the key secret must be at least 16 bytes")
	}
	s := append([]byte(nil), secret...)
	k := &Keyer{}
	k.pool.New = func() any { return &keyHash{h: hmac.New(sha256.New, s)} }
	return k, nil
}

// RandomSecret returns a fresh random secret, for a single process whose
// limits are not shared (memory store, dev mode).
func RandomSecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// maxPooledMessage is the longest message whose copy stays with a pooled
// keyHash; a longer one's buffer is dropped after use.
const maxPooledMessage = 8 << 10

// appendMAC appends to dst the id of the message prefix followed by
// msg: the first TokenIDLen/2 bytes of its HMAC, in lower-case hex.
func (k *Keyer) appendMAC(dst []byte, prefix []byte, msg string) []byte {
	kh := k.pool.Get().(*keyHash)
	kh.h.Reset()
	kh.in = append(append(kh.in[:0], prefix...), msg...)
	_, _ = kh.h.Write(kh.in)
	kh.h.Sum(kh.sum[:0])
	var out [TokenIDLen]byte
	hex.Encode(out[:], kh.sum[:TokenIDLen/2])
	if cap(kh.in) > maxPooledMessage {
		kh.in = nil
	}
	k.pool.Put(kh)
	return append(dst, out[:]...)
}

// appendID appends the id of token to dst.
func (k *Keyer) appendID(dst []byte, token string) []byte {
	return k.appendMAC(dst, nil, token)
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
	return string(k.appendMAC(buf[:0], accountDomain, user))
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

// addrKey appends the key a client address counts under to buf (its
// clientip.AddrGroup under the rules' IPv6 prefix) and returns it, or nil
// for a request without an address.
func (rs *Rules) addrKey(a netip.Addr, buf []byte) []byte {
	if !a.IsValid() {
		return nil
	}
	return clientip.AddrGroup(a, rs.v6Prefix).AppendTo(buf)
}
