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

// The duplicate-protection rows of invented tokens: the address without
// an account invents token after token (opaque tokens, the default), and
// each places orders with new identifiers that the backend answers 503
// (an outage: their outcome is unknown, so each claim is kept for the
// retention). Before the share was kept per client, each token had an
// account's share of its own, and one address filled the whole store:
// every client's identified orders were then refused
// duplicate_protection_full. Now the address's tokens share its one
// share: it gets 503 identifier_quota_exceeded while the victim's
// identified orders and bulks are placed.

// sprayedPrefix starts the invented tokens of these rows: the backend's
// front answers their orders 503 (poolFront.ServeHTTP).
const sprayedPrefix = "Bearer sprayed-"

// outageCode is the code of the backend's 503 to the invented tokens'
// orders: the backend's own answer, which exgate passes on.
const outageCode = "exchange_unavailable"

func init() {
	for _, d := range []struct {
		pool, config string
		redis        bool
	}{
		{"duplicate-protection identifiers, memory, invented tokens in an outage", memoryStore(400, "64MiB") + share(shareIDs, "100MiB"), false},
		{"duplicate-protection identifiers, Redis at maxmemory, invented tokens in an outage", "idempotency:\n" + share(shareIDs, "100MiB"), true},
	} {
		kinds := []attackerKind{oneAddress, tenAddresses}
		if d.redis {
			kinds = kinds[:1] // Redis's room is not yet its shares' bound
		}
		for _, k := range kinds {
			s := &spray{redis: d.redis}
			poolRows = append(poolRows, poolRow{pool: d.pool, attacker: k, config: d.config,
				attack: s.attack, holding: s.holding,
				refused: []string{"identifier_quota_exceeded", "too_many_tokens", "throttled", outageCode},
				metric:  "exgate_idempotency_total", labels: []string{`outcome="account_full"`},
				maxGrowth: 64 << 20})
		}
	}
}

// spray is the attack of one invented-tokens row.
type spray struct {
	redis bool
	// refused counts the tokens refused for the store: their address
	// holds its share (identifier_quota_exceeded) or, before the fix,
	// the store is full (duplicate_protection_full); full counts the
	// addresses refused so at least once.
	refused, full atomic.Int64
}

// sprayTokens is how many tokens the attack invents at most, ten times
// token_spray.max_tokens (20).
const sprayTokens = 200

var sprayRound atomic.Int64

// attack sets Redis's maxmemory for a Redis row (what Redis holds now and
// 160 KiB: an address's share, about 40 KiB, fits with its limits' keys, the
// invented tokens' shares of before did not), then has four connections
// of each address place orders, each token until it is refused for the
// store, then the next token, until ctx ends. Ten addresses (tenAddresses)
// each take their share of a store that holds under seven: before a
// share was also bounded by the room left, the seventh filled it and the
// victim's identified orders were refused duplicate_protection_full.
func (s *spray) attack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	if s.redis {
		setMaxmemory(t, r, 160<<10)
	}
	round := sprayRound.Add(1)
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		var next, refused atomic.Int64
		for range 4 {
			c := clientFrom(t, addr, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					n := next.Add(1) // a token met again places new identifiers
					if s.place(ctx, r, a, c, fmt.Sprintf("%s%d-%d-%d", sprayedPrefix, round, i, n%sprayTokens), fmt.Sprintf("s%d-%d-%d", round, i, n)) &&
						refused.Add(1) == 1 {
						s.full.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
}

// place has one token place orders with identifiers starting with
// prefix until it is refused for the store, or throttled; it reports
// whether the store refused it.
func (s *spray) place(ctx context.Context, r *poolRun, a *attack, c *http.Client, auth, prefix string) bool {
	for n := 0; ctx.Err() == nil; n++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", r.g.url+"/api/v1/odr/orders/", strings.NewReader(victimOrder(prefix+"-"+strconv.Itoa(n))))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		a.sent.Add(1)
		ans := do(c, req)
		if ctx.Err() != nil {
			return false // the row ended
		}
		a.answers.add(ans)
		a.answered.Add(1)
		switch ans.code {
		case "identifier_quota_exceeded", "duplicate_protection_full":
			s.refused.Add(1)
			return true
		case "too_many_tokens", "throttled":
			return false
		}
	}
	return false
}

// holding reports that the addresses hold what they could take: each
// was refused for the store, 40 of their tokens in all.
func (s *spray) holding(t *testing.T, r *poolRun, a *attack) bool {
	return s.full.Load() == int64(len(a.addrs)) && s.refused.Load() >= 40
}
