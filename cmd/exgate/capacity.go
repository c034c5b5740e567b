package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/exgate/exgate/config"
)

// idempotencyCapacity describes, for check-config, each account's share of
// duplicate protection's store, where it comes from, each client's
// allowance of duplicate answers on each order route, and how many such
// shares the store holds: the memory store's bounds (past which a share
// is bounded by the room left, too), or in Redis what each share takes
// of maxmemory (and outside a Cluster the room it leaves), and what replica_acks asks of each
// master. Nothing when duplicate protection does not run.
func idempotencyCapacity(cfg *config.Config) []string {
	if !cfg.IdempotencyRuns() {
		return nil
	}
	idem := cfg.Idempotency
	ids, bytes := cfg.IdempotencyShare()
	a := cfg.OrderAllowance(idem.Retention + idem.InFlightTimeout)
	var from string
	switch {
	case idem.MaxPerAccount == 0 && a.Orders > 0:
		from = a.Basis + " over the " + shortDuration(idem.Retention) + " retention"
	case idem.MaxPerAccount == 0:
		from = a.Basis + ": a fallback"
	case int64(ids) < a.Orders:
		from = fmt.Sprintf("set; below the %d orders %s lets an account place in the retention", a.Orders, a.Basis)
	default:
		from = "set"
	}
	lines := []string{fmt.Sprintf("duplicate protection: each account's share: %d identifiers, %s (%s)", ids, mebibytes(bytes), from)}
	for _, da := range cfg.DuplicateAnswerLimits() {
		if da.Rate.IsZero() {
			lines = append(lines, fmt.Sprintf("duplicate protection: duplicate answers on %s are not limited: %s (set idempotency.duplicate_answers.rate)", da.Route, da.Basis))
			continue
		}
		lines = append(lines, fmt.Sprintf("duplicate protection: duplicate answers (replays, 409s) on %s: %s (burst %d) per %s (%s), then 429",
			da.Route, da.Rate, da.Burst, da.Key, da.Basis))
	}
	if cfg.IdempotencyStore() == config.StoreMemory {
		m := idem.Memory
		n := min(int64(m.MaxEntries)/int64(ids), int64(m.MaxBytes)/bytes)
		return append(lines, fmt.Sprintf("duplicate protection: the memory store (%d identifiers, %s) holds %d such shares; "+
			"a client also takes only while it holds less than is left free, so clients filling it leave room for one that holds nothing",
			m.MaxEntries, mebibytes(int64(m.MaxBytes)), n))
	}
	room := "; a client also takes only while it holds less than maxmemory leaves free, so clients filling it leave room for one that holds nothing"
	if redisTopology(cfg.Limiter.Redis) == "redis cluster" {
		room = " of its master (in a Cluster no claim sees the store's room: size maxmemory for the shares that trade at once)"
	}
	lines = append(lines, fmt.Sprintf("duplicate protection: in Redis each share is up to %s of maxmemory%s", mebibytes(bytes), room))
	if acks := cfg.IdempotencyReplicaAcks(); acks > 0 {
		by := ""
		if idem.ReplicaAcks < 0 {
			by = " (by topology: " + redisTopology(cfg.Limiter.Redis) + ")"
		}
		lines = append(lines, fmt.Sprintf("duplicate protection: replica_acks %d%s: a master with fewer replicas online refuses every order with an identifier (503)", acks, by))
	}
	return lines
}

// mebibytes writes a size in MiB, to one decimal.
func mebibytes(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// shortDuration writes d without its zero units: 24h, 90m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
