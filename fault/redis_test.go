package fault

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// redisConfig is a gateway limited through Redis at addr: list_markets
// with a limit load never reaches, list_matches with 20/1h per address
// (10 per replica in the local fallback, limiter.replicas being 2), the
// given on_store_error, and client addresses taken from X-Forwarded-For
// sent from loopback, so that each phase of a test is its own client.
func redisConfig(upstream, addr, onStoreError string, timeout time.Duration) string {
	return configHeader(upstream) + fmt.Sprintf(`client_ip:
  trusted_proxies: ["127.0.0.1"]
limiter:
  store: redis
  replicas: 2
  on_store_error: %s
  redis:
    addrs: [%q]
    timeout: %s
  token_spray:
    max_tokens: 0
routes:
  - name: list_markets
    match: GET /api/v1/mkt/markets/
    limits:
      - {key: address, rate: 1000000/1h}
  - name: list_matches
    match: GET /api/v1/mth/matches/{symbol}/
    limits:
      - {key: address, rate: 20/1h}
  - name: default
    match: "*"
`, onStoreError, addr, timeout)
}

// burst sends n sequential requests to the 20/1h route as client addr
// and returns the answers' keys ("200", "429 throttled", …) in order.
func burst(t *testing.T, c *http.Client, g *gateway, addr string, n int) []string {
	t.Helper()
	var out []string
	for range n {
		a := do(c, get(g.url+"/api/v1/mth/matches/BTC_USDT/", "X-Forwarded-For", addr))
		if a.err != nil {
			t.Fatalf("client %s: %v", addr, a.err)
		}
		k := strconv.Itoa(a.status)
		if a.code != "" {
			k += " " + a.code
		}
		out = append(out, k)
	}
	return out
}

// repeat returns n copies of k followed by m copies of l.
func repeat(k string, n int, l string, m int) []string {
	return append(slices.Repeat([]string{k}, n), slices.Repeat([]string{l}, m)...)
}

// TestRedisKilledUnderLoad kills Redis while clients keep sending
// requests, for each on_store_error mode: the answers while it is down
// are exactly what the mode declares (local: limits enforced in process
// at rate/replicas; open: everything allowed; closed: 503
// rate_limit_unavailable), no other 5xx and no error outside exgate's
// JSON shape at any time; Redis restarted (empty), the same gateway
// decides in Redis again: a new client gets the full shared limit, not
// the local share, and no fallback is counted.
func TestRedisKilledUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// down is what 30 requests of a new client get while Redis is down.
		down []string
		// load is every answer the load may get, before, during and after.
		load []string
		// ready is /readyz's status while Redis is down.
		ready int
	}{
		{"local", repeat("200", 10, "429 throttled", 20), []string{"200"}, http.StatusOK},
		{"open", repeat("200", 30, "", 0), []string{"200"}, http.StatusOK},
		{"closed", repeat("503 rate_limit_unavailable", 30, "", 0), []string{"200", "503 rate_limit_unavailable"}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			be := startBackend(t)
			// A deadline a loaded machine never misses while Redis is up,
			// so that exact counts are Redis's; a dead Redis refuses
			// connections at once whatever it is.
			g := startGateway(t, redisConfig(be.url, srv.Addr, tc.mode, 500*time.Millisecond))
			c := newClient(t, 8)

			ctx, stop := context.WithCancel(context.Background())
			var ty tally
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				load(ctx, c, 4, func(w, i int) *http.Request {
					return get(g.url+"/api/v1/mkt/markets/", "X-Forwarded-For", fmt.Sprintf("10.0.%d.%d", w, i%250))
				}, &ty)
			}()
			defer func() { stop(); wg.Wait() }()

			time.Sleep(500 * time.Millisecond)
			if got := burst(t, c, g, "192.0.2.1", 25); !slices.Equal(got, repeat("200", 20, "429 throttled", 5)) {
				t.Fatalf("with Redis up, 25 requests against 20/1h: %v", got)
			}

			srv.Stop()
			time.Sleep(1500 * time.Millisecond) // load meets the dead store; readiness notices
			if got := burst(t, c, g, "192.0.2.2", 30); !slices.Equal(got, tc.down) {
				t.Errorf("with Redis down (%s), 30 requests against 20/1h with 2 replicas: %v, want %v", tc.mode, got, tc.down)
			}
			if res, err := noKeepAlive().Get(g.admin + "/readyz"); err != nil || res.StatusCode != tc.ready {
				t.Errorf("/readyz with Redis down (%s): %v %v, want %d", tc.mode, res.Status, err, tc.ready)
			} else {
				res.Body.Close()
			}
			if n := g.metric(t, "exgate_ratelimit_fallback_total", `mode="`+tc.mode+`"`); n < 30 {
				t.Errorf("exgate_ratelimit_fallback_total{mode=%q} = %v with Redis down, want ≥ 30", tc.mode, n)
			}

			checkRecoveredInRedis(t, c, g, srv)

			time.Sleep(300 * time.Millisecond)
			stop()
			wg.Wait()
			t.Logf("load: %s", &ty)
			if ty.nErrs > 0 {
				t.Errorf("load got errors (transport or outside the error shape): %s", &ty)
			}
			for k := range ty.byKey {
				if !slices.Contains(tc.load, k) {
					t.Errorf("load got %q (%d times), undeclared for on_store_error %s: %s", k, ty.byKey[k], tc.mode, &ty)
				}
			}
			if tc.mode == "closed" && ty.byKey["503 rate_limit_unavailable"] == 0 {
				t.Errorf("closed: the load never met the dead store: %s", &ty)
			}
			if ty.byKey["200"] == 0 {
				t.Errorf("load got no 200: %s", &ty)
			}
		})
	}
}

// checkRecoveredInRedis restarts srv (empty) and checks that g decides in
// Redis again: a new client gets the full shared limit, and no decision
// falls back.
func checkRecoveredInRedis(t *testing.T, c *http.Client, g *gateway, srv *redistest.Server) {
	srv.Restart()
	restarted := time.Now()
	// Recovered: Redis decides again (EVALSHA runs there) and, for
	// longer than the limiter's 250ms back-off after a failure, no
	// decision falls back.
	clean := 0
	recovered := eventually(15*time.Second, func() bool {
		fb, calls := g.metric(t, "exgate_ratelimit_fallback_total"), srv.CommandCalls()["evalsha"]
		time.Sleep(300 * time.Millisecond)
		if g.metric(t, "exgate_ratelimit_fallback_total") == fb && srv.CommandCalls()["evalsha"] > calls {
			clean++
		} else {
			clean = 0
		}
		return clean == 2
	})
	if !recovered {
		t.Fatalf("no recovery within 15s of Redis restarting")
	}
	t.Logf("recovered %v after Redis restarted", time.Since(restarted).Round(10*time.Millisecond))
	fallbacks := g.metric(t, "exgate_ratelimit_fallback_total")
	calls := srv.CommandCalls()["evalsha"]
	if got := burst(t, c, g, "192.0.2.4", 25); !slices.Equal(got, repeat("200", 20, "429 throttled", 5)) {
		t.Errorf("after recovery, 25 requests against 20/1h: %v, want 20 allowed as with Redis up", got)
	}
	if d := srv.CommandCalls()["evalsha"] - calls; d < 21 {
		t.Errorf("after recovery Redis ran %d EVALSHA for 25 requests, want ≥ 21 (the 21st denial is then remembered)", d)
	}
	if d := g.metric(t, "exgate_ratelimit_fallback_total") - fallbacks; d != 0 {
		t.Errorf("after recovery %v more fallback decisions, want 0", d)
	}
	if n, err := srv.Do("DBSIZE"); err != nil || n.(int64) == 0 {
		t.Errorf("after recovery Redis holds %v keys (%v)", n, err)
	}
}

// TestRedisSlow makes Redis stop answering while clients send requests:
// with CLIENT PAUSE, and with DEBUG SLEEP, which blocks the whole server.
// Every request is answered 200, by the local fallback, and the store
// deadline (limiter.redis.timeout, 50ms here) is what ended the calls:
// exgate counts store timeouts. (A request that waited for Redis would
// also get a 200 once Redis answered; it would count no timeout.)
// Afterwards Redis decides again.
func TestRedisSlow(t *testing.T) {
	const deadline = 50 * time.Millisecond
	for _, tc := range []struct {
		name  string
		block func(*redistest.Server) error
	}{
		// Both blocks end by themselves after 3s (CLIENT UNPAUSE is
		// paused too): far longer than the test's requests take.
		{"client pause", func(s *redistest.Server) error {
			_, err := s.Do("CLIENT", "PAUSE", "3000", "ALL")
			return err
		}},
		{"debug sleep", func(s *redistest.Server) error {
			errc := make(chan error, 1)
			go func() { _, err := s.Do("DEBUG", "SLEEP", "3"); errc <- err }()
			select {
			case err := <-errc: // answered at once: refused
				return fmt.Errorf("DEBUG SLEEP returned at once: %v", err)
			case <-time.After(100 * time.Millisecond):
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, "--enable-debug-command", "yes")
			be := startBackend(t)
			g := startGateway(t, redisConfig(be.url, srv.Addr, "local", deadline))
			c := newClient(t, 8)
			url := g.url + "/api/v1/mkt/markets/"
			for i := range 20 { // warm the pools
				if a := do(c, get(url, "X-Forwarded-For", "10.1.0."+strconv.Itoa(i))); a.status != 200 {
					t.Fatalf("warm-up: %d %v", a.status, a.err)
				}
			}
			timeouts := g.metric(t, "exgate_ratelimit_store_errors_total", `kind="timeout"`)

			if err := tc.block(srv); err != nil {
				t.Fatal(err)
			}
			var ty tally
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 5 {
						ty.add(do(c, get(url, "X-Forwarded-For", fmt.Sprintf("10.2.%d.%d", w, i))))
					}
				}()
			}
			wg.Wait()

			t.Logf("while Redis was blocked: %s (store deadline %v)", &ty, deadline)
			if ty.nErrs > 0 || ty.byKey["200"] != ty.total {
				t.Errorf("while Redis was blocked, want only 200s: %s", &ty)
			}
			if d := g.metric(t, "exgate_ratelimit_store_errors_total", `kind="timeout"`) - timeouts; d < 1 {
				t.Errorf("no store timeout was counted while Redis was blocked: the requests waited for Redis")
			}
			// Redis decides again once it answers.
			if !eventually(30*time.Second, func() bool {
				calls := srv.CommandCalls()["evalsha"]
				a := do(c, get(url, "X-Forwarded-For", "10.3.0.1"))
				return a.status == 200 && srv.CommandCalls()["evalsha"] > calls
			}) {
				t.Error("Redis did not decide again within 30s of answering")
			}
		})
	}
}
