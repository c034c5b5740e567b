package fault

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// The duplicate-answers rows of the adversarial table: each attacker
// account places one order, then re-sends it (a replay) and another order
// under its identifier (409 duplicate_identifier) as fast as it is
// answered, from several connections. Such answers charge its order limit
// nothing, so that limit never stops it; its allowance of duplicate
// answers (idempotency.duplicate_answers) does: past it the attacker gets
// 429 throttled for itself alone, from the deny cache — the Redis
// commands it causes stop growing, counted with INFO commandstats — while
// the victim places identified orders and bulks.

// answersConfig is the rows' allowance: 40 answers an hour, 40 at once.
const answersConfig = "idempotency:\n  duplicate_answers:\n    rate: 40/1h\n"

// answerWorkers is how many connections each attacker re-sends from.
const answerWorkers = 4

func init() {
	for _, k := range []attackerKind{oneAccount, threeAccounts} {
		flood := &answerFlood{}
		poolRows = append(poolRows, poolRow{pool: "duplicate answers", attacker: k, config: answersConfig,
			attack: flood.attack, holding: flood.holding,
			refused: []string{"duplicate_identifier", "throttled"},
			metric:  "exgate_ratelimit_decisions_total", labels: []string{`limit="duplicate_answers"`, `decision="limited"`},
			maxGrowth: 64 << 20})
	}
}

// answerFlood is the attack of one duplicate-answers row.
type answerFlood struct {
	throttled atomic.Int64           // attackers refused throttled at least once
	counted   atomic.Pointer[attack] // the attack whose Redis commands were counted
	done      []atomic.Int64
}

var answerRound atomic.Int64

// attack has each attacker place its order, then flood exgate with its
// duplicates until ctx ends; once every attacker is throttled and the
// requests they had in flight then are answered, it counts Redis's
// commands, lets each connection send 50 more, and counts them again:
// none may have reached Redis.
func (f *answerFlood) attack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	round := answerRound.Add(1)
	f.throttled.Store(0) // the row's state is its own run's (-count)
	f.done = make([]atomic.Int64, len(a.addrs)*answerWorkers)
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		c := clientFrom(t, addr, answerWorkers)
		id := fmt.Sprintf("dup%d-%d", round, i)
		place := answerOrder(r, a.tokens[i], victimOrder(id))
		if ans := do(c, place(ctx)); ans.err != nil || ans.status != 201 {
			t.Errorf("attacker %d's order: %d %s %v", i, ans.status, ans.code, ans.err)
			return
		}
		conflict := answerOrder(r, a.tokens[i], strings.Replace(victimOrder(id), `"price":"1000"`, `"price":"1001"`, 1))
		var throttled atomic.Bool
		for w := range answerWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					req := place(ctx)
					if n%2 == 1 {
						req = conflict(ctx)
					}
					a.sent.Add(1)
					ans := do(c, req)
					if ctx.Err() != nil {
						return // the row ended
					}
					a.answers.add(ans)
					a.answered.Add(1)
					f.done[i*answerWorkers+w].Add(1)
					if ans.code == "throttled" && !throttled.Swap(true) {
						f.throttled.Add(1)
					}
				}
			}()
		}
	}
	defer wg.Wait()
	if !f.wait(ctx, func() bool { return f.throttled.Load() == int64(len(a.addrs)) }) {
		return
	}
	// Each connection answered twice more: whatever was in flight when
	// the last attacker was refused is answered.
	if !f.eachAnswered(ctx, 2) {
		return
	}
	before, err := redisCommands(r.env.redis)
	if err != nil {
		t.Error(err)
		return
	}
	if !f.eachAnswered(ctx, 50) {
		return
	}
	after, err := redisCommands(r.env.redis)
	if err != nil {
		t.Error(err)
		return
	}
	if after != before {
		t.Errorf("%d requests of attackers past their allowance of duplicate answers caused %d Redis commands, want none",
			50*len(f.done), after-before)
	}
	f.counted.Store(a)
}

// eachAnswered waits until every attacker connection has had n more
// requests answered than now, and reports whether they have before ctx
// ends.
func (f *answerFlood) eachAnswered(ctx context.Context, n int64) bool {
	want := make([]int64, len(f.done))
	for i := range f.done {
		want[i] = f.done[i].Load() + n
	}
	return f.wait(ctx, func() bool {
		for i := range f.done {
			if f.done[i].Load() < want[i] {
				return false
			}
		}
		return true
	})
}

// wait polls cond until it holds or ctx ends.
func (f *answerFlood) wait(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// holding reports that every attacker of a is past its allowance and
// Redis's commands were counted while they went on.
func (f *answerFlood) holding(t *testing.T, r *poolRun, a *attack) bool { return f.counted.Load() == a }

// answerOrder returns a builder of one attacker's order request.
func answerOrder(r *poolRun, token, body string) func(context.Context) *http.Request {
	return func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/api/v1/odr/orders/", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		return req
	}
}

// redisCommands returns how many commands Redis has run (INFO
// commandstats), but those no request causes: INFO (duplicate
// protection's health watch, and this count), PING and connection
// set-up.
func redisCommands(s *redistest.Server) (int64, error) {
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	text, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("INFO commandstats: %T", v)
	}
	var n int64
	for name, calls := range redistest.ParseCommandStats(text) {
		switch {
		case name == "info", name == "ping", name == "hello", name == "command", strings.HasPrefix(name, "client"),
			strings.HasPrefix(name, "config"):
		default:
			n += calls
		}
	}
	return n, nil
}
