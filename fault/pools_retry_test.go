package fault

import "testing"

// The retry budget as a pool (docs/pools.md): a request whose connect an
// instance refused moves to another within upstream.retry_budget, shared
// by every client. The attackers' reads, drawn to a refusing instance
// (it has none under way) and moved to a live one that holds them, must
// not take the retries the victim's requests need when they are drawn
// there too.

// retryUpstream keeps the refusing instance in the rotation, allows 16
// retries at once whatever the load (three accounts taking all they can
// hold 8, 4 and 2 of them) and lets the held reads wait out the row (25s, within the write timeout
// and the identifiers' in_flight_timeout).
const (
	retryUpstream = "  timeout: 25s\n  outlier: {consecutive_connect_failures: 0}\n  retry_budget: {percent: 0, min_retries: 16}\n"
	retryConfig   = "server:\n  read_timeout: 60s\n"
)

func init() {
	for _, k := range []attackerKind{oneAddress, oneAccount, threeAccounts} {
		poolRows = append(poolRows, poolRow{pool: "the retry budget", attacker: k, config: retryConfig,
			fleet: true, refusing: true, upstream: retryUpstream, attack: heldReads, holding: retriesHeld,
			refused: []string{"upstream_unavailable", "overloaded", "throttled"},
			metric:  "exgate_upstream_retries_refused_total", labels: []string{`reason="client_share"`}, maxGrowth: 64 << 20})
	}
}

// retriesHeld reports that the attackers hold reads at the backend, no
// longer move, and were refused a retry (past their share; before the
// share, past the budget their retries filled).
func retriesHeld(t *testing.T, r *poolRun, a *attack) bool {
	return r.g.metric(t, "exgate_upstream_retries_refused_total") > 0 && readsHeld(t, r, a)
}
