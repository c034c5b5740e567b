package config

import (
	"slices"
	"time"
)

// The settings in force where one key's meaning depends on others: the
// stores, whether orders are checked, route timeouts, replica
// acknowledgements.

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
