package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// checkAcrossSections reports the problems that lie between sections:
// values each valid in its own section that contradict one another, or
// that together would be accepted and never take effect. Each section
// checks itself (validate); every check that reads two sections is here,
// naming the sections it relates.
func (c *Config) checkAcrossSections(col *collector) {
	c.checkWriteTimeout(col)     // server, upstream, routes
	c.checkOrderBodySize(col)    // validation, server
	c.checkIdempotencyStore(col) // idempotency, limiter
	c.checkInFlightTimeout(col)  // idempotency, upstream, routes
	c.checkVerifiedIdentity(col) // identity, tokens_file, routes
	c.checkEffective(col)        // routes, tiers, validation, idempotency, limiter
	c.checkBulkBurst(col)        // validation, routes, tiers
	c.checkDuplicateAnswers(col) // idempotency, validation, routes
	c.checkRouteServices(col)    // routes, upstream
}

// checkRouteServices reports a route naming a service upstream.services
// does not define.
func (c *Config) checkRouteServices(col *collector) {
	exists := func(name string) bool { _, ok := c.Upstream.Service(name); return ok && name != "" }
	for i, r := range c.Routes {
		if _, ok := c.Upstream.Service(r.Service); !ok {
			col.addf(path("routes").index(i).key("service"), "no service %q in upstream.services%s", r.Service, didYouMean(r.Service, c.Upstream.ServiceNames()))
		}
		checkSplit(col, path("routes").index(i), &c.Routes[i], exists)
	}
}

// checkDuplicateAnswers reports an order route limit named as the
// allowance of duplicate answers, which joins the route's limits under
// that name, an order route whose limits leave no room for the allowance
// (MaxRouteLimits), and an idempotency.duplicate_answers burst below
// validation.bulk.max_orders while bulks place orders: a bulk is decided
// against the allowance at its size, so a bulk larger than the burst
// could never pass, whether or not it is answered as a duplicate.
func (c *Config) checkDuplicateAnswers(col *collector) {
	if !c.IdempotencyRuns() {
		return
	}
	for _, name := range c.orderRoutes() {
		i := slices.IndexFunc(c.Routes, func(r Route) bool { return r.Name == name })
		for j, l := range c.Routes[i].Limits {
			if l.Name == DuplicateAnswersLimit {
				col.addf(path("routes").index(i).key("limits").index(j).key("name"), "%q names the allowance of duplicate answers that exgate adds to the limits of a route orders are placed on (idempotency.duplicate_answers); give the limit another name", l.Name)
			}
		}
	}
	for _, a := range c.DuplicateAnswerLimits() {
		i := slices.IndexFunc(c.Routes, func(r Route) bool { return r.Name == a.Route })
		if n := len(c.Routes[i].Limits); !a.Rate.IsZero() && n == MaxRouteLimits {
			col.addf(path("routes").index(i).key("limits"), "%d limits and the allowance of duplicate answers exgate adds to a route orders are placed on (idempotency.duplicate_answers) make %d: a route has at most %d (its RateLimit headers, metrics and refunds carry each one); merge limits", n, n+1, MaxRouteLimits)
		}
	}
	da := c.Idempotency.DuplicateAnswers
	bulks := slices.ContainsFunc(c.Routes, func(r Route) bool { return r.Validate == ValidateBulk && r.Bulk.Orders != "" })
	if !da.Rate.IsZero() && bulks && da.Burst > 0 && da.Burst < c.Validation.Bulk.MaxOrders {
		col.addf("idempotency.duplicate_answers.burst", "%d is below validation.bulk.max_orders (%d): a bulk is decided against the allowance at its size, so a larger bulk could never pass; raise the burst to at least %d",
			da.Burst, c.Validation.Bulk.MaxOrders, c.Validation.Bulk.MaxOrders)
	}
}

// checkBulkBurst reports a validation.bulk.max_orders that no bulk could
// ever reach: a bulk of k orders is charged k units in the limits of
// bulk.orders (k ids in bulk.cancels'), all or nothing, so a bulk above a
// limit's burst can never pass. When max_orders is above the largest
// bulk that can pass — of placements and of cancels, in any tier — bulks
// of the sizes between are accepted by validation and then always
// refused: the setting never applies as written. A burst below max_orders
// for one kind of bulk, or for some tiers, is a smaller bulk size for
// those, answered 413 bulk_exceeds_limit with the size to split into,
// and is not reported (docs/limits.md).
func (c *Config) checkBulkBurst(col *collector) {
	maxOrders := int64(c.Validation.Bulk.MaxOrders)
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Validate != ValidateBulk || r.Match.Method == "DELETE" {
			// A route that only cancels is charged in its cancels route,
			// whose burst below max_orders is a smaller size for one kind
			// of bulk: answered 413 with the size to split into.
			continue
		}
		var largest int64
		var parts []string
		for _, f := range []struct{ key, name, what string }{{"orders", r.Bulk.Orders, "orders"}, {"cancels", r.Bulk.Cancels, "order ids"}} {
			ti := slices.IndexFunc(c.Routes, func(x Route) bool { return x.Name == f.name })
			if ti < 0 {
				return // reported by the route
			}
			t := &c.Routes[ti]
			j, n, ok := c.smallestBulkBurst(t)
			if !ok {
				largest = math.MaxInt64 // only shadow limits: no bulk is ever refused
				continue
			}
			largest = max(largest, n)
			parts = append(parts, fmt.Sprintf("%d %s (the burst of %s, limit %q of route %q)",
				n, f.what, path("routes").index(ti).key("limits").index(j), t.Limits[j].Name, t.Name))
		}
		if maxOrders > largest {
			col.addf("validation.bulk.max_orders", "%d is above the largest bulk %s can ever pass, %s: a bulk is charged one unit per order or id, all or nothing, so a larger one is always refused; set validation.bulk.max_orders to at most %d, or raise those bursts",
				maxOrders, path("routes").index(i), strings.Join(parts, " and "), largest)
		}
	}
}

// smallestBulkBurst returns, of the limits of route t that a bulk is
// charged in (not shadow limits, not when: anonymous ones, which never
// apply to a bulk's required token), the one whose largest burst over
// every tier is smallest: its index and that burst, the largest bulk
// that can ever pass it.
func (c *Config) smallestBulkBurst(t *Route) (int, int64, bool) {
	best, bestBurst := -1, int64(0)
	for j, l := range t.Limits {
		if l.Shadow || l.When == WhenAnon {
			continue
		}
		b := int64(l.Burst)
		if l.Key == KeyToken || l.Key == KeyAccount {
			for _, routes := range c.Tiers {
				if tl, ok := routes[t.Name]; ok {
					b = max(b, int64(tl.Burst))
				}
			}
		}
		if best < 0 || b < bestBurst {
			best, bestBurst = j, b
		}
	}
	return best, bestBurst, best >= 0
}

// checkWriteTimeout reports routes whose timeout (their own, or
// upstream.timeout) the server's write timeout would cut short.
func (c *Config) checkWriteTimeout(col *collector) {
	w := c.Server.WriteTimeout
	if w <= 0 {
		return // reported by the server section
	}
	var inherit []string
	for i := range c.Routes {
		r := &c.Routes[i]
		p := path("routes").index(i)
		switch {
		case r.Refuse: // forwards nothing
		case r.Timeout > 0 && r.Timeout >= w:
			col.addf("server.write_timeout", "%s must exceed %s.timeout (%s, route %q)", w, p, r.Timeout, r.Name)
		case r.Timeout == 0 && c.Upstream.Timeout >= w:
			inherit = append(inherit, fmt.Sprintf("%s (%q)", p, r.Name))
		}
	}
	if len(inherit) > 0 {
		list := strings.Join(inherit, ", ")
		if len(inherit) > 3 {
			list = strings.Join(inherit[:3], ", ") + fmt.Sprintf(" and %d more", len(inherit)-3)
		}
		col.addf("server.write_timeout", "%s must exceed upstream.timeout (%s), the timeout of %s", w, c.Upstream.Timeout, list)
	}
}

// checkOrderBodySize reports an order body limit above the limit of every
// body, which could never be reached.
func (c *Config) checkOrderBodySize(col *collector) {
	val, srv := c.Validation.MaxBodyBytes, c.Server.MaxBodyBytes
	if val >= 64 && val <= 1<<20 && srv > 0 && val > srv {
		col.addf("validation.max_body_bytes", "%s must not exceed server.max_body_bytes (%s)", val, srv)
	}
	c.checkBufferShare(col)
}

// checkBufferShare reports a server.max_buffered_bytes too small for the
// largest body read whole to fit in the share of a client alone, which is
// half of it (docs/pools.md): such a body would always be refused 503
// server_busy. Every body is read whole, so the largest is
// server.max_body_bytes (an order's and a bulk's limits are within it),
// charged with BodyReadCharge while it is read.
func (c *Config) checkBufferShare(col *collector) {
	largest := c.Server.MaxBodyBytes
	if buf := c.Server.MaxBufferedBytes; buf >= 64<<10 && buf < 2*(largest+BodyReadCharge) {
		col.addf("server.max_buffered_bytes", "%s is less than twice the largest body read whole (%s) and its read's charge (%s): a client may hold at most half of it, so such a body would always be refused", buf, largest, ByteSize(BodyReadCharge))
	}
}

// checkIdempotencyStore reports a Redis duplicate-protection store without
// the Redis addresses it connects to (limiter.redis).
func (c *Config) checkIdempotencyStore(col *collector) {
	idem := c.Idempotency
	if idem.Enabled && idem.Store == StoreRedis && len(c.Limiter.Redis.Addrs) == 0 {
		col.addf("idempotency.store", "\"redis\" needs limiter.redis.addrs")
	}
}

// checkInFlightTimeout reports routes that claim order identifiers (order
// routes, and bulk routes that place orders) whose timeout outlasts the
// claim: a retry could then find the claim expired while the first
// request is still at the backend.
func (c *Config) checkInFlightTimeout(col *collector) {
	idem := c.Idempotency
	if idem.InFlightTimeout <= 0 || idem.inFlightOutlivesRetention() {
		return // reported by the idempotency section
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Validate != ValidateOrd && (r.Validate != ValidateBulk || r.Bulk.Orders == "") {
			continue
		}
		if t := c.RouteTimeout(r); idem.InFlightTimeout <= t {
			col.addf("idempotency.in_flight_timeout", "%s must exceed the timeout of %s (%q, %s)", idem.InFlightTimeout, path("routes").index(i), r.Name, t)
		}
	}
}

// checkVerifiedIdentity reports what contradicts identity.verify: a tokens
// file, which maps token strings when verification counts accounts; a
// users file or tier claim, which only a verified account is looked up in;
// and limits counting by the other kind of key.
func (c *Config) checkVerifiedIdentity(col *collector) {
	verify := c.Identity.Verify
	if verify && c.TokensFile != "" {
		col.addf("tokens_file", "maps token strings to tiers, but identity.verify counts accounts: "+
			"write identity.users_file (user id → tier) or identity.jwt.tier_claim instead")
	}
	if !verify && c.Identity.UsersFile != "" {
		col.addf("identity.users_file", "is looked up only for verified accounts, and identity.verify is false: no request gets a tier from it; "+
			"set identity.verify: true (with identity.jwt), or map opaque tokens to tiers in tokens_file")
	}
	if !verify && c.Identity.JWT.TierClaim != "" {
		col.addf("identity.jwt.tier_claim", "is read only from verified tokens, and identity.verify is false: no request gets a tier from it; "+
			"set identity.verify: true (with identity.jwt), or map opaque tokens to tiers in tokens_file")
	}
	for i := range c.Routes {
		for k, l := range c.Routes[i].Limits {
			lp := path("routes").index(i).key("limits").index(k).key("key")
			switch {
			case verify && l.Key == KeyToken:
				col.addf(lp, "identity.verify counts verified accounts, not token strings: write key: account "+
					"(one bucket per account, shared by all its tokens)")
			case !verify && l.Key == KeyAccount:
				col.addf(lp, "key: account needs identity.verify: true (JWT access tokens verified at the edge); "+
					"for opaque tokens write key: token")
			}
		}
	}
}

// checkEffective reports settings that are valid one by one but, together
// with the rest of the configuration, would be accepted and silently never
// take effect: a limit no request can reach, a duplicate protection that
// cannot hold, overrides nothing applies. Each message says what to write
// instead.
func (c *Config) checkEffective(col *collector) {
	for i := range c.Routes {
		r := &c.Routes[i]
		p := path("routes").index(i)
		for j, l := range r.Limits {
			lp := p.key("limits").index(j)
			switch {
			case l.Key == KeyToken && l.When == WhenAnon:
				// Already refused by checkLimits.
			case r.Auth == AuthNone && (l.Key == KeyToken || l.Key == KeyAccount):
				col.addf(lp.key("key"), "a %s limit on a route with auth: none never applies: the route does not read the Authorization header; set %s.auth to optional or required, or count by key: address", l.Key, p)
			case r.Auth == AuthNone && l.When == WhenToken:
				col.addf(lp.key("when"), "when: token on a route with auth: none never applies: the route does not read the Authorization header, so every request is anonymous; write when: always, or set %s.auth to optional", p)
			case r.Auth == AuthRequired && l.When == WhenAnon:
				col.addf(lp.key("when"), "when: anonymous on a route with auth: required never applies: a request without a token is answered 401 before any limit; write when: always, or set %s.auth to optional", p)
			}
		}
		if r.MaxInFlight > 0 && !c.Overload.Enabled {
			col.addf(p.key("max_in_flight"), "the route's cap is part of the overload step, and overload.enabled is false: nothing caps the route; set overload.enabled: true, or remove max_in_flight")
		}
		if r.OnStoreError != "" && len(r.Limits) == 0 {
			col.addf(p.key("on_store_error"), "the route has no limits, so no store error can happen on it; remove on_store_error or add limits")
		}
		if r.Validate == ValidateOrd && r.Auth == AuthNone && c.Idempotency.Enabled {
			col.addf(p.key("auth"), "duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection)")
		}
	}

	if len(c.Tiers) > 0 && c.TokensFile == "" && c.Identity.UsersFile == "" && c.Identity.JWT.TierClaim == "" {
		col.addf("tiers", "nothing puts a request in a tier, so no tier override ever applies: tiers are assigned by tokens_file, identity.users_file or identity.jwt.tier_claim; set one (see exgate token-id) or remove tiers")
	}
	if !c.ValidatesOrders() {
		if len(c.Validation.Markets) > 0 {
			col.addf("validation.markets", "no route has validate: order, so these market rules never apply; add validate: order to the order route or remove them")
		}
		if len(c.Validation.Quotes) > 0 {
			col.addf("validation.quotes", "no route has validate: order, so these rules never apply; add validate: order to the order route or remove them")
		}
	}

	// Duplicate protection must be shared by every replica that can
	// receive a retry, or an order retried on another replica is placed
	// twice.
	if c.IdempotencyRuns() && c.IdempotencyStore() == StoreMemory && c.Limiter.Replicas > 1 {
		col.addf("idempotency.store", "the in-process store is not shared between the %d replicas of limiter.replicas: an order retried through another replica would be placed twice; set limiter.redis.addrs and idempotency.store: redis, or limiter.replicas: 1 for a single instance", c.Limiter.Replicas)
	}
	if c.Limiter.Store == StoreMemory && len(c.Limiter.Redis.Addrs) > 0 && !(c.IdempotencyRuns() && c.IdempotencyStore() == StoreRedis) {
		col.addf("limiter.redis.addrs", "nothing uses Redis: limiter.store is \"memory\" and duplicate protection does not use it; set limiter.store: redis (or idempotency.store: redis), or remove limiter.redis.addrs")
	}
}
