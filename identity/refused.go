package identity

import (
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/exgate/exgate/internal/expiring"
)

// Refused tokens. Verifying a forged RS256 token costs tens of
// microseconds of CPU (its signature is checked), while a verified token is
// answered from the cache; without a cache of refusals, one client
// replaying a forged token would cost that at every request. A token
// refused for a reason the same token cannot outgrow is answered from
// refusedCache for at most refusedTTL:
//
//   - bad_signature, bad_algorithm, unknown_key: decided by the keys. With
//     static keys and a JWKS file they never change; under a JWKS URL each
//     refusal records the key set's generation and is forgotten once a
//     fetch brings another set, and an unknown_key refusal is not answered
//     while a fetch is due, so that the token that names a new key still
//     makes exgate fetch it (a good token is refused no longer than
//     without the cache: at most jwks_min_interval);
//   - malformed, missing_claim, wrong_type, wrong_issuer, wrong_audience:
//     fixed by the token's bytes and the configuration;
//   - expired: time only moves on;
//   - not_yet_valid and issued_in_future: only until the instant the token
//     becomes valid (nbf or iat, less the leeway).
//
// A token whose spelling is not canonical, or that is not a JWT at all,
// is refused before the cache is asked, at less cost than a lookup, and is
// never stored: what fills the cache costs a parse at least. The cache is
// bounded (identity.jwt.refused_cache_size, evicting the entries that
// expire soonest), so a flood of distinct tokens displaces other refusals
// and nothing else.

// refusedTTL is the longest a refusal is answered from the cache.
const refusedTTL = time.Minute

// refusedCache maps tokens, by their hashes (tokenHashes; never the
// tokens themselves), to their refusals.
type refusedCache struct {
	hashes tokenHashes
	m      *expiring.Map[refusal]
}

// refusal is a cached refusal.
type refusal struct {
	check  uint64 // the token's second hash
	reason Reason
	keys   uint64 // the JWKS URL's key-set generation it was decided under
}

func newRefusedCache(size int) *refusedCache {
	return &refusedCache{hashes: newTokenHashes(), m: expiring.New[refusal](size)}
}

func (c *refusedCache) get(token string, now int64) (refusal, bool) {
	key, check := c.hashes.of(token)
	r, _, ok := c.m.Get(key, now)
	if !ok || r.check != check {
		return refusal{}, false
	}
	return r, true
}

func (c *refusedCache) put(token string, r refusal, until, now int64) {
	key, check := c.hashes.of(token)
	r.check = check
	c.m.Put(key, r, until, now)
}

// keyDependent reports whether a refusal depends on the keys in force.
func keyDependent(r Reason) bool {
	return r == ReasonSignature || r == ReasonAlgorithm || r == ReasonUnknownKey
}

// keyGeneration is the generation of the JWKS URL's key set, read before
// a token is verified so that a refusal decided under an older set is
// recorded as such; 0 without a JWKS URL.
func (v *Verifier) keyGeneration() uint64 {
	if v.remote == nil {
		return 0
	}
	return v.remote.generation()
}

// refusedBefore answers a token refused before, when its refusal still
// holds under the key set of generation keys.
func (v *Verifier) refusedBefore(token string, keys uint64, now int64) (Reason, bool) {
	if v.refused == nil {
		return "", false
	}
	r, ok := v.refused.get(token, now)
	if !ok {
		return "", false
	}
	if v.remote != nil && keyDependent(r.reason) {
		if r.keys != keys {
			return "", false // the key set changed since
		}
		if r.reason == ReasonUnknownKey && v.remote.fetchDue(now) {
			return "", false // this token may be the one that names a new key
		}
	}
	if v.onRefused != nil {
		v.onRefused(r.reason)
	}
	return r.reason, true
}

// rememberRefusal caches the refusal of token, decided under the key set
// of generation keys, until it may no longer hold.
func (v *Verifier) rememberRefusal(token string, reason Reason, claims jwt.MapClaims, keys uint64, now int64) {
	if v.refused == nil {
		return
	}
	until := now + int64(refusedTTL)
	var valid *jwt.NumericDate // when the token becomes valid
	switch reason {
	case ReasonNotYetValid:
		valid, _ = claims.GetNotBefore()
	case ReasonIssuedFuture:
		valid, _ = claims.GetIssuedAt()
	}
	if reason == ReasonNotYetValid || reason == ReasonIssuedFuture {
		if valid == nil {
			return
		}
		until = min(until, valid.UnixNano()-v.leeway)
	}
	if until <= now {
		return
	}
	v.refused.put(token, refusal{reason: reason, keys: keys}, until, now)
}
