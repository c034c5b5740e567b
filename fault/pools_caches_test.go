package fault

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/exgate/exgate/internal/jwttest"
	"github.com/exgate/exgate/sim"
)

// The rows of the caches and stores exgate keeps in memory and in Redis,
// which no client is refused by: the verified and refused token caches
// (identity), the deny cache and the token-spray guard's answers and sets
// (the rate limits), the top-k tracker and the limits' Redis keys. Each
// is bounded whatever clients send, and holds per client only what its
// limits let it make: the attackers take all they can, are refused for
// themselves by their limits or their forged tokens, and the victim's
// requests all pass.

// cacheTokens is how many tokens each attacker presents: far more than
// the row's caches hold.
const cacheTokens = 3000

// The rows' caches, bounded far below what the attackers send: lines of
// the identity and limiter sections.
const (
	cacheIdentity = "  jwt:\n    cache_size: 500\n    refused_cache_size: 500\n"
	cacheLimiter  = "  deny_cache_keys: 500\n"
)

func init() {
	poolRows = append(poolRows,
		poolRow{pool: "refused-token cache", attacker: oneAddress, verify: true, identity: cacheIdentity, limiter: cacheLimiter,
			attack: forgedTokens, holding: tokensSent,
			refused: []string{"token_not_valid"}, metric: "exgate_auth_failures_total", maxGrowth: 64 << 20},
		poolRow{pool: "deny cache, token-spray guard, top-k tracker, Redis memory", attacker: oneAddress, identity: cacheIdentity, limiter: cacheLimiter,
			attack: inventedTokens, holding: tokensSent,
			refused: []string{"throttled", "too_many_tokens", "overloaded"}, metric: "exgate_ratelimit_decisions_total",
			labels: []string{`decision="limited"`}, maxGrowth: 64 << 20, check: redisBounded},
	)
	for _, k := range []attackerKind{oneAddress, threeAccounts} {
		poolRows = append(poolRows, poolRow{pool: "connections", attacker: k, config: "server:\n  max_connections: 64\n",
			attack: heldConnections, holding: connectionsHeld,
			refused: []string{"too_many_connections"}, metric: "exgate_connections_refused_total", maxGrowth: 64 << 20})
	}
	for _, k := range []attackerKind{oneAccount, threeAccounts} {
		poolRows = append(poolRows, poolRow{pool: "verified-token cache", attacker: k, identity: cacheIdentity, limiter: cacheLimiter,
			attack: mintedTokens, holding: tokensSent,
			refused: []string{"throttled", "overloaded"}, metric: "exgate_ratelimit_decisions_total",
			labels: []string{`decision="limited"`}, maxGrowth: 64 << 20})
	}
}

// The rows whose attackers' allowed requests reach the backend may also
// see them shed (503 overloaded) when a loaded machine slows the backend
// and the adaptive limit falls: a shed past the attacker's share of the
// backend's slots is a refusal for itself alone, as the slots' row has it.

// cacheWorkers is how many requests each attacker keeps under way.
const cacheWorkers = 8

// sendTokens has each attacker send cacheTokens requests from its
// address, the i-th by request(attacker, i), cacheWorkers at once.
func sendTokens(ctx context.Context, t *testing.T, r *poolRun, a *attack, request func(attacker, i int) *http.Request) {
	var wg sync.WaitGroup
	for n, addr := range a.addrs {
		c := clientFrom(t, addr, cacheWorkers)
		for w := range cacheWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < cacheTokens && ctx.Err() == nil; i += cacheWorkers {
					ans := do(c, request(n, i).WithContext(ctx))
					if ctx.Err() != nil {
						return
					}
					a.answers.add(ans)
					a.sent.Add(1)
					a.answered.Add(1)
				}
			}()
		}
	}
	wg.Wait()
}

// tokensSent reports that every attacker has sent all its tokens.
func tokensSent(t *testing.T, r *poolRun, a *attack) bool {
	return a.answered.Load() == int64(len(a.addrs)*cacheTokens)
}

// forgedTokens: the address without an account presents tokens of the
// victim's account signed with a key exgate does not hold, each new, on a
// private route: every one is refused 401, and the refused-token cache
// turns over many times.
func forgedTokens(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	user := userOf(t, r.env.tokens["victim"])
	sendTokens(ctx, t, r, a, func(_, i int) *http.Request {
		tok := jwttest.Sign(t, jwt.SigningMethodHS256, []byte("not-the-key-of-the-exchange"), "", accessClaims(user, i), nil)
		return get(r.g.url+"/api/v1/odr/orders/", "Authorization", "Bearer "+tok)
	})
}

// mintedTokens: each attacker account presents cacheTokens valid tokens
// of its own, each new, on a private route, filling the verified-token
// cache many times over; its read limit refuses it once spent.
func mintedTokens(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	users := make([]any, len(a.tokens))
	for i, tok := range a.tokens {
		users[i] = userOf(t, tok)
	}
	sendTokens(ctx, t, r, a, func(n, i int) *http.Request {
		tok := jwttest.Sign(t, jwt.SigningMethodHS256, []byte(sim.DevSecret), "", accessClaims(users[n], i), nil)
		return get(r.g.url+"/api/v1/odr/orders/", "Authorization", "Bearer "+tok)
	})
}

// inventedTokens: the address without an account invents a token per
// request, on the market lists (which count tokens) and the order route,
// filling the token-spray guard's answers, the deny cache and the top-k
// tracker with all it can make them hold: its limits (20 tokens of its
// own an hour, then its address's allowance) refuse it.
func inventedTokens(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	paths := []string{"/api/v1/mkt/markets/", "/api/v1/mkt/currencies/", "/api/v1/mth/matches/BTC_USDT/"}
	sendTokens(ctx, t, r, a, func(_, i int) *http.Request {
		return get(r.g.url+paths[i%len(paths)], "Authorization", fmt.Sprintf("Bearer invented-%d", i))
	})
}

// redisBounded checks that Redis holds for the attacking address no more
// than docs/limits.md's bound for one address ("What one address can make
// exgate hold"), the victim's keys included.
func redisBounded(t *testing.T, r *poolRun) {
	f := redisFootprint(t, r.env.redis)
	t.Logf("Redis (keys, bytes): %v", f)
	if f["all"][1] > 32<<10 {
		t.Errorf("Redis holds %d B after one address's %d invented tokens, want at most 32 KiB (its ≈ 12 KB and the victim's)", f["all"][1], cacheTokens)
	}
}

// accessClaims are the claims of the i-th access token of user.
func accessClaims(user any, i int) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"token_type": "access", "user_id": user, "jti": fmt.Sprintf("pool-%d-%d", now.UnixNano(), i),
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// userOf returns the user claim of a token the reference backend issued.
func userOf(t *testing.T, token string) any {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		UserID json.Number `json:"user_id"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.UserID == "" {
		t.Fatalf("claims %s: %v", b, err)
	}
	n, _ := c.UserID.Int64()
	return n
}

// connectionsPerAttacker is how many connections each attacker opens:
// three times the row's max_connections.
const connectionsPerAttacker = 192

// heldConnections: each attacker opens connectionsPerAttacker connections
// from its address, sends one request on each and keeps it open.
func heldConnections(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		auth := ""
		if a.tokens[i] != "" {
			auth = "Authorization: Bearer " + a.tokens[i] + "\r\n"
		}
		head := "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: " + r.host + "\r\n" + auth + "\r\n"
		for range connectionsPerAttacker {
			wg.Add(1)
			go func() { defer wg.Done(); sendOn(ctx, r, a, addr, head, "", true) }()
		}
	}
	wg.Wait()
}

// connectionsHeld reports that every attacker's connection was answered.
func connectionsHeld(t *testing.T, r *poolRun, a *attack) bool {
	return a.answered.Load() == int64(len(a.addrs)*connectionsPerAttacker)
}
