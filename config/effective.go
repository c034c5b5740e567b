package config

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// The settings in force where one key's meaning depends on others: the
// stores, whether orders are checked, route timeouts, replica
// acknowledgements.

// IdempotencyStore returns the store duplicate protection uses:
// idempotency.store, or, when that is empty, the limiter's store
// (limiter.store, or redis when limiter.redis.addrs is set).
func (c *Config) IdempotencyStore() string {
	if c.Idempotency.Store != "" {
		return c.Idempotency.Store
	}
	return c.LimiterStore()
}

// LimiterStore returns the rate-limit store: limiter.store, or redis
// when that is empty and limiter.redis.addrs is set, else memory.
func (c *Config) LimiterStore() string {
	switch {
	case c.Limiter.Store != "":
		return c.Limiter.Store
	case len(c.Limiter.Redis.Addrs) > 0:
		return StoreRedis
	}
	return StoreMemory
}

// ValidatesOrders reports whether some route has validate: order, the
// routes on which order checks and duplicate protection run.
func (c *Config) ValidatesOrders() bool {
	return slices.ContainsFunc(c.Routes, func(r Route) bool { return r.Validate == ValidateOrd })
}

// IdempotencyRuns reports whether duplicate protection runs: it is
// enabled and some route validates orders.
func (c *Config) IdempotencyRuns() bool {
	return c.Idempotency.Enabled && c.ValidatesOrders()
}

// IdempotencyReplicaAcks returns how many replicas must acknowledge a
// claim: idempotency.replica_acks, or for -1 one with Sentinel or a
// Cluster (which fail over to replicas) and none for a standalone server.
func (c *Config) IdempotencyReplicaAcks() int {
	r := c.Limiter.Redis
	switch {
	case c.Idempotency.ReplicaAcks >= 0:
		return c.Idempotency.ReplicaAcks
	case r.MasterName != "" || len(r.Addrs) > 1:
		return 1
	}
	return 0
}

// RouteTimeout returns the route's own timeout, or the upstream default.
func (c *Config) RouteTimeout(r *Route) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return c.Upstream.Timeout
}

// Shares of the duplicate-protection store when nothing bounds an
// account's orders (an order route without a per-account limit).
const (
	fallbackShareIDs   = 200000
	fallbackShareBytes = 200 << 20
)

// OrderAllowance is the most orders one account can place within a
// window: over the routes an order is placed on, each bounded by its
// tightest per-account limit under the fastest tier.
type OrderAllowance struct {
	// Orders is that number; 0 when some order route has no per-account
	// limit, so that nothing bounds it.
	Orders int64
	// Basis names the limits it comes from, as "place_order 5400/1h
	// (burst 5400)", or the route without a per-account limit.
	Basis string
}

// OrderAllowance returns the most orders one account can place within
// window: over every route with validate: order and every route a bulk
// placement is charged against, the burst and the rate over window of
// the route's tightest limit counted per account (key token or account,
// not anonymous-only), under the tier that lets the most through.
func (c *Config) OrderAllowance(window time.Duration) OrderAllowance {
	var a OrderAllowance
	var basis []string
	for _, name := range c.orderRoutes() {
		r := c.Route(name)
		best, how := int64(-1), ""
		for _, tier := range append([]string{""}, slices.Sorted(maps.Keys(c.Tiers))...) {
			n, h := routeAllowance(r, c.Tiers[tier][name], tier, window)
			if n >= 0 && (best < 0 || n > best) {
				best, how = n, h
			}
		}
		if best < 0 {
			return OrderAllowance{Basis: name + " has no limit per account"}
		}
		a.Orders += best
		basis = append(basis, how)
	}
	a.Basis = strings.Join(basis, " + ")
	return a
}

// orderRoutes returns the names of the routes an order is placed on:
// validate: order, and the routes bulk placements are charged against.
func (c *Config) orderRoutes() []string {
	var names []string
	for _, r := range c.Routes {
		n := ""
		switch r.Validate {
		case ValidateOrd:
			n = r.Name
		case ValidateBulk:
			n = r.Bulk.Orders
		}
		if n != "" && c.Route(n) != nil && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// routeAllowance returns the most orders route r lets one account place
// within window under tier (whose override of r's per-account limits is
// tl, when set): its tightest per-account limit's burst and rate, or -1
// when it has none, and how that was worked out.
func routeAllowance(r *Route, tl TierLimit, tier string, window time.Duration) (int64, string) {
	if tier != "" && tl.Rate.IsZero() {
		return -1, ""
	}
	best, how := int64(-1), ""
	for _, l := range r.Limits {
		if l.Shadow || l.When == WhenAnon || (l.Key != KeyToken && l.Key != KeyAccount) {
			continue
		}
		rate, burst := l.Rate, l.Burst
		if tier != "" {
			rate, burst = tl.Rate, tl.Burst
		}
		burst = normalBurst(burst, rate)
		n := min(float64(burst)+math.Ceil(float64(rate.N)*window.Seconds()/rate.Period.Seconds()), 1<<40)
		if best < 0 || int64(n) < best {
			best = int64(n)
			how = fmt.Sprintf("%s %s (burst %d)", r.Name, rate, burst)
			if tier != "" {
				how += " for tier " + tier
			}
		}
	}
	return best, how
}

// IdempotencyShare returns each account's share of the
// duplicate-protection store: idempotency.max_per_account identifiers
// and max_bytes_per_account bytes, each 0 derived: the orders one
// account can place within retention and in_flight_timeout
// (OrderAllowance), and IdentifierBytes for each identifier of the
// share.
func (c *Config) IdempotencyShare() (ids int, bytes int64) {
	idem := c.Idempotency
	ids, bytes = idem.MaxPerAccount, int64(idem.MaxBytesPerAccount)
	if ids == 0 {
		a := c.OrderAllowance(idem.Retention + idem.InFlightTimeout)
		if a.Orders == 0 {
			ids = fallbackShareIDs
			bytes = cmp.Or(bytes, fallbackShareBytes)
		}
		ids = cmp.Or(ids, int(a.Orders))
	}
	return ids, cmp.Or(bytes, int64(ids)*IdentifierBytes)
}

// DuplicateAnswerLimit is the allowance of duplicate answers on one
// order route (idempotency.duplicate_answers): a limit of the route,
// named DuplicateAnswersLimit, charged only for the orders duplicate
// protection answers instead of placing them.
type DuplicateAnswerLimit struct {
	// Route is the order route's name.
	Route string
	// Key is what the allowance counts by: KeyToken, KeyAccount or
	// KeyAddress.
	Key string
	// Rate and Burst are the allowance.
	Rate  Rate
	Burst int
	// Tiers reports that the route's tier overrides (tiers.<tier>.<route>)
	// apply to it: it is derived from a token or account limit, which
	// they override.
	Tiers bool
	// Basis says where it comes from, for check-config:
	// "idempotency.duplicate_answers", or the route's limit it is derived
	// from.
	Basis string
}

// DuplicateAnswerLimits returns, while duplicate protection runs, the
// allowance of duplicate answers of each route an order is placed on
// (validate: order, and the routes bulk placements are charged against),
// in route order. With idempotency.duplicate_answers.rate it is that, per
// account (per token with opaque tokens); without, it is the route's own
// tightest limit on requests with a token (not shadow, not anonymous-only:
// the lowest rate, then the smallest burst), with its key and burst, and
// for a token or account limit its tiers. A route with no such limit has
// none (a zero Rate, and the Basis says why): nothing bounds its orders
// either.
func (c *Config) DuplicateAnswerLimits() []DuplicateAnswerLimit {
	if !c.IdempotencyRuns() {
		return nil
	}
	da := c.Idempotency.DuplicateAnswers
	var out []DuplicateAnswerLimit
	for _, name := range c.orderRoutes() {
		if !da.Rate.IsZero() {
			key := KeyToken
			if c.Identity.Verify {
				key = KeyAccount
			}
			out = append(out, DuplicateAnswerLimit{Route: name, Key: key, Rate: da.Rate, Burst: da.Burst,
				Basis: "idempotency.duplicate_answers"})
			continue
		}
		r := c.Route(name)
		best := -1
		for j, l := range r.Limits {
			if l.Shadow || l.When == WhenAnon {
				continue
			}
			if best < 0 || tighter(l, r.Limits[best]) {
				best = j
			}
		}
		if best < 0 {
			out = append(out, DuplicateAnswerLimit{Route: name, Basis: name + " has no limit on requests with a token"})
			continue
		}
		l := r.Limits[best]
		out = append(out, DuplicateAnswerLimit{Route: name, Key: l.Key, Rate: l.Rate, Burst: normalBurst(l.Burst, l.Rate),
			Tiers: l.Key != KeyAddress, Basis: fmt.Sprintf("%s's limit %q", name, l.Name)})
	}
	return out
}

// tighter reports whether limit a lets fewer requests through in the
// long run than b (a lower rate), or as many in a smaller burst.
func tighter(a, b Limit) bool {
	// N/period compared as N_a·period_b < N_b·period_a, in seconds.
	x := float64(a.Rate.N) * b.Rate.Period.Seconds()
	y := float64(b.Rate.N) * a.Rate.Period.Seconds()
	return x < y || (x == y && normalBurst(a.Burst, a.Rate) < normalBurst(b.Burst, b.Rate))
}
