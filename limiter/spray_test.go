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
		rl := ratelimit.NewRedis(c, ratelimit.RedisOptions{Timeout: time.Second})
		t.Cleanup(func() { _ = rl.Close() })
		e, err := NewEnforcer(EnforcerOptions{Store: rl, Keyer: k, Spray: c, SprayTimeout: time.Second})
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
