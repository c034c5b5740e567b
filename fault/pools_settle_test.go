package fault

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The settlements' row of the adversarial table: Redis goes away while
// orders are at the backend, so that their answers cannot be recorded and
// the Redis store retries each in the background, its answer held in
// memory (idempotency.Redis.settleLater), 32 MiB for all clients. The
// attacker has settleOrders orders at the backend when it happens, each
// answered with a body of about 1 MiB (idempotency.max_response_bytes:
// all of it kept), more than the whole bound; the victim has one, answered
// after the attacker's. Once Redis is back, the victim's retry of its
// order must replay its answer: its settlement was retried. The attacker
// holds its share and is refused the rest for itself alone (not retried:
// exgate_idempotency_store_background_total{result="over_budget"}); its
// orders are all answered as the backend answered them.

// settleAmount is the base amount of the orders of this row, which the
// table's backend front holds and then answers with a large body
// (settleFront).
const settleAmount = "0.0077"

// settleOrders is how many orders each attacker has at the backend: more
// than the 32 MiB bound holds of answers of settleBody bytes.
const settleOrders = 40

// settleBody is the length of the answers to the row's orders: within
// max_response_bytes, so kept.
const settleBody = 1<<20 - 1<<10

// settleGrowth bounds exgate's growth in the row: the 41 answers of about
// 1 MiB at once, each read whole, encoded for Redis and, once its record
// failed, copied for its retries (at most the 32 MiB bound), and the
// collector's slack over them.
const settleGrowth = 320 << 20

const settleConfig = "server:\n  read_timeout: 60s\noverload:\n  fixed_limit: 128\nidempotency:\n  max_response_bytes: 1MiB\n"

func init() {
	for _, k := range []attackerKind{oneAddress, oneAccount} {
		s := &settleRow{}
		poolRows = append(poolRows, poolRow{pool: "duplicate-protection settlements retried", attacker: k, config: settleConfig,
			attack: s.attack, holding: s.holding, check: s.check, maxGrowth: settleGrowth})
	}
}

// settleFront is the part of the table's backend front that holds the
// row's orders (settleAmount): the attackers' until releaseAttackers is
// closed, the victim's until releaseVictim is, then answers each 201 with
// a body of settleBody bytes.
type settleFront struct {
	mu                              sync.Mutex
	releaseAttackers, releaseVictim chan struct{}
	victimToken                     string
	held                            atomic.Int64
	ids                             atomic.Int64
}

// serve holds and answers one of the row's orders.
func (f *settleFront) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	release := f.releaseAttackers
	if r.Header.Get("Authorization") == "Bearer "+f.victimToken {
		release = f.releaseVictim
	}
	f.mu.Unlock()
	f.held.Add(1)
	select {
	case <-release:
	case <-r.Context().Done():
	}
	f.held.Add(-1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	id := strconv.FormatInt(f.ids.Add(1), 10)
	_, _ = fmt.Fprintf(w, `{"id":%s,"note":"%s"}`, id, strings.Repeat("x", settleBody-len(id)-len(`{"id":,"note":""}`)))
}

// arm makes the front hold the row's orders, the victim's by its token.
func (f *settleFront) arm(victimToken string) (attackers, victim func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, v := make(chan struct{}), make(chan struct{})
	f.releaseAttackers, f.releaseVictim, f.victimToken = a, v, victimToken
	return sync.OnceFunc(func() { close(a) }), sync.OnceFunc(func() { close(v) })
}

// settleRow is the attack of one settlements row and what its check
// reads.
type settleRow struct {
	done        atomic.Pointer[attack] // the attack that is over (a row runs again under -count)
	victimOrder string                 // the body of the victim's order whose settlement failed
}

var settleRound atomic.Int64

// attack has each attacker send settleOrders of the row's orders and the
// victim one, held by the backend; then freezes Redis, has the backend
// answer the attackers' orders and, once they are answered, the victim's,
// and thaws Redis.
func (s *settleRow) attack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	defer s.done.Store(a)
	front := &r.env.front.settle
	releaseAttackers, releaseVictim := front.arm(r.env.tokens["victim"])
	defer releaseVictim()
	defer releaseAttackers()
	round := settleRound.Add(1)
	order := func(id string) string {
		return `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"` + settleAmount + `","identifier":"` + id + `"}`
	}
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		c := clientFrom(t, addr, settleOrders)
		token := a.tokens[i]
		if token == "" {
			token = fmt.Sprintf("settle-invented-%d", round)
		}
		for j := range settleOrders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/api/v1/odr/orders/", strings.NewReader(order(fmt.Sprintf("s%d-%d-%d", round, i, j))))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				a.sent.Add(1)
				ans := do(c, req)
				a.answers.add(ans)
				a.answered.Add(1)
			}()
		}
	}
	s.victimOrder = order(fmt.Sprintf("s%d-victim", round))
	victimDone := make(chan answer, 1)
	go func() { victimDone <- r.victimOrder(s.victimOrder) }()
	n := int64(len(a.addrs)*settleOrders + 1)
	if !eventually(time.Minute, func() bool { return front.held.Load() == n }) {
		t.Errorf("the backend holds %d of the row's %d orders", front.held.Load(), n)
		return
	}
	r.env.redis.Freeze()
	thaw := sync.OnceFunc(r.env.redis.Thaw)
	defer thaw()
	releaseAttackers()
	wg.Wait()
	releaseVictim()
	if v := <-victimDone; v.err != nil || v.status != http.StatusCreated {
		t.Errorf("the victim's order: %d %s %v, want the backend's 201", v.status, v.code, v.err)
	}
	thaw()
}

// holding reports that the attack a is over: the settlements that failed
// are being retried, or were refused.
func (s *settleRow) holding(t *testing.T, r *poolRun, a *attack) bool { return s.done.Load() == a }

// check has the victim retry its order whose settlement failed: its
// answer is replayed once the settlement's retry has recorded it (before
// the share, the attacker's settlements held the whole bound, the
// victim's was not retried, and its retry got 409 request_in_progress,
// then outcome_unknown). The attacker was refused a retry of its own.
func (s *settleRow) check(t *testing.T, r *poolRun) {
	var last answer
	if !eventually(20*time.Second, func() bool {
		last = r.victimOrder(s.victimOrder)
		return last.status == http.StatusCreated && last.replayed
	}) {
		t.Errorf("the victim's retry of its order whose settlement failed: %d %s %v, want its answer replayed", last.status, last.code, last.err)
	}
	if n := r.g.metric(t, "exgate_idempotency_store_background_total", `result="over_budget"`); n == 0 {
		t.Error("no settlement of the attacker's was refused: it held more than its share")
	}
}

// victimOrder has the victim place an order of body.
func (r *poolRun) victimOrder(body string) answer {
	req, _ := http.NewRequest("POST", r.url+"/api/v1/odr/orders/", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.env.tokens["victim"])
	req.Header.Set("Content-Type", "application/json")
	return do(r.victim, req)
}
