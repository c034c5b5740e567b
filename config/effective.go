package config

import "slices"

// IdempotencyBackend returns the store duplicate protection uses:
// idempotency.backend, or, when that is empty, the limiter's store
// (limiter.backend, or redis when limiter.redis.addrs is set).
func (c *Config) IdempotencyBackend() string {
	if c.Idempotency.Backend != "" {
		return c.Idempotency.Backend
	}
	return c.LimiterBackend()
}

// LimiterBackend returns the rate-limit store: limiter.backend, or redis
// when that is empty and limiter.redis.addrs is set, else memory.
func (c *Config) LimiterBackend() string {
	switch {
	case c.Limiter.Backend != "":
		return c.Limiter.Backend
	case len(c.Limiter.Redis.Addrs) > 0:
		return BackendRedis
	}
	return BackendMemory
}

// ValidatesOrders reports whether some route has validate: order, the
// routes on which order checks and duplicate protection run.
func (c *Config) ValidatesOrders() bool {
	return slices.ContainsFunc(c.Routes, func(r Route) bool { return r.Validate == ValidateOrd })
}

// ProtectsDuplicates reports whether duplicate protection runs: it is
// enabled and some route validates orders.
func (c *Config) ProtectsDuplicates() bool {
	return c.Idempotency.Enabled && c.ValidatesOrders()
}

// checkEffective reports settings that are valid one by one but, together
// with the rest of the configuration, would be accepted and silently never
// take effect: a limit no request can reach, a duplicate protection that
// cannot hold, overrides nothing applies. Each message says what to write
// instead.
func (c *Config) checkEffective(v *checker) {
	for i := range c.Routes {
		r := &c.Routes[i]
		p := joinIndex("routes", i)
		for j, l := range r.Limits {
			lp := joinIndex(p+".limits", j)
			switch {
			case l.Key == KeyToken && l.When == WhenAnon:
				// Already refused by checkRoutes.
			case r.Auth == AuthNone && (l.Key == KeyToken || l.Key == KeyAccount):
				v.addf(lp+".key", "a %s limit on a route with auth: none never applies: the route does not read the Authorization header; set %s.auth to optional or required, or count by key: address", l.Key, p)
			case r.Auth == AuthNone && l.When == WhenToken:
				v.addf(lp+".when", "when: token on a route with auth: none never applies: the route does not read the Authorization header, so every request is anonymous; write when: always, or set %s.auth to optional", p)
			case r.Auth == AuthRequired && l.When == WhenAnon:
				v.addf(lp+".when", "when: anonymous on a route with auth: required never applies: a request without a token is answered 401 before any limit; write when: always, or set %s.auth to optional", p)
			}
		}
		if r.OnStoreError != "" && len(r.Limits) == 0 {
			v.addf(p+".on_store_error", "the route has no limits, so no store error can happen on it; remove on_store_error or add limits")
		}
		if r.Validate == ValidateOrd && r.Auth == AuthNone && c.Idempotency.Enabled {
			v.addf(p+".auth", "duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection)")
		}
	}

	if len(c.Tiers) > 0 && c.TokensFile == "" && c.Identity.UsersFile == "" && c.Identity.JWT.TierClaim == "" {
		v.addf("tiers", "nothing puts a request in a tier, so no tier override ever applies: tiers are assigned by tokens_file, identity.users_file or identity.jwt.tier_claim; set one (see exgate token-id) or remove tiers")
	}
	if !c.ValidatesOrders() {
		if len(c.Validation.Markets) > 0 {
			v.addf("validation.markets", "no route has validate: order, so these market rules never apply; add validate: order to the order route or remove them")
		}
		if len(c.Validation.Quotes) > 0 {
			v.addf("validation.quotes", "no route has validate: order, so these rules never apply; add validate: order to the order route or remove them")
		}
	}

	// Duplicate protection must be shared by every replica that can
	// receive a retry, or an order retried on another replica is placed
	// twice.
	if c.ProtectsDuplicates() && c.IdempotencyBackend() == BackendMemory && c.Limiter.Replicas > 1 {
		v.addf("idempotency.backend", "the in-process store is not shared between the %d replicas of limiter.replicas: an order retried through another replica would be placed twice; set limiter.redis.addrs and idempotency.backend: redis, or limiter.replicas: 1 for a single instance", c.Limiter.Replicas)
	}
	if c.Limiter.Backend == BackendMemory && len(c.Limiter.Redis.Addrs) > 0 && !(c.ProtectsDuplicates() && c.IdempotencyBackend() == BackendRedis) {
		v.addf("limiter.redis.addrs", "nothing uses Redis: limiter.backend is \"memory\" and duplicate protection does not use it; set limiter.backend: redis (or idempotency.backend: redis), or remove limiter.redis.addrs")
	}
}
