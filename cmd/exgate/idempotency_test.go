package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/admin"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/sim"
)

// TestDuplicateProtectionOwnRedis checks that idempotency.store: redis
// with the limits in memory gets a Redis client of its own (not an
// in-process store that replicas would not share), that it needs the key
// secret, and that /readyz names what its outage degrades.
func TestDuplicateProtectionOwnRedis(t *testing.T) {
	deadRedis := unreachable.Refused(t)
	mut := func(cfg *config.Config) {
		cfg.Limiter.Store = config.StoreMemory
		cfg.Limiter.Redis.Addrs = []string{deadRedis}
		cfg.Idempotency.Store = config.StoreRedis
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
	if want := `"duplicate_protection":"orders with an identifier are refused: duplicate-protection store unreachable (503 duplicate_protection_unavailable): `; !strings.Contains(string(body), want) {
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
		{"redis limits and duplicates, one client", config.StoreRedis, "", single, false, true, true},
		{"redis limits and duplicates, Cluster", config.StoreRedis, "", cluster, false, true, true},
		{"memory limits, redis duplicates (own client)", config.StoreMemory, config.StoreRedis, single, true, false, false},
		{"redis limits, memory duplicates", config.StoreRedis, config.StoreMemory, nil, false, false, false},
		{"memory limits and duplicates", config.StoreMemory, "", nil, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Limiter.Store, cfg.Idempotency.Store = tc.limiter, tc.idem
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

// TestClusterWithoutReplicasSaysSo: a Redis Cluster without replicas,
// with replica_acks 1 (the default for a Cluster), refuses every order
// with an identifier. Everything exgate says tells it: check-config says
// what replica_acks asks of every master, the start-up log names the
// masters without a replica, so do /readyz and the console; the refused
// orders are charged nothing; orders without an identifier pass.
func TestClusterWithoutReplicasSaysSo(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	core, logs := observer.New(zap.InfoLevel)
	a, c := orderApp(t, cl.Addrs, zap.New(core))
	if got := strings.Join(idempotencyCapacity(a.cfg), "\n"); !strings.Contains(got, "replica_acks 1 (by topology: redis cluster)") {
		t.Errorf("check-config does not say what replica_acks asks:\n%s", got)
	}
	url := "http://" + a.addr

	// The log, at start.
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, e := range logs.FilterMessageSnippet("duplicate protection").All() {
			line = e.Message + " " + fmt.Sprint(e.ContextMap())
		}
	}
	for _, want := range append([]string{"orders with an identifier are refused", "claims cannot be acknowledged by replicas",
		"0 replica(s) online, idempotency.replica_acks 1"}, cl.Addrs...) {
		if !strings.Contains(line, want) {
			t.Errorf("start-up log %q lacks %q", line, want)
		}
	}
	// /readyz and the console.
	_, _, body := call(t, "GET", "http://"+a.adminAd+"/readyz", "")
	var ready struct{ Checks map[string]string }
	_ = json.Unmarshal(body, &ready)
	if got := ready.Checks["duplicate_protection"]; !strings.Contains(got, "claims cannot be acknowledged by replicas (503 duplicate_protection_unavailable)") {
		t.Errorf("/readyz duplicate_protection = %q", got)
	}
	_, _, body = call(t, "GET", "http://"+a.adminAd+"/admin/status", "")
	var status struct{ Duplicates admin.IdempotencyStatus }
	_ = json.Unmarshal(body, &status)
	if d := status.Duplicates; d.ReplicaAcks != 1 || d.Mode != "redis cluster" || !strings.Contains(d.Error, "replica_acks 1") {
		t.Errorf("console's duplicate protection: %+v", d)
	}

	// The orders: refused, charged to the allowance of duplicate answers
	// (place_order's 5 an hour by default), never to the order limit.
	token := authenticate(t, url)
	for i := range 5 {
		code, h, b := order(t, url, token, "no-replica-"+strconv.Itoa(i), "0.001")
		if code != 503 || errCode(t, b) != "duplicate_protection_unavailable" {
			t.Fatalf("order %d: %d %s", i, code, b)
		}
		if want := fmt.Sprintf(`"duplicate_answers";r=%d;`, 4-i); !strings.Contains(h.Get("RateLimit"), want) {
			t.Fatalf("order %d refused by its claim: RateLimit %q, want %s", i, h.Get("RateLimit"), want)
		}
	}
	// Five refused orders charged nothing of the order limit's 5.
	code, h, b := call(t, "POST", url+"/api/v1/odr/orders/", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"100.00","base_amount":"0.001"}`,
		"Authorization", "Bearer "+token, "Content-Type", "application/json")
	if code != 201 || !strings.Contains(h.Get("RateLimit"), ";r=4;") {
		t.Errorf("an order without an identifier: %d RateLimit %q %s", code, h.Get("RateLimit"), b)
	}
	if n := c.orders.Load(); n != 1 {
		t.Errorf("backend saw %d orders, want only the one without an identifier", n)
	}
}

// TestRedisAtMaxmemorySaysSo: with Redis at its maxmemory an order with a
// new identifier is refused 503 duplicate_protection_full, charged
// nothing, and everything exgate says names it: /readyz, the console, the
// store's metrics (exgate_idempotency_store_full, and the failed claim
// counted as a store error of kind full).
func TestRedisAtMaxmemorySaysSo(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	a, backend := orderApp(t, []string{srv.Addr}, nil)
	url := "http://" + a.addr
	token := authenticate(t, url)
	if code, _, b := order(t, url, token, "before-full", "0.001"); code != 201 {
		t.Fatalf("order: %d %s", code, b)
	}
	// Redis past its maxmemory: what it holds now is more than it may.
	info, err := srv.Info("memory")
	if err != nil {
		t.Fatal(err)
	}
	used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
	maxmemory := used / 2
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(maxmemory, 10)); err != nil {
		t.Fatal(err)
	}
	code, h, b := order(t, url, token, "after-full", "0.001")
	if code != 503 || errCode(t, b) != "duplicate_protection_full" || !strings.Contains(h.Get("RateLimit"), ";r=4;") {
		t.Errorf("order into a full Redis: %d %s RateLimit %q, want 503 duplicate_protection_full, charged nothing (r=4)", code, b, h.Get("RateLimit"))
	}
	if code, h, _ := order(t, url, token, "before-full", "0.001"); code != 201 || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a stored identifier after Redis filled up: %d, want its replay", code)
	}
	_, _, body := call(t, "GET", "http://"+a.adminAd+"/readyz", "")
	if !strings.Contains(string(body), "duplicate-protection store full, new identifiers refused (503 duplicate_protection_full): "+srv.Addr+": Redis at maxmemory") {
		t.Errorf("/readyz: %s", body)
	}
	_, _, body = call(t, "GET", "http://"+a.adminAd+"/admin/status", "")
	var status struct{ Duplicates admin.IdempotencyStatus }
	_ = json.Unmarshal(body, &status)
	if d := status.Duplicates; !d.Full || d.MaxBytes != maxmemory || !strings.Contains(d.Error, "maxmemory") {
		t.Errorf("console's duplicate protection: %+v", d)
	}
	_, _, body = call(t, "GET", "http://"+a.adminAd+"/metrics", "")
	for _, want := range []string{"exgate_idempotency_store_full 1", `exgate_idempotency_store_errors_total{kind="full",operation="claim"} 1`,
		`exgate_idempotency_total{outcome="store_full"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := backend.orders.Load(); n != 1 {
		t.Errorf("backend saw %d orders, want 1", n)
	}
}

// orderApp is an exgate with its limits and duplicate protection in the
// Redis at addrs (replica_acks by topology), place_order limited to 5 an
// hour, in front of the reference backend, logging to log (nil: none).
func orderApp(t *testing.T, addrs []string, log *zap.Logger) (*app, *counted) {
	t.Helper()
	c := &counted{h: sim.New(sim.Options{})}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	cfg := replicaConfig(t, bs.URL, addrs, 1, func(cfg *config.Config) {
		l := &cfg.Route("place_order").Limits[0]
		l.Rate, l.Burst = config.Rate{N: 5, Period: time.Hour}, 5
	})
	if log == nil {
		log = zap.NewNop()
	}
	a := startApp(t, cfg, deps{log: log, now: time.Now, getenv: secretEnv})
	waitCatalogue(t, a)
	return a, c
}
