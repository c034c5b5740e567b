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
		for _, k := range []attackerKind{oneAddress, tenAddresses} {
			s := &spray{redis: d.redis}
			cfg := d.config
			if d.redis && k == tenAddresses {
				cfg = "idempotency:\n" + share(tenShareIDs, "100MiB") // ten such shares overflow maxmemory (attack)
			}
			poolRows = append(poolRows, poolRow{pool: d.pool, attacker: k, config: cfg,
				attack: s.attack, holding: s.holding, reset: func() { s.refused.Store(0); s.full.Store(0) },
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

// tenShareIDs is an address's share in the Redis row of ten addresses:
// ten of them take more of Redis than maxmemory leaves.
const tenShareIDs = 200

// sprayTokens is how many tokens the attack invents at most, ten times
// token_spray.max_tokens (20).
const sprayTokens = 200

var sprayRound atomic.Int64

// attack has four connections of each address place orders, each token
// until it is refused for the store, then the next token, until ctx
// ends. In a Redis row it first sets Redis's maxmemory (what Redis holds
// now and 160 KiB: an address's share, about 40 KiB, fits with its
// limits' keys, the invented tokens' shares of before did not; for ten
// addresses 192 KiB, where their ten static shares of tenShareIDs, about
// 300 KiB, do not fit) once each
// connection placed a few orders, so that what Redis holds besides the
// store (exgate's connections to it, the limits' keys) has grown to what
// the attack makes it, and has exgate measure its room. Ten addresses
// (tenAddresses) each take their share of a store that holds fewer: before
// a share was also bounded by the room left, they filled it and the
// victim's identified orders were refused duplicate_protection_full.
func (s *spray) attack(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	round := sprayRound.Add(1)
	type conn struct {
		c           *http.Client
		i           int
		next, fails *atomic.Int64
	}
	var conns []conn
	for i, addr := range a.addrs {
		var next, fails atomic.Int64
		for range 4 {
			conns = append(conns, conn{clientFrom(t, addr, 1), i, &next, &fails})
		}
	}
	token := func(c conn, n int64) (string, string) {
		return fmt.Sprintf("%s%d-%d-%d", sprayedPrefix, round, c.i, n%sprayTokens), fmt.Sprintf("s%d-%d-%d", round, c.i, n)
	}
	if s.redis {
		atOnce(conns, func(c conn) {
			for range 3 {
				auth, id := token(c, c.next.Add(1))
				s.order(ctx, r, a, c.c, auth, id)
			}
		})
		room := int64(160 << 10)
		if len(a.addrs) > 1 {
			room = 192 << 10
		}
		setMaxmemory(t, r, room)
		measureRoom(t, r)
	}
	atOnce(conns, func(c conn) {
		for ctx.Err() == nil {
			auth, id := token(c, c.next.Add(1)) // a token met again places new identifiers
			if s.place(ctx, r, a, c.c, auth, id) && c.fails.Add(1) == 1 {
				s.full.Add(1)
			}
		}
	})
}

// atOnce runs f for every one of xs at once, and waits for them.
func atOnce[X any](xs []X, f func(X)) {
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Add(1)
		go func() { defer wg.Done(); f(x) }()
	}
	wg.Wait()
}

// measureRoom has exgate measure Redis's room now: its health check does
// every 10 s, and /readyz's at most once a second.
func measureRoom(t *testing.T, r *poolRun) {
	measured := eventually(5*time.Second, func() bool {
		if resp, err := http.Get(r.g.admin + "/readyz"); err == nil {
			_ = resp.Body.Close()
		}
		return r.g.metric(t, "exgate_idempotency_store_max_bytes") > 0
	})
	if !measured {
		t.Error("exgate did not see Redis's maxmemory")
	}
}

// place has one token place orders with identifiers starting with
// prefix until it is refused for the store, or throttled; it reports
// whether the store refused it.
func (s *spray) place(ctx context.Context, r *poolRun, a *attack, c *http.Client, auth, prefix string) bool {
	for n := 0; ctx.Err() == nil; n++ {
		switch s.order(ctx, r, a, c, auth, prefix+"-"+strconv.Itoa(n)) {
		case "identifier_quota_exceeded", "duplicate_protection_full":
			s.refused.Add(1)
			return true
		case "too_many_tokens", "throttled":
			return false
		}
	}
	return false
}

// order has one token place an order with identifier id, and returns the
// code of its answer ("" when the row ended first).
func (s *spray) order(ctx context.Context, r *poolRun, a *attack, c *http.Client, auth, id string) string {
	req, _ := http.NewRequestWithContext(ctx, "POST", r.g.url+"/api/v1/odr/orders/", strings.NewReader(victimOrder(id)))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	a.sent.Add(1)
	ans := do(c, req)
	if ctx.Err() != nil {
		return "" // the row ended
	}
	a.answers.add(ans)
	a.answered.Add(1)
	return ans.code
}

// holding reports that the addresses hold what they could take: each
// was refused for the store, 40 of their tokens in all.
func (s *spray) holding(t *testing.T, r *poolRun, a *attack) bool {
	return s.full.Load() == int64(len(a.addrs)) && s.refused.Load() >= 40
}
