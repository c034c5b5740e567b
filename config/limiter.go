package config

import "time"

// Limiter selects and configures the rate-limit store.
type Limiter struct {
	// Store is the limit store, "redis" or "memory". Empty means redis
	// when Redis.Addrs is set, memory otherwise. Default "".
	Store string `yaml:"store"`
	// Backend is Store's former name, still read (Config.normalise): a file or
	// variable that sets it sets Store, with a warning. Default "".
	Backend string `yaml:"backend,omitempty"`
	// Replicas is how many exgate instances share the limits; it sizes
	// the local fallback (rate / replicas). Default 1.
	Replicas int `yaml:"replicas" reload:"live"`
	// Redis configures the Redis store.
	Redis Redis `yaml:"redis"`
	// OnStoreError is what happens when the store fails: "open" (allow),
	// "closed" (deny with 503) or "local" (in-process limits).
	// Default "local".
	OnStoreError string `yaml:"on_store_error" reload:"live"`
	// KeySecretEnv names the environment variable holding the HMAC secret
	// that turns tokens into keys. Default "EXGATE_KEY_SECRET".
	KeySecretEnv string `yaml:"key_secret_env"`
	// Headers selects the rate-limit headers sent on limited routes:
	// "ietf" (RateLimit-Policy and RateLimit, draft-ietf-httpapi-ratelimit-headers),
	// "legacy" (X-RateLimit-Limit/-Remaining/-Reset) or "none".
	// Default "ietf".
	Headers string `yaml:"headers" reload:"live"`
	// MaxKeys bounds the keys the in-process limiter (the memory store
	// and the local fallback) keeps; past it, the keys closest to full are
	// evicted first. Default 1000000.
	MaxKeys int `yaml:"max_keys"`
	// DenyCacheKeys bounds the in-process cache of keys known to be over
	// their limit, answered without a store round trip until they reset;
	// 0 disables the cache. Default 100000.
	DenyCacheKeys int `yaml:"deny_cache_keys"`
	// TokenSpray limits how many distinct tokens one client address may
	// present; further new tokens are limited as anonymous requests.
	TokenSpray TokenSpray `yaml:"token_spray" reload:"live"`
}

// TokenSpray bounds the distinct tokens one client address may present in
// a window, so that inventing tokens cannot multiply allowances.
type TokenSpray struct {
	// MaxTokens is how many distinct tokens an address may present per
	// Window; 0 turns the check off. Tokens mapped to a tier in the tokens
	// file are not counted. Default 20.
	MaxTokens int `yaml:"max_tokens"`
	// Window is the period over which distinct tokens are counted.
	// Default 1h.
	Window time.Duration `yaml:"window"`
}

// Stores (limiter.store, idempotency.store), store-error modes and
// header styles.
const (
	HeadersIETF   = "ietf"
	HeadersLegacy = "legacy"
	HeadersNone   = "none"

	StoreRedis  = "redis"
	StoreMemory = "memory"
	StoreOpen   = "open"
	StoreClosed = "closed"
	StoreLocal  = "local"
)

// DefaultLimiter returns the rate-limit store's defaults: in memory for a
// single instance until Redis addresses are given, falling back to
// in-process limits when the store fails.
func DefaultLimiter() Limiter {
	return Limiter{
		Replicas:      1,
		Redis:         DefaultRedis(),
		OnStoreError:  StoreLocal,
		KeySecretEnv:  "EXGATE_KEY_SECRET",
		Headers:       HeadersIETF,
		MaxKeys:       1000000,
		DenyCacheKeys: 100000,
		TokenSpray:    TokenSpray{MaxTokens: 20, Window: time.Hour},
	}
}

// checkFormerStore refuses a section at p whose store and backend (the
// former name) name different stores.
func checkFormerStore(col *collector, p path, store, backend string) {
	if backend != "" && store != backend {
		col.addf(p.key("backend"), "is the former name of %s, which says %q: set only %s", p.key("store"), store, p.key("store"))
	}
}

// check reports problems in the limiter section at p, its Redis settings
// included.
func (l *Limiter) check(col *collector, p path) {
	checkFormerStore(col, p, l.Store, l.Backend)
	col.oneOf(p.key("store"), l.Store, "", StoreRedis, StoreMemory)
	if l.Store == StoreRedis && len(l.Redis.Addrs) == 0 {
		col.addf(p.key("redis").key("addrs"), "required when limiter.store is \"redis\"")
	}
	if l.Replicas < 1 {
		col.addf(p.key("replicas"), "must be at least 1, got %d", l.Replicas)
	}
	col.oneOf(p.key("on_store_error"), l.OnStoreError, StoreOpen, StoreClosed, StoreLocal)
	col.envName(p.key("key_secret_env"), l.KeySecretEnv)
	col.oneOf(p.key("headers"), l.Headers, HeadersIETF, HeadersLegacy, HeadersNone)
	if l.MaxKeys < 1000 {
		col.addf(p.key("max_keys"), "must be at least 1000, got %d", l.MaxKeys)
	}
	if l.DenyCacheKeys < 0 {
		col.addf(p.key("deny_cache_keys"), "must not be negative (0 disables the cache), got %d", l.DenyCacheKeys)
	}
	ts, tp := l.TokenSpray, p.key("token_spray")
	if ts.MaxTokens < 0 {
		col.addf(tp.key("max_tokens"), "must not be negative (0 turns the check off), got %d", ts.MaxTokens)
	}
	if ts.MaxTokens > 0 && (ts.Window < time.Second || ts.Window > 366*24*time.Hour) {
		col.addf(tp.key("window"), "must be from 1s to 366d, got %s", ts.Window)
	}
	l.Redis.check(col, p.key("redis"))
}
