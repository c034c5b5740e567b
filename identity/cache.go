package identity

import (
	"hash/maphash"

	"github.com/exgate/exgate/internal/expiring"
)

// tokenHashes keys the identity caches by two 64-bit hashes of a token
// under random seeds, never the token itself: the first picks the entry,
// the second is stored in it and compared, so that two tokens are taken
// for one with probability 2^-128 and no client can choose a collision.
type tokenHashes [2]maphash.Seed

func newTokenHashes() tokenHashes { return tokenHashes{maphash.MakeSeed(), maphash.MakeSeed()} }

func (s tokenHashes) of(token string) (key, check uint64) {
	return maphash.String(s[0], token), maphash.String(s[1], token)
}

// cache holds verified tokens until they expire, so that a token is
// verified once per process. It is bounded (internal/expiring: a full
// shard drops its expired entries, then the one of a sample that expires
// soonest).
type cache struct {
	hashes tokenHashes
	m      *expiring.Map[verified]
}

// verified is a cached identity.
type verified struct {
	check uint64 // the token's second hash
	id    Identity
}

func newCache(size int) *cache {
	return &cache{hashes: newTokenHashes(), m: expiring.New[verified](size)}
}

// get returns the identity cached for token while it is valid at now.
func (c *cache) get(token string, now int64) (Identity, bool) {
	key, check := c.hashes.of(token)
	e, _, ok := c.m.Get(key, now)
	if !ok || e.check != check {
		return Identity{}, false
	}
	return e.id, true
}

// put caches id for token until until (unix ns).
func (c *cache) put(token string, id Identity, until, now int64) {
	key, check := c.hashes.of(token)
	c.m.Put(key, verified{check: check, id: id}, until, now)
}

// len returns the number of entries, for tests.
func (c *cache) len() int { return c.m.Len() }
