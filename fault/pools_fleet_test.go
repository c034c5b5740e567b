package fault

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The fleet's healthy instances as a pool (docs/pools.md): outlier
// detection takes an instance out of the rotation after a run of server
// errors, for every client. One client whose orders make the backend
// answer 500 on every instance (an order shape its matching engine chokes
// on) must not take the fleet's instances from the others.

// poisonAmount is the base amount of a poison order: every instance of
// the reference backend's front answers it 500 poisonCode.
const (
	poisonAmount = "0.0066"
	poisonCode   = "internal_error"
)

// poisonOrders is how many poison orders each attacker sends: 30 for
// each instance, ten times consecutive_5xx.
const poisonOrders = 90

// fleetUpstream lists three instances, each ejected after 3 server errors
// in a row or half of its last 10 reads or writes failed, the whole fleet
// ejectable.
const fleetUpstream = "  outlier: {consecutive_5xx: 3, max_ejection_percent: 100, failure_percentage_threshold: 50, " +
	"failure_percentage_request_volume: 10}\n"

func init() {
	for _, k := range []attackerKind{oneAddress, oneAccount} {
		poolRows = append(poolRows, poolRow{pool: "the fleet's healthy instances", attacker: k,
			fleet: true, upstream: fleetUpstream, attack: poisonOrdersAttack, holding: poisonsAnswered,
			refused: []string{poisonCode}, maxGrowth: 64 << 20, check: noInstanceEjected})
	}
}

// poisonOrdersAttack: each attacker sends poisonOrders poison orders from
// two connections, each as soon as the last was answered, then waits for
// the row to end. The address without an account presents one invented
// token (its client is its address).
func poisonOrdersAttack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		c := clientFrom(t, addr, 2)
		token := a.tokens[i]
		if token == "" {
			token = "poisoner-invented-token"
		}
		for range 2 {
			wg.Go(func() {
				for range poisonOrders / 2 {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/api/v1/odr/orders/",
						strings.NewReader(`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"`+poisonAmount+`"}`))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					a.sent.Add(1)
					ans := do(c, req)
					if ctx.Err() != nil {
						return
					}
					a.answers.add(ans)
					a.answered.Add(1)
				}
			})
		}
	}
	wg.Wait()
	<-ctx.Done()
}

// poisonsAnswered reports that every poison order was answered: enough
// to eject each instance ten times over, were one client's failures to
// count alone.
func poisonsAnswered(t *testing.T, r *poolRun, a *attack) bool {
	return a.answered.Load() >= int64(poisonOrders*len(a.addrs))
}

// noInstanceEjected checks that no instance was ejected over the row and
// that every one is in the rotation, and that each was sent poison
// orders (as server errors).
func noInstanceEjected(t *testing.T, r *poolRun) {
	text := r.g.scrape(t)
	if n := sumMetric(text, "exgate_upstream_ejections_total"); n != 0 {
		t.Errorf("%v ejections: %s", n, grepLines(text, "exgate_upstream_ejections_total"))
	}
	if n := sumMetric(text, "exgate_upstream_instances", `state="healthy"`); n != 3 {
		t.Errorf("%v instances healthy, want 3: %s", n, grepLines(text, "exgate_upstream_instances"))
	}
	for _, u := range r.env.instances {
		addr := strings.TrimPrefix(u, "http://")
		if n := sumMetric(text, "exgate_upstream_instance_requests_total", `upstream_instance="`+addr+`"`, `outcome="server_error"`); n == 0 {
			t.Errorf("instance %s answered no poison order: %s", addr, grepLines(text, "exgate_upstream_instance_requests_total"))
		}
	}
}
