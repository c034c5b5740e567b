package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/sim"
)

const keySecret = "integration-key-secret-0123456789"

// secretEnv is an environment holding the key secret.
func secretEnv(k string) (string, bool) {
	switch k {
	case "EXGATE_KEY_SECRET":
		return keySecret, true
	case config.DefaultJWTSecretEnv: // the reference backend's signing secret
		return sim.DevSecret, true
	}
	return "", false
}

// replicas starts n gateways sharing one configuration (made by mut over
// the defaults, with Redis at addrs) in front of one reference backend.
func replicas(t *testing.T, n int, addrs []string, mut func(*config.Config)) ([]string, *counted) {
	t.Helper()
	c := &counted{h: sim.New(sim.Options{})}
	bs := httptest.NewServer(c)
	t.Cleanup(bs.Close)
	var urls []string
	for i := 0; i < n; i++ {
		a := startApp(t, replicaConfig(t, bs.URL, addrs, n, mut), deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv})
		waitCatalogue(t, a)
		urls = append(urls, "http://"+a.addr)
	}
	// Connections the client dialled but never used look new to the
	// server, which waits 5s before counting them idle at shutdown.
	t.Cleanup(client.CloseIdleConnections)
	return urls, c
}

// replicaConfig is the configuration of one of n replicas in front of
// the backend at backendURL, with its limits (and duplicate protection)
// in the Redis at addrs, changed by mut (nil for none).
func replicaConfig(t *testing.T, backendURL string, addrs []string, n int, mut func(*config.Config)) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(backendURL)
	cfg.Server.DrainDelay = 0
	cfg.Log.Access = false
	cfg.Limiter.Redis.Addrs = addrs
	// Store deadlines far beyond a loaded machine's stalls: a call
	// timing out would fall back (limits) or refuse (orders), which
	// is not what these tests are about; tests of timeouts set their
	// own in mut.
	cfg.Limiter.Redis.Timeout = time.Second // the most it may be
	cfg.Idempotency.Timeout = 2 * time.Second
	cfg.Limiter.Replicas = n
	if mut != nil {
		mut(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// client is an HTTP client with a keep-alive pool large enough for the
// test's concurrency.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

func get(t *testing.T, url string, header ...string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header
}

// TestReplicasShareLimitsExactly: three exgate instances share one Redis;
// 50 concurrent clients with one token against a 100/minute limit get
// exactly 100 requests through, none over, whichever replica they reach.
func TestReplicasShareLimitsExactly(t *testing.T) {
	srv := redistest.Start(t)
	urls, backend := replicas(t, 3, []string{srv.Addr}, func(c *config.Config) {
		c.Route("list_markets").Limits[1].Rate = config.Rate{N: 100, Period: time.Minute} // list_markets, with a token
		c.Route("list_markets").Limits[1].Burst = 100
		// Exactness is Redis's: a store failure must show as a failure
		// here, not as the local fallback's allowance.
		c.Limiter.OnStoreError = config.StoreClosed
		c.Limiter.Redis.Timeout = time.Second // the most it may be
		c.Overload.Enabled = false            // limits are counted, not the loaded machine's shedding
	})
	var ok, limited, other atomic.Int64
	var codesMu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 6; j++ {
				code, _ := get(t, urls[(i+j)%3]+"/api/v1/mkt/markets/", "Authorization", "Bearer shared-token")
				switch code {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					other.Add(1)
					codesMu.Lock()
					codes[code]++
					codesMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// GCRA refills one request every 600ms; count what elapsed could add.
	refill := int64(elapsed / (600 * time.Millisecond))
	if ok.Load() < 100 || ok.Load() > 100+refill || other.Load() != 0 {
		t.Errorf("allowed %d, limited %d, other %d %v in %v; want exactly 100 allowed (+%d refilled at most)",
			ok.Load(), limited.Load(), other.Load(), codes, elapsed, refill)
	}
	if got := backend.proxied.Load(); got != ok.Load() {
		t.Errorf("backend saw %d requests, gateways allowed %d", got, ok.Load())
	}
	t.Logf("300 requests through 3 replicas in %v: %d allowed, %d limited", elapsed, ok.Load(), limited.Load())
}

// TestRedisClusterLimits: the same over a real 3-master Redis Cluster;
// keys of many clients spread over the masters.
func TestRedisClusterLimits(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	urls, _ := replicas(t, 2, cl.Addrs, func(c *config.Config) {
		c.Route("list_markets").Limits[1].Rate = config.Rate{N: 5, Period: time.Hour}
		c.Route("list_markets").Limits[1].Burst = 5
		c.Limiter.TokenSpray.MaxTokens = 0
	})
	for tok := 0; tok < 30; tok++ {
		ok := 0
		for j := 0; j < 7; j++ {
			if code, _ := get(t, urls[j%2]+"/api/v1/mkt/markets/", "Authorization", fmt.Sprint("Bearer tok-", tok)); code == 200 {
				ok++
			}
		}
		if ok != 5 {
			t.Fatalf("token %d: %d allowed of 7, want 5", tok, ok)
		}
	}
	masters := 0
	for _, s := range cl.Servers {
		n, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if n.(int64) > 0 {
			masters++
		}
	}
	if masters != 3 {
		t.Errorf("limit keys on %d of 3 masters, want all three", masters)
	}
}

// TestHotKeyAnsweredWithoutRedis: once a client is over its limit, a
// flood from it makes no Redis calls until it resets.
func TestHotKeyAnsweredWithoutRedis(t *testing.T) {
	srv := redistest.Start(t)
	urls, backend := replicas(t, 1, []string{srv.Addr}, func(c *config.Config) {
		c.Route("list_matches").Limits[0].Rate = config.Rate{N: 5, Period: time.Hour} // list_matches per address
		c.Route("list_matches").Limits[0].Burst = 5
	})
	url := urls[0] + "/api/v1/mth/matches/BTC_USDT/"
	for i := 0; i < 6; i++ { // 5 allowed, the 6th denied by Redis and remembered
		get(t, url)
	}
	before := srv.CommandCalls()
	var limited atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if code, _ := get(t, url); code == 429 {
					limited.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := srv.CommandCalls()
	if limited.Load() != 1000 {
		t.Errorf("flood: %d of 1000 limited", limited.Load())
	}
	for _, cmd := range []string{"evalsha", "eval", "get", "set"} {
		if after[cmd] != before[cmd] {
			t.Errorf("the flood made %d %s calls to Redis, want none", after[cmd]-before[cmd], cmd)
		}
	}
	if backend.proxied.Load() != 5 {
		t.Errorf("backend saw %d requests, want 5", backend.proxied.Load())
	}
}

// TestRedisDownAndBack: with Redis killed, a local-fallback route keeps
// limiting in process and a closed route answers 503; Redis back, exgate
// uses it again without a restart.
func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	urls, _ := replicas(t, 1, []string{srv.Addr}, func(c *config.Config) {
		c.Limiter.Replicas = 2
		c.Route("list_matches").Limits[0].Rate = config.Rate{N: 10, Period: time.Hour} // list_matches: local fallback (the default)
		c.Route("list_matches").Limits[0].Burst = 10
		c.Route("list_markets").OnStoreError = config.StoreClosed // list_markets fails closed
	})
	matches, markets := urls[0]+"/api/v1/mth/matches/BTC_USDT/", urls[0]+"/api/v1/mkt/markets/"
	if code, _ := get(t, matches); code != 200 {
		t.Fatalf("with Redis up: %d", code)
	}
	srv.Stop()
	codes := map[int]int{}
	for i := 0; i < 8; i++ {
		code, _ := get(t, matches)
		codes[code]++
	}
	// The local fallback allows 10/2 = 5 per replica.
	if codes[200] != 5 || codes[429] != 3 {
		t.Errorf("local fallback with Redis down: %v, want 5×200 and 3×429", codes)
	}
	req, _ := http.NewRequest("GET", markets, nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || !strings.Contains(string(body), `"code":"rate_limit_unavailable"`) {
		t.Errorf("closed route with Redis down: %d %s", res.StatusCode, body)
	}

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := get(t, markets)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 10s of Redis restarting: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Decisions are Redis's again: the key is in Redis.
	if n, _ := srv.Do("DBSIZE"); n.(int64) == 0 {
		t.Error("after recovery Redis holds no keys")
	}
}

// TestRedisSlowBoundedByDeadline: with Redis stopped (SIGSTOP: it keeps
// its connections and answers nothing) until the requests are done,
// requests are answered 200 by the local fallback: the store deadline
// ended their calls (a request that waited for Redis would meet the
// client's 30s timeout first).
func TestRedisSlowBoundedByDeadline(t *testing.T) {
	srv := redistest.Start(t)
	urls, _ := replicas(t, 1, []string{srv.Addr}, func(c *config.Config) {
		c.Limiter.Redis.Timeout = 50 * time.Millisecond
	})
	url := urls[0] + "/api/v1/mth/matches/BTC_USDT/"
	get(t, url) // warm the connection pools
	srv.Freeze()
	defer srv.Thaw()
	var worst time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		code, _ := get(t, url)
		worst = max(worst, time.Since(start))
		if code != 200 {
			t.Errorf("request %d with Redis stopped: %d, want 200 from the local fallback", i, code)
		}
	}
	t.Logf("slowest request with Redis stopped: %v (store deadline 50ms)", worst)
}
