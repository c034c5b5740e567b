// Package limiter is exgate's rate-limit policy: it turns a request's
// route, token, verified account and client address into the keys and
// limits that the store, package ratelimit, decides. limiter is the
// policy (which limits apply to whom, and what happens when the store
// fails); ratelimit is the store (GCRA in Redis or in memory) and knows
// nothing of routes or configuration.
//
// Rules (compiled once from configuration and swapped whole on reload)
// hold each route's limits, their tier overrides and their header values.
// Enforcer applies them to a request: it derives keys (HMAC token ids,
// account keys, IPv6 address groups; keys.go), applies tiers and the
// token-spray guard, falls back as the route's on_store_error says when
// the store fails, and produces the Decision and its headers. Open builds
// the store and the Enforcer from configuration, NewRedisClient the Redis
// client; ParseTokens and ParseUsers read the tier files.
package limiter
