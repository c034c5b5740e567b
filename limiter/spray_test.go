package limiter

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// TestRedisSprayGuardSharedByReplicas: two enforcers on one Redis (two
// replicas) count an address's tokens together.
func TestRedisSprayGuardSharedByReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 3, window: 1h } }
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { key: address, when: anonymous, rate: 1/1h }
      - { key: token, when: token, rate: 100/1h }
`)
	rs := Compile(cfg, nil)
	var replicas []*Enforcer
	for i := 0; i < 2; i++ {
		c := srv.Client()
		k, _ := NewKeyer(testSecret)
		rl := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		e, err := NewEnforcer(EnforcerOptions{Store: rl, Keyer: k})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, e)
	}
	var d Decision
	demoted := 0
	for i := 0; i < 10; i++ {
		replicas[i%2].Decide(context.Background(), rs.Route("r"), Request{Token: fmt.Sprint("secret-", i), Addr: netip.MustParseAddr("192.0.2.1")}, &d)
		if d.Demoted {
			demoted++
		}
	}
	if demoted != 7 {
		t.Errorf("demoted %d of 10 tokens, want 7 (3 admitted across both replicas)", demoted)
	}
	v, err := srv.Do("SCARD", KeyPrefix+"spray:192.0.2.1")
	if err != nil || v.(int64) != 3 {
		t.Errorf("spray set has %v members (%v), want 3", v, err)
	}
	ttl, _ := srv.Do("PTTL", KeyPrefix+"spray:192.0.2.1")
	if ms := ttl.(int64); ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		t.Errorf("spray set TTL %dms, want within the 1h window", ms)
	}
	// Keys never hold a raw token.
	keys, _ := srv.Do("KEYS", "*")
	for _, k := range keys.([]any) {
		if strings.Contains(k.(string), "secret") {
			t.Errorf("key %q contains a raw token", k)
		}
	}
}

// TestClusterSprayGuard: in a Redis Cluster, where the spray set and the
// token's and address's buckets live in different slots, the guard still
// admits max_tokens tokens of an address, a demoted token is counted in
// its address's shared bucket, and an admitted one in its own.
func TestClusterSprayGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	cl := redistest.StartCluster(t, 3)
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 2, window: 1h } }
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { key: address, rate: 50/1h }
      - { key: token, rate: 3/1h }
`)
	rr := Compile(cfg, nil).Route("r")
	k, _ := NewKeyer(testSecret)
	rl := ratelimit.NewRedis(cl.Client(t), ratelimit.RedisOptions{Timeout: testStoreTimeout})
	t.Cleanup(func() { _ = rl.Close() })
	e, err := NewEnforcer(EnforcerOptions{Store: rl, Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	var d Decision
	allowed := map[string]int{}
	for i := 0; i < 5; i++ {
		tok := fmt.Sprint("secret-", i)
		for j := 0; j < 4; j++ {
			e.Decide(context.Background(), rr, Request{Token: tok, Addr: netip.MustParseAddr("192.0.2.9")}, &d)
			if d.Demoted != (i >= 2) {
				t.Fatalf("token %d request %d: demoted %v", i, j, d.Demoted)
			}
			if d.Allowed {
				allowed[tok]++
			}
		}
	}
	// Two admitted tokens with 3 each; the three demoted ones share the
	// address's bucket for excess tokens, also 3.
	if got := allowed["secret-0"] + allowed["secret-1"]; got != 6 {
		t.Errorf("admitted tokens: %d allowed, want 6", got)
	}
	if got := allowed["secret-2"] + allowed["secret-3"] + allowed["secret-4"]; got != 3 {
		t.Errorf("demoted tokens: %d allowed, want 3 between them", got)
	}
}
