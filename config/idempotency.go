package config

import (
	"strings"
	"time"
)

// Idempotency configures duplicate protection on order identifiers: per
// token, an identifier reaches the backend at most once within
// Retention, and repeats are answered from the first response.
type Idempotency struct {
	// Enabled turns duplicate protection on for orders that carry an
	// identifier. Default true.
	Enabled bool `yaml:"enabled"`
	// Store is duplicate protection's store, "redis" or "memory". Empty
	// means the limiter's store (Config.IdempotencyStore). Redis uses the
	// limiter.redis connection settings, through a client of its own when
	// the limits are kept in memory. Default "".
	Store string `yaml:"store"`
	// Backend is Store's former name, still read: a file or variable
	// that sets it sets Store, with a warning. Default "".
	Backend string `yaml:"backend,omitempty"`
	// Retention is how long an identifier stays taken, and its response
	// replayable, after its last change. Default 24h.
	Retention time.Duration `yaml:"retention"`
	// InFlightTimeout is how long a claimed identifier may wait for the
	// backend's answer before retries are told the outcome is unknown (a
	// replica that crashed mid-request cannot wedge it). It must exceed
	// the timeout of every route with validate: order. Default 30s.
	InFlightTimeout time.Duration `yaml:"in_flight_timeout"`
	// MaxResponseBytes is the largest backend response stored for
	// replay; a larger one makes repeats answer 409 outcome_unknown.
	// Default 64KiB.
	MaxResponseBytes ByteSize `yaml:"max_response_bytes"`
	// Timeout is the deadline of every store call. Default 100ms.
	Timeout time.Duration `yaml:"timeout"`
	// KeyPrefix starts every Redis key. Default "exgate:idem:".
	KeyPrefix string `yaml:"key_prefix"`
	// MaxPerAccount is the most identifiers one account (the verified
	// account, else the token) holds in the store at once: orders the
	// backend accepted, orders in flight and orders whose outcome is
	// unknown, until their retention ends. Past it, that account's new
	// identifiers get 503 identifier_quota_exceeded and nobody else's do.
	// 0 derives it from the order limits (Config.IdempotencyShare): as
	// many orders as the fastest tier lets an account place within
	// retention and in_flight_timeout, so that an account tagging every
	// order never meets it. Default 0.
	MaxPerAccount int `yaml:"max_per_account"`
	// MaxBytesPerAccount is the most bytes one account's identifiers may
	// cost the store (keys, states, the responses kept for replay, as
	// the store charges them: docs/validation.md); past it, as past
	// MaxPerAccount. 0 means MaxPerAccount's (derived) number × 1KiB
	// (IdentifierBytes). Default 0.
	MaxBytesPerAccount ByteSize `yaml:"max_bytes_per_account"`
	// ReplicaAcks is how many Redis replicas must hold a claim (Redis
	// WAIT) before the order is forwarded, so that a failover cannot lose
	// it and let a retry place the order again; when fewer acknowledge it
	// in time the order is refused with 503. -1 means 1 with Sentinel
	// (limiter.redis.master_name) or a Cluster (several addresses), 0 for
	// one standalone server. Default -1.
	ReplicaAcks int `yaml:"replica_acks"`
	// DuplicateAnswers is each client's allowance of duplicate answers
	// on an order route: orders duplicate protection answers instead of
	// placing them (a replay, a 409, a 503 identifier_quota_exceeded or
	// duplicate_protection_full), which charge the order limits nothing.
	// Past it, the client's orders get 429 throttled (answered from the
	// deny cache, no Redis call) until it refills. Default: each order
	// route's own limit (Config.DuplicateAnswerLimits).
	DuplicateAnswers DuplicateAnswers `yaml:"duplicate_answers"`
	// Memory bounds the in-process store (store: memory).
	Memory IdempotencyMemory `yaml:"memory"`
}

// DuplicateAnswers is an allowance of duplicate answers: Rate per
// period, Burst at once, per client (counted as the route's limits
// count it).
type DuplicateAnswers struct {
	// Rate is how many duplicate answers a client may get per period,
	// counted in orders (a bulk's answer counts its orders), on every
	// order route, per account (per token with opaque tokens). ""
	// derives each order route's allowance from the route's own limit:
	// its tightest limit on requests with a token, with that limit's
	// burst, key and tiers. Default "".
	Rate Rate `yaml:"rate"`
	// Burst is how many may come at once; 0 means Rate's N, and Validate
	// writes that out. Only with Rate. Default 0.
	Burst int `yaml:"burst"`
}

// DuplicateAnswersLimit names the allowance of duplicate answers among
// an order route's limits: in the rate-limit headers, logs and metrics.
// No limit of an order route may take the name.
const DuplicateAnswersLimit = "duplicate_answers"

// IdempotencyMemory bounds the in-process duplicate-protection store.
// When full of unexpired entries, new identifiers are refused with a
// store error rather than forgetting old ones.
type IdempotencyMemory struct {
	// MaxEntries is the most identifiers kept. Default 1000000.
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds what the entries cost the heap: keys, states and
	// the stored responses. Default 1GiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// IdentifierBytes is what a derived share (max_bytes_per_account: 0)
// allows per identifier: an identifier's entry (about 200 bytes in
// Redis, 300 in memory) and an order's response of up to 700 bytes
// (a bulk's response is kept once, under its first identifier).
const IdentifierBytes = 1 << 10

// DefaultIdempotency returns the built-in duplicate-protection settings.
func DefaultIdempotency() Idempotency {
	return Idempotency{
		Enabled:          true,
		Retention:        24 * time.Hour,
		InFlightTimeout:  30 * time.Second,
		MaxResponseBytes: 64 << 10,
		Timeout:          100 * time.Millisecond,
		KeyPrefix:        "exgate:idem:",
		ReplicaAcks:      -1,
		Memory:           IdempotencyMemory{MaxEntries: 1000000, MaxBytes: 1 << 30},
	}
}

// check reports problems in the idempotency section at p; its store and
// its in-flight timeout against the route timeouts are checked across
// sections.
func (idem *Idempotency) check(col *collector, p path) {
	checkFormerStore(col, p, idem.Store, idem.Backend)
	col.oneOf(p.key("store"), idem.Store, "", StoreRedis, StoreMemory)
	if idem.Retention < time.Minute || idem.Retention > 366*24*time.Hour {
		col.addf(p.key("retention"), "must be from 1m to 366d, got %s", idem.Retention)
	}
	switch {
	case idem.InFlightTimeout <= 0:
		col.positive(p.key("in_flight_timeout"), idem.InFlightTimeout)
	case idem.inFlightOutlivesRetention():
		col.addf(p.key("in_flight_timeout"), "%s must be less than %s (%s)", idem.InFlightTimeout, p.key("retention"), idem.Retention)
	}
	if idem.MaxResponseBytes < 1<<10 || idem.MaxResponseBytes > 1<<20 {
		col.addf(p.key("max_response_bytes"), "must be from 1KiB to 1MiB, got %s", idem.MaxResponseBytes)
	}
	if idem.Timeout <= 0 || idem.Timeout > 5*time.Second {
		col.addf(p.key("timeout"), "must be greater than 0 and at most 5s, got %s", idem.Timeout)
	}
	if idem.KeyPrefix == "" || len(idem.KeyPrefix) > 64 || strings.ContainsFunc(idem.KeyPrefix, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		col.addf(p.key("key_prefix"), "want 1 to 64 printable ASCII characters without spaces, got %q", idem.KeyPrefix)
	} else if brokenHashTag(idem.KeyPrefix) {
		col.addf(p.key("key_prefix"), "a { must open a hash tag closed in the prefix, with a character or more inside ({tag}: every key in one Cluster slot), got %q: else a claim's keys hash to different Cluster slots and every order with an identifier is refused", idem.KeyPrefix)
	}
	if idem.MaxPerAccount < 0 {
		col.addf(p.key("max_per_account"), "must be 0 (from the order limits) or more, got %d", idem.MaxPerAccount)
	}
	if idem.MaxBytesPerAccount < 0 || idem.MaxBytesPerAccount > 1<<40 {
		col.addf(p.key("max_bytes_per_account"), "must be from 0 (max_per_account × %s) to 1TiB, got %s", ByteSize(IdentifierBytes), idem.MaxBytesPerAccount)
	}
	if idem.ReplicaAcks < -1 || idem.ReplicaAcks > 5 {
		col.addf(p.key("replica_acks"), "must be from -1 (by topology) to 5, got %d", idem.ReplicaAcks)
	}
	da, dp := idem.DuplicateAnswers, p.key("duplicate_answers")
	switch {
	case !da.Rate.IsZero():
		checkRate(col, dp.key("rate"), da.Rate)
		checkBurst(col, dp.key("burst"), da.Burst)
	case da.Burst != 0:
		col.addf(dp.key("burst"), "is the burst of %s, which is unset (each order route's own limit): set the rate too, or remove the burst", dp.key("rate"))
	}
	mp := p.key("memory")
	if idem.Memory.MaxEntries < 1 {
		col.addf(mp.key("max_entries"), "must be at least 1, got %d", idem.Memory.MaxEntries)
	}
	if idem.Memory.MaxBytes < idem.MaxResponseBytes || idem.Memory.MaxBytes > 1<<40 {
		col.addf(mp.key("max_bytes"), "must be at least %s (%s), got %s", p.key("max_response_bytes"), idem.MaxResponseBytes, idem.Memory.MaxBytes)
	}
}

// inFlightOutlivesRetention reports whether a valid retention is not
// longer than the in-flight timeout.
func (idem *Idempotency) inFlightOutlivesRetention() bool {
	return idem.InFlightTimeout >= idem.Retention && idem.Retention >= time.Minute
}

// brokenHashTag reports whether the key prefix p holds a { that does not
// open a hash tag closed within p ({} empty, or no } after it): Redis
// Cluster hashes a key by its first {…}, and the prefix's would then take
// the place of the account's tag that keeps a claim's keys in one slot
// (idempotency.Redis.keys), each in a slot of its own: every claim
// refused CROSSSLOT.
func brokenHashTag(p string) bool {
	i := strings.IndexByte(p, '{')
	return i >= 0 && strings.IndexByte(p[i+1:], '}') <= 0
}
