package limiter

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
)

// counting counts the calls that reach the limiter behind it.
type counting struct {
	next  Limiter
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, k string, l Limit) (Result, error) {
	c.calls.Add(1)
	return c.next.Allow(ctx, k, l)
}

func (c *counting) AllowN(ctx context.Context, k string, l Limit, n int64) (Result, error) {
	c.calls.Add(1)
	return c.next.AllowN(ctx, k, l, n)
}

func TestDenyCacheAnswersWithoutTheStore(t *testing.T) {
	clock := newFakeClock()
	store := &counting{next: NewMemory(MemoryOptions{Now: clock.Now})}
	dc := NewDenyCache(store, 1000, clock.Now)
	l := Limit{Rate: 1, Period: time.Second, Burst: 2}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if r, _ := dc.Allow(ctx, "k", l); !r.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	r, _ := dc.Allow(ctx, "k", l) // the store denies; the cache remembers
	if r.Allowed || store.calls.Load() != 3 {
		t.Fatalf("third: %+v, store calls %d", r, store.calls.Load())
	}
	clock.Advance(400 * time.Millisecond)
	for i := 0; i < 1000; i++ {
		r, _ = dc.Allow(ctx, "k", l)
		if r.Allowed || r.RetryAfter != 600*time.Millisecond {
			t.Fatalf("cached deny: %+v", r)
		}
	}
	if store.calls.Load() != 3 || dc.Hits() != 1000 {
		t.Errorf("store calls %d, hits %d; want 3 and 1000", store.calls.Load(), dc.Hits())
	}
	// A deny under one limit does not answer for another limit on the
	// same key: that decision goes to the store.
	dc.Allow(ctx, "k", Limit{Rate: 100, Period: time.Second, Burst: 100})
	if store.calls.Load() != 4 {
		t.Errorf("a different limit was answered from the cache (store calls %d, want 4)", store.calls.Load())
	}
	clock.Advance(600 * time.Millisecond)
	if r, _ := dc.Allow(ctx, "k", l); !r.Allowed {
		t.Errorf("after the retry delay: %+v", r)
	}
}

func TestMemoryStaysBounded(t *testing.T) {
	clock := newFakeClock()
	m := NewMemory(MemoryOptions{Now: clock.Now, MaxKeys: 6400})
	l := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	for i := 0; i < 100000; i++ {
		m.AllowLocal(fmt.Sprint("addr-", i), l, 1)
	}
	if n := m.Len(); n > 6400 || n < 6000 {
		t.Errorf("keys kept %d, want close to and at most 6400", n)
	}
	// Keys whose bucket is full again are dropped by the next sweep of
	// their shard, which an insertion into the shard triggers.
	clock.Advance(2 * time.Hour)
	for i := 0; i < 1000; i++ {
		m.AllowLocal(fmt.Sprint("fresh-", i), l, 1)
	}
	if n := m.Len(); n != 1000 {
		t.Errorf("after every old bucket refilled %d keys remain, want the 1000 fresh ones", n)
	}
}

func TestDenyCacheBounded(t *testing.T) {
	clock := newFakeClock()
	dc := NewDenyCache(NewMemory(MemoryOptions{Now: clock.Now}), 640, clock.Now)
	l := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	for i := 0; i < 10000; i++ {
		k := fmt.Sprint("k", i)
		dc.Allow(context.Background(), k, l)
		dc.Allow(context.Background(), k, l)
	}
	if n := dc.entries.len(); n > 640 {
		t.Errorf("deny cache holds %d entries, want at most 640", n)
	}
}

func TestParseTokens(t *testing.T) {
	k, _ := NewKeyer(testSecret)
	id1, id2 := k.ID("a"), k.ID("b")
	tiers := []string{"gold", "vip"}
	ok := []struct{ name, doc string }{
		{"empty", ""},
		{"comments only", "# nothing yet\n"},
		{"null tokens", "tokens:\n"},
		{"two", fmt.Sprintf("tokens:\n  %s: vip\n  %s: gold\n", id1, strings.ToUpper(id2))},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTokens("tokens.yaml", []byte(tc.doc), tiers); err != nil {
				t.Fatal(err)
			}
		})
	}
	m, _ := ParseTokens("tokens.yaml", []byte(ok[3].doc), tiers)
	if m[id1] != "vip" || m[id2] != "gold" {
		t.Errorf("parsed %v", m)
	}
	bad := []struct{ name, doc, want string }{
		{"unknown tier", fmt.Sprintf("tokens:\n  %s: platinum\n", id1), `tokens.yaml:2: tokens.` + id1 + `: unknown tier "platinum"`},
		{"raw token", "tokens:\n  eyJhbGciOiJIUzI1NiJ9.secret: vip\n", `tokens.yaml:2: tokens: "eyJhbGciOiJIUzI1NiJ9.secret" is not a token id`},
		{"unknown key", "token:\n  x: y\n", `tokens.yaml:1: unknown key "token"`},
		{"not a mapping", "- a\n", `tokens.yaml:1: want a mapping`},
		{"duplicate", fmt.Sprintf("tokens:\n  %s: vip\n  %s: gold\n", id1, strings.ToUpper(id1)), "listed twice"},
		{"syntax", "tokens: [\n", "tokens.yaml: yaml:"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens("tokens.yaml", []byte(tc.doc), tiers)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

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
		rl := NewRedis(c, RedisOptions{Timeout: time.Second})
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

func TestOpenBackends(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	t.Run("memory without secret", func(t *testing.T) {
		b, err := Open(config.Default(), OpenOptions{})
		if err != nil || b.Kind != config.BackendMemory || b.Memory == nil || b.Client != nil {
			t.Fatalf("%+v %v", b, err)
		}
		if err := b.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Run("redis needs the secret", func(t *testing.T) {
		cfg := config.Default()
		cfg.Limiter.Redis.Addrs = []string{"127.0.0.1:1"}
		_, err := Open(cfg, OpenOptions{})
		if err == nil || !strings.Contains(err.Error(), "EXGATE_KEY_SECRET is not set") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("short secret", func(t *testing.T) {
		_, err := Open(config.Default(), OpenOptions{Getenv: env(map[string]string{"EXGATE_KEY_SECRET": "short"})})
		if err == nil || !strings.Contains(err.Error(), "at least 16 bytes") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("redis down is a store failure, not a start failure", func(t *testing.T) {
		cfg := config.Default()
		cfg.Limiter.Redis.Addrs = []string{"127.0.0.1:1"}
		b, err := Open(cfg, OpenOptions{Getenv: env(map[string]string{"EXGATE_KEY_SECRET": string(testSecret)})})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Kind != config.BackendRedis || b.Deny == nil {
			t.Errorf("backend %+v", b)
		}
		if err := b.Ping(context.Background()); err == nil {
			t.Error("ping of a closed port succeeded")
		}
		var d Decision
		rs := Compile(cfg, nil)
		b.Enforcer.Decide(context.Background(), rs.Route("list_matches"), Request{Addr: netip.MustParseAddr("192.0.2.9")}, &d)
		if !d.Allowed || d.Outcomes[0].Fallback != config.StoreLocal {
			t.Errorf("decision with Redis down: %+v", d)
		}
	})
}

// TestRedisModesFromConfig: the client the configuration selects works as
// the store in each mode: standalone, Sentinel (master_name) and Cluster
// (several addresses).
func TestRedisModesFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "exgate-master")
	cluster := redistest.StartCluster(t, 3)
	cases := []struct {
		name string
		rc   config.Redis
	}{
		{"standalone", config.Redis{Addrs: []string{master.Addr}}},
		{"sentinel", config.Redis{Addrs: []string{sentinel.Addr}, MasterName: "exgate-master"}},
		{"cluster", config.Redis{Addrs: cluster.Addrs}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.rc.Timeout = time.Second
			decideTwoOfThree(t, tc.rc, "modes:"+tc.name)
		})
	}
	// The Sentinel client really talks to the master it was told about.
	if n, _ := master.Do("EXISTS", "rate:modes:sentinel"); n.(int64) != 1 {
		t.Error("the sentinel-mode key is not on the master")
	}
}

// TestCoalescedMatchesSequential: deciding k requests for each of several
// keys in one script run answers each as redis_rate deciding them one
// after another would.
func TestCoalescedMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	l := Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}
	r := NewRedis(c, RedisOptions{Timeout: time.Second, Workers: 1, MaxBatch: 1})
	defer r.Close()
	counts := []int{7, 1, 3, 6}
	seq := make([][]Result, len(counts))
	for k, n := range counts {
		for i := 0; i < n; i++ {
			res, err := r.Allow(ctx, "seq"+strconv.Itoa(k), l)
			if err != nil {
				t.Fatal(err)
			}
			seq[k] = append(seq[k], res)
		}
	}
	// The same requests as one group per key, as the batcher builds
	// them, decided by one script run.
	var gs []*group
	for k, n := range counts {
		key := "rate:coalesced" + strconv.Itoa(k)
		g := &group{rc: rateCall{key: key, burst: 5, rate: 5, period: 2}}
		for i := 0; i < n; i++ {
			g.calls = append(g.calls, &call{cmd: redis.NewCmd(ctx, "evalsha", "x", 1, key, 5, 5, 2.0, 1)})
		}
		gs = append(gs, g)
	}
	cmd := coalescedCmd(ctx, gs, true)
	if err := c.Process(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	answerCoalesced(cmd, gs, time.Now().UnixNano())
	for k, g := range gs {
		for i, cl := range g.calls {
			v, err := cl.cmd.Slice()
			if err != nil {
				t.Fatal(err)
			}
			allowed, remaining := v[0].(int64) == 1, v[1].(int64)
			want := seq[k][i]
			if allowed != want.Allowed || remaining != want.Remaining {
				t.Errorf("key %d request %d: coalesced allowed=%v remaining=%d, sequential %+v", k, i, allowed, remaining, want)
			}
			retry, _ := strconv.ParseFloat(v[2].(string), 64)
			if !allowed && math.Abs(retry-want.RetryAfter.Seconds()) > 0.1 {
				t.Errorf("key %d request %d: retry %vs, sequential %v", k, i, retry, want.RetryAfter)
			}
			reset, _ := strconv.ParseFloat(v[3].(string), 64)
			if math.Abs(reset-want.ResetAfter.Seconds()) > 0.1 {
				t.Errorf("key %d request %d: reset %vs, sequential %v", k, i, reset, want.ResetAfter)
			}
		}
	}
}

// TestCoalescingUnderLoad: many concurrent callers on one key are exact
// and cost Redis far fewer script runs than decisions.
func TestCoalescingUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := Limit{Rate: 1000, Period: time.Hour, Burst: 1000}
	before := srv.CommandCalls()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				res, err := r.Allow(context.Background(), "hot", l)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if allowed.Load() != 1000 {
		t.Errorf("allowed %d of 1600, want exactly 1000", allowed.Load())
	}
	if runs >= 1600/2 {
		t.Errorf("%d script runs for 1600 decisions on one key; want them coalesced", runs)
	}
	t.Logf("1600 decisions on one key: %d script runs", runs)
}

// TestCostsMixedWithCoalescingAndLeases: bulks (cost > 1) and single
// requests on one hot key, across replicas whose single requests are
// coalesced and leased, never admit more than the burst in total, and a
// bulk is admitted whole or not at all (its cost is charged exactly).
func TestCostsMixedWithCoalescingAndLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	l := Limit{Rate: 3000, Period: time.Hour, Burst: 3000}
	var replicas []*Redis
	for i := 0; i < 2; i++ {
		r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
		defer r.Close()
		replicas = append(replicas, r)
	}
	var admitted atomic.Int64 // in cost units
	var wg sync.WaitGroup
	for ri, r := range replicas {
		for g := 0; g < 24; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 60; i++ {
					cost := int64(1)
					if (g+i+ri)%3 == 0 {
						cost = 7 // a bulk of seven orders
					}
					res, err := r.AllowN(context.Background(), "mixed", l, cost)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(cost)
					}
				}
			}()
		}
	}
	wg.Wait()
	maxLease := int64(min(3000/leaseFraction, leaseMax))
	if got := admitted.Load(); got > 3000 || got < 3000-2*maxLease-7 {
		t.Errorf("admitted %d units, want at most 3000 and at least %d", got, 3000-2*maxLease-7)
	}
	// What Redis holds agrees: nothing is left for even one more request
	// beyond what leases hold back.
	res, err := replicas[0].AllowN(context.Background(), "mixed", l, 2*maxLease+8)
	if err != nil || res.Allowed {
		t.Errorf("after the run a bulk of %d still passed (%+v, %v): costs were undercharged", 2*maxLease+8, res, err)
	}
	t.Logf("admitted %d of 3000 units", admitted.Load())
}

// TestHotKeyLeases: a hot key far from its limit is decided mostly from
// leases (few Redis calls); leases never let more than the limit through,
// across replicas, and leave at most a lease per replica unused.
func TestHotKeyLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	l := Limit{Rate: 5000, Period: time.Hour, Burst: 5000}
	var replicas []*Redis
	for i := 0; i < 3; i++ {
		r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
		defer r.Close()
		replicas = append(replicas, r)
	}
	before := srv.CommandCalls()
	var allowed, decisions atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range replicas {
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					res, err := r.Allow(context.Background(), "leased", l)
					if err != nil {
						t.Error(err)
						return
					}
					decisions.Add(1)
					if res.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	// GCRA refills one request per emission interval (720ms here) on
	// Redis's clock; every decision fell inside [start, now], so at most
	// the burst plus the whole intervals of that span can have passed.
	refill := int64(time.Since(start) / time.Duration(l.emission()))
	after := srv.CommandCalls()
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	maxLease := int64(min(5000/leaseFraction, leaseMax))
	if got := allowed.Load(); got > 5000+refill || got < 5000-3*maxLease {
		t.Errorf("allowed %d of %d, want at most 5000 (+%d refilled during the run) and at least %d", got, decisions.Load(), refill, 5000-3*maxLease)
	}
	if runs > decisions.Load()/4 {
		t.Errorf("%d script runs for %d decisions on a hot key far from its limit", runs, decisions.Load())
	}
	t.Logf("%d decisions, %d allowed, %d script runs", decisions.Load(), allowed.Load(), runs)
}

// TestManyKeysOneScriptRun: concurrent decisions for many different keys
// are exact per key, and outside a Cluster a round trip decides all of
// its keys in one script run instead of one per key.
func TestManyKeysOneScriptRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := Limit{Rate: 3, Period: time.Hour, Burst: 3}
	const keys, perKey = 200, 5
	before := srv.CommandCalls()
	var allowed [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < keys*perKey; i += 64 {
				k := i % keys
				res, err := r.Allow(context.Background(), "many:"+strconv.Itoa(k), l)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	for k := range allowed {
		if n := allowed[k].Load(); n != 3 {
			t.Errorf("key %d: %d of %d allowed, want exactly 3", k, n, perKey)
		}
	}
	runs := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if runs >= keys*perKey/4 {
		t.Errorf("%d script runs for %d decisions on %d keys; want one run per round trip", runs, keys*perKey, keys)
	}
	t.Logf("%d decisions on %d keys: %d script runs", keys*perKey, keys, runs)
}

// decideTwoOfThree builds the client rc selects and checks that it decides
// three requests on key under a burst of 2 as [true true false].
func decideTwoOfThree(t *testing.T, rc config.Redis, key string) {
	t.Helper()
	c, err := NewRedisClient(rc, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := NewRedis(c, RedisOptions{Timeout: time.Second})
	defer r.Close()
	l := Limit{Rate: 2, Period: time.Hour, Burst: 2}
	var got []bool
	for i := 0; i < 3; i++ {
		res, err := r.Allow(context.Background(), key, l)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Allowed)
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Errorf("decisions %v, want [true true false]", got)
	}
}
