package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/unreachable"
)

// TestDuplicateProtectionOwnRedis checks that idempotency.backend: redis
// with the limits in memory gets a Redis client of its own (not an
// in-process store that replicas would not share), that it needs the key
// secret, and that /readyz names what its outage degrades.
func TestDuplicateProtectionOwnRedis(t *testing.T) {
	deadRedis := unreachable.Refused(t)
	mut := func(cfg *config.Config) {
		cfg.Limiter.Backend = config.BackendMemory
		cfg.Limiter.Redis.Addrs = []string{deadRedis}
		cfg.Idempotency.Backend = config.BackendRedis
	}
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	mut(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := start(cfg, deps{log: zap.NewNop(), now: time.Now}); err == nil || !strings.Contains(err.Error(), "duplicate protection") {
		t.Fatalf("start without the key secret: %v, want an error naming duplicate protection", err)
	}
	cfg.Upstream.URL = config.MustURL("http://" + deadRedis) // not a backend either: orders are not sent here
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
	if a.idem == nil || !a.idemOwn {
		t.Fatal("duplicate protection has no Redis client of its own")
	}
	_, _, body := call(t, "GET", "http://"+a.adminAd+"/readyz", "")
	if want := `"duplicate_protection":"orders with an identifier are refused (503 duplicate_protection_unavailable): duplicate-protection store unreachable: `; !strings.Contains(string(body), want) {
		t.Errorf("/readyz: %s\nwant it to contain %s", body, want)
	}
}

// TestClaimsJoinLimits: claims ride in the limiter's round trips exactly
// when the limits and duplicate protection share one Redis client, a
// Cluster's included; every other combination claims on its own.
func TestClaimsJoinLimits(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	t.Cleanup(func() { _ = single.Close(); _ = cluster.Close() })
	cases := []struct {
		name             string
		limiter, idem    string
		client           redis.UniversalClient
		own              bool
		claimFunc, joins bool
	}{
		{"redis limits and duplicates, one client", config.BackendRedis, "", single, false, true, true},
		{"redis limits and duplicates, Cluster", config.BackendRedis, "", cluster, false, true, true},
		{"memory limits, redis duplicates (own client)", config.BackendMemory, config.BackendRedis, single, true, false, false},
		{"redis limits, memory duplicates", config.BackendRedis, config.BackendMemory, nil, false, false, false},
		{"memory limits and duplicates", config.BackendMemory, "", nil, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Limiter.Backend, cfg.Idempotency.Backend = tc.limiter, tc.idem
			cfg.Limiter.Redis.Addrs = []string{"127.0.0.1:1"}
			if got := claimFunc(cfg) != ""; got != tc.claimFunc {
				t.Errorf("limiter built with the claim function: %v, want %v", got, tc.claimFunc)
			}
			if got := joinsLimits(cfg, tc.client, tc.own); got != tc.joins {
				t.Errorf("claims join the limits: %v, want %v", got, tc.joins)
			}
		})
	}
}
