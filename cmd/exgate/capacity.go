package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/exgate/exgate/config"
)

// duplicateCapacity describes, for check-config, each account's share of
// duplicate protection's store, where it comes from, and how many such
// shares the store holds: the memory store's bounds, or in Redis what
// each share takes of maxmemory, and what replica_acks asks of each
// master. Nothing when duplicate protection does not run.
func duplicateCapacity(cfg *config.Config) []string {
	if !cfg.ProtectsDuplicates() {
		return nil
	}
	idem := cfg.Idempotency
	ids, bytes := cfg.IdempotencyShare()
	a := cfg.OrderAllowance(idem.Retention + idem.InFlightTimeout)
	var from string
	switch {
	case idem.MaxPerAccount == 0 && a.Orders > 0:
		from = "what " + a.Basis + " lets one account place in the " + shortDuration(idem.Retention) + " retention"
	case idem.MaxPerAccount == 0:
		from = a.Basis + ": a fallback, not the order limits"
	case int64(ids) < a.Orders:
		from = fmt.Sprintf("idempotency.max_per_account, below the %d orders %s lets one account place in the retention: an account tagging every order at its full rate meets it", a.Orders, a.Basis)
	default:
		from = "idempotency.max_per_account"
	}
	lines := []string{fmt.Sprintf("duplicate protection: each account's share is %d identifiers and %s (%s)", ids, mebibytes(bytes), from)}
	if cfg.IdempotencyBackend() == config.BackendMemory {
		m := idem.Memory
		n := min(int64(m.MaxEntries)/int64(ids), int64(m.MaxBytes)/bytes)
		lines = append(lines, fmt.Sprintf("duplicate protection: the memory store (%d identifiers, %s) holds %d such shares: %d accounts at their full order rate", m.MaxEntries, mebibytes(int64(m.MaxBytes)), n, n))
		return lines
	}
	lines = append(lines, fmt.Sprintf("duplicate protection: in Redis each share takes up to %s of maxmemory: N accounts at their full order rate need N × %s (beside the limits' keys)", mebibytes(bytes), mebibytes(bytes)))
	if acks := cfg.IdempotencyReplicaAcks(); acks > 0 {
		by := ""
		if idem.ReplicaAcks < 0 {
			by = " (by topology: " + redisTopology(cfg.Limiter.Redis) + ")"
		}
		lines = append(lines, fmt.Sprintf("duplicate protection: idempotency.replica_acks %d%s: each claim waits for %d replica(s) of its master; a master with fewer online refuses every order with an identifier (503), which /readyz and the log name (replica_acks: 0 goes without)", acks, by, acks))
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
