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
)

// The duplicate-protection rows of the adversarial table: attacker
// accounts place orders that each carry a new identifier, as fast as they
// are answered, to fill the store — by identifiers (single orders, whose
// share is counted in identifiers) or by bytes (bulks of 10, whose
// responses are stored) — in the memory store and in Redis with a
// maxmemory that holds the attackers' shares and little more. Each
// account's share (idempotency.max_per_account, max_bytes_per_account)
// stops it: it gets 503 identifier_quota_exceeded while the victim's
// identified orders and bulks are placed.

// Shares of the rows, small so that a few dozen orders fill one.
const (
	shareIDs   = 60
	shareBytes = 48 << 10
)

// duplicateRows are the pools of duplicate protection, each filled by
// identifiers and by bytes.
var duplicateRows = []struct {
	pool   string
	config string
	redis  bool // the store is Redis, its maxmemory set for the row
	bulk   bool // the attackers send bulks of 10 (bytes), else single orders (identifiers)
}{
	{"duplicate-protection identifiers, memory", memoryStore(400, "64MiB") + share(shareIDs, "100MiB"), false, false},
	{"duplicate-protection bytes, memory", memoryStore(100000, "256KiB") + share(100000, "48KiB"), false, true},
	{"duplicate-protection identifiers, Redis at maxmemory", share(shareIDs, "100MiB"), true, false},
	{"duplicate-protection bytes, Redis at maxmemory", share(100000, "48KiB"), true, true},
}

// memoryStore is the idempotency section of a memory store of the given
// bounds; share's lines follow it.
func memoryStore(entries int, bytes string) string {
	return fmt.Sprintf("idempotency:\n  store: memory\n  memory:\n    max_entries: %d\n    max_bytes: %s\n", entries, bytes)
}

// share is an account's share of the store, within an idempotency
// section.
func share(ids int, bytes string) string {
	return fmt.Sprintf("  max_per_account: %d\n  max_bytes_per_account: %s\n", ids, bytes)
}

func init() {
	for _, d := range duplicateRows {
		cfg := d.config
		if d.redis {
			cfg = "idempotency:\n" + cfg
		}
		for _, k := range []attackerKind{oneAccount, threeAccounts} {
			fill := &storeFill{bulk: d.bulk, redis: d.redis}
			poolRows = append(poolRows, poolRow{pool: d.pool, attacker: k, config: cfg,
				attack: fill.attack, holding: fill.holding, reset: func() { fill.full.Store(0) },
				refused: []string{"identifier_quota_exceeded"},
				metric:  "exgate_idempotency_total", labels: []string{`outcome="account_full"`},
				maxGrowth: 64 << 20})
		}
	}
}

// storeFill is the attack of one duplicate-protection row.
type storeFill struct {
	bulk, redis bool
	// full counts the attackers refused identifier_quota_exceeded at
	// least once: they hold their share.
	full atomic.Int64
}

var fillRound atomic.Int64

// attack sets Redis's maxmemory for a Redis row (what Redis holds now,
// three shares and 2 MiB for the victim), then has each attacker place
// orders with new identifiers, one at a time, until ctx ends.
func (f *storeFill) attack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	if f.redis {
		setMaxmemory(t, r, 3*shareBytes+2<<20)
	}
	round := fillRound.Add(1)
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		c := clientFrom(t, addr, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.place(ctx, r, a, c, a.tokens[i], fmt.Sprintf("f%d-%d", round, i))
		}()
	}
	wg.Wait()
}

// place is one attacker's loop: orders (or bulks) whose identifiers
// start with prefix.
func (f *storeFill) place(ctx context.Context, r *poolRun, a *attack, c *http.Client, token, prefix string) {
	refused := false
	for n := 0; ctx.Err() == nil; n++ {
		path, body := "/api/v1/odr/orders/", victimOrder(prefix+"-"+strconv.Itoa(n))
		if f.bulk {
			orders := make([]string, 10)
			for j := range orders {
				orders[j] = victimOrder(prefix + "-" + strconv.Itoa(n) + "-" + strconv.Itoa(j))
			}
			path, body = "/api/v1/odr/orders/bulk/", "["+strings.Join(orders, ",")+"]"
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", r.g.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		a.sent.Add(1)
		ans := do(c, req)
		if ctx.Err() != nil {
			return // the row ended
		}
		a.answers.add(ans)
		a.answered.Add(1)
		if ans.code == "identifier_quota_exceeded" && !refused {
			refused = true
			f.full.Add(1)
		}
	}
}

// holding reports that every attacker holds its whole share: each has
// been refused for it.
func (f *storeFill) holding(t *testing.T, r *poolRun, a *attack) bool {
	return f.full.Load() == int64(len(a.addrs))
}

// setMaxmemory sets the row's Redis maxmemory to what it holds now and
// room more, with noeviction (an evicted claim is a forgotten
// identifier), and lifts it when the test ends.
func setMaxmemory(t *testing.T, r *poolRun, room int64) {
	info, err := r.env.redis.Info("memory")
	if err != nil {
		t.Error(err)
		return
	}
	used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", strconv.FormatInt(used+room, 10)}} {
		if _, err := r.env.redis.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { _, _ = r.env.redis.Do("CONFIG", "SET", "maxmemory", "0") })
}
