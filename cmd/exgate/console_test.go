package main

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/limiter"
)

const testAdminToken = "console-test-admin-token"

// consoleStack is a gateway whose list_markets route allows a token 3
// requests a minute, with the admin token set; redis selects the store.
func consoleStack(t *testing.T, redisAddr string) (*app, string, string) {
	t.Helper()
	st := startStackWith(t, func(c *config.Config) {
		c.Route("list_markets").Limits[1].Rate = config.Rate{N: 3, Period: time.Minute}
		c.Route("list_markets").Limits[1].Burst = 3
		c.Log.Access = false
		if redisAddr != "" {
			c.Limiter.Redis.Addrs = []string{redisAddr}
			c.Limiter.Redis.Timeout = time.Second
			c.Limiter.OnStoreError = config.StoreClosed // a store failure must show, not the local fallback
		}
	}, func(k string) (string, bool) {
		if k == adminTokenEnv {
			return testAdminToken, true
		}
		return secretEnv(k)
	})
	return st, "http://" + st.addr, "http://" + st.adminAd
}

// startStackWith is startStack's gateway with an environment.
func startStackWith(t *testing.T, mut func(*config.Config), getenv func(string) (string, bool)) *app {
	t.Helper()
	a, err := tryStartStack(t, mut, getenv)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryStartStack is startStackWith, returning the error of a gateway that
// did not start.
func tryStartStack(t *testing.T, mut func(*config.Config), getenv func(string) (string, bool)) (*app, error) {
	t.Helper()
	st := startStack(t, nil) // the reference backend
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(st.bs.URL)
	cfg.Server.DrainDelay = 0
	mut(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := start(cfg, deps{log: zap.NewNop(), now: time.Now, getenv: getenv})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = a.shutdown() })
	waitCatalogue(t, a)
	return a, nil
}

func adminJSON(t *testing.T, method, url string, out any, header ...string) int {
	t.Helper()
	code, _, b := call(t, method, url, "", append([]string{"Authorization", "Bearer " + testAdminToken}, header...)...)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, code, b, err)
		}
	}
	return code
}

type inspected struct {
	Subject struct{ Kind, ID string }
	Limits  []limiter.LimitState
}

func (in inspected) limit(route, name string) (limiter.LimitState, bool) {
	for _, l := range in.Limits {
		if l.Route == route && l.Limit == name {
			return l, true
		}
	}
	return limiter.LimitState{}, false
}

type topAnswer struct {
	Windows []struct {
		Minutes int
		Routes  []struct {
			Route               string
			Requests, Refused   int64
			IdentitiesByRefused []struct {
				Kind, ID string
				Count    int64
			} `json:"identities_by_refused"`
			AddressesByRefused []struct {
				Kind, ID string
				Count    int64
			} `json:"addresses_by_refused"`
			IdentitiesByRequests []struct {
				Kind, ID string
				Count    int64
			} `json:"identities_by_requests"`
		}
	}
}

// TestConsoleAgainstTraffic drives one client over its limit among
// well-behaved ones, on the memory and the Redis store, and checks the
// console as support would use it: the client is first among the
// refused, inspect shows its remaining at 0 and a retry matching the
// 429's Retry-After without charging anything, and reset (admin token
// only) gives it its allowance back.
func TestConsoleAgainstTraffic(t *testing.T) {
	stores := []string{"memory"}
	if !testing.Short() {
		stores = append(stores, "redis")
	}
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			addr := ""
			if store == "redis" {
				addr = redistest.Start(t).Addr
			}
			a, gw, admin := consoleStack(t, addr)
			markets := gw + "/api/v1/mkt/markets/"
			for i := 0; i < 5; i++ { // well-behaved clients
				if code, _ := get(t, markets, "Authorization", "Bearer calm-"+strconv.Itoa(i)); code != 200 {
					t.Fatalf("calm client: %d", code)
				}
			}
			var retryAfter string
			for i := 0; i < 6; i++ {
				code, h, _ := call(t, "GET", markets, "", "Authorization", "Bearer hot-token")
				if want := map[bool]int{true: 200, false: 429}[i < 3]; code != want {
					t.Fatalf("hot request %d: %d, want %d", i, code, want)
				}
				if code == 429 {
					retryAfter = h.Get("Retry-After")
				}
			}
			hot := a.limits.Enforcer.TokenID("hot-token")[:12]

			checkConsoleShowsHotClient(t, admin, hot, retryAfter)

			checkInspectChargesNothing(t, a, admin, markets)

			checkInspectCommand(t, admin, hot)

			checkConsoleReset(t, admin, markets, hot, store)
		})
	}
}

// checkConsoleShowsHotClient checks that the console's top puts the hot
// client hot first among the refused, and that inspect shows its remaining
// at 0 and a retry matching the 429's Retry-After.
func checkConsoleShowsHotClient(t *testing.T, admin, hot, retryAfter string) {
	t.Helper()
	var top topAnswer
	if code := adminJSON(t, "GET", admin+"/admin/top", &top); code != 200 || len(top.Windows) != 3 {
		t.Fatalf("top: %d %+v", code, top)
	}
	w := top.Windows[0]
	if len(w.Routes) == 0 || w.Routes[0].Route != "list_markets" || w.Routes[0].Refused != 3 {
		t.Fatalf("1-minute window: %+v", w)
	}
	r := w.Routes[0]
	if len(r.IdentitiesByRefused) == 0 || r.IdentitiesByRefused[0].ID != hot || r.IdentitiesByRefused[0].Count != 3 ||
		r.IdentitiesByRefused[0].Kind != "token" {
		t.Errorf("identities by refusals: %+v, want %s first", r.IdentitiesByRefused, hot)
	}
	if len(r.AddressesByRefused) == 0 || r.AddressesByRefused[0].ID != "127.0.0.1" {
		t.Errorf("addresses by refusals: %+v", r.AddressesByRefused)
	}

	var in inspected
	if code := adminJSON(t, "GET", admin+"/admin/inspect?token_id="+hot, &in); code != 200 {
		t.Fatalf("inspect: %d", code)
	}
	l, ok := in.limit("list_markets", "token")
	if !ok || in.Subject.ID != hot {
		t.Fatalf("inspect: %+v", in)
	}
	ra, _ := strconv.ParseFloat(retryAfter, 64)
	if l.Remaining != 0 || l.Source != "store" || math.Abs(math.Ceil(l.RetryAfter)-ra) > 1 {
		t.Errorf("inspect of the throttled token: %+v; the 429 said Retry-After %s", l, retryAfter)
	}
}

// checkInspectChargesNothing checks that a token with one request left
// keeps it through many inspections.
func checkInspectChargesNothing(t *testing.T, a *app, admin, markets string) {
	t.Helper()
	var in inspected
	for i := 0; i < 2; i++ {
		get(t, markets, "Authorization", "Bearer one-left")
	}
	for i := 0; i < 10; i++ {
		code, _, _ := call(t, "POST", admin+"/admin/inspect", "token=one-left",
			"Authorization", "Bearer "+testAdminToken, "Content-Type", "application/x-www-form-urlencoded")
		if code != 200 {
			t.Fatalf("inspect by token: %d", code)
		}
	}
	adminJSON(t, "GET", admin+"/admin/inspect?token_id="+a.limits.Enforcer.TokenID("one-left"), &in)
	if l, _ := in.limit("list_markets", "token"); l.Remaining != 1 {
		t.Errorf("after ten inspections: %+v, want 1 remaining", l)
	}
	if code, _ := get(t, markets, "Authorization", "Bearer one-left"); code != 200 {
		t.Errorf("the last request after inspections: %d", code)
	}
	if code, _ := get(t, markets, "Authorization", "Bearer one-left"); code != 429 {
		t.Errorf("one over: %d", code)
	}
}

// checkInspectCommand checks that exgate inspect, the command support runs
// in a terminal, prints what the console shows, and only with the admin
// token.
func checkInspectCommand(t *testing.T, admin, hot string) {
	t.Helper()
	var out, errOut strings.Builder
	env := func(k string) (string, bool) {
		if k == adminTokenEnv {
			return testAdminToken, true
		}
		return "", false
	}
	if code := run(context.Background(), []string{"inspect", "--admin", admin, "--token", "hot-token"}, env, &out, &errOut); code != 0 {
		t.Fatalf("exgate inspect: %d %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "token "+hot+"\n") ||
		!regexp.MustCompile(`(?m)^list_markets +token +token +- +3/1m0s +3 +0 +[0-9.]+s `).MatchString(out.String()) {
		t.Errorf("exgate inspect printed:\n%s", out.String())
	}
	if code := run(context.Background(), []string{"inspect", "--admin", admin, "--token-id", hot}, nil, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "not_authenticated") {
		t.Errorf("exgate inspect without the admin token: %d %s", code, errOut.String())
	}
}

// checkConsoleReset checks that reset is refused without the admin token
// and gives the hot client its allowance back with it, and that status and
// the metrics count the reset.
func checkConsoleReset(t *testing.T, admin, markets, hot, store string) {
	t.Helper()
	code, _, _ := call(t, "POST", admin+"/admin/reset?token_id="+hot, "")
	if code != 401 {
		t.Errorf("reset without the token: %d", code)
	}
	var reset struct{ Cleared int }
	if code := adminJSON(t, "POST", admin+"/admin/reset?token_id="+hot, &reset); code != 200 || reset.Cleared == 0 {
		t.Errorf("reset: %d %+v", code, reset)
	}
	if code, _ := get(t, markets, "Authorization", "Bearer hot-token"); code != 200 {
		t.Errorf("after reset: %d", code)
	}

	var status struct {
		Store struct {
			Mode      string
			Reachable bool
		}
		Routes   []limiter.RouteLimits
		Resets   int64
		Draining bool
	}
	adminJSON(t, "GET", admin+"/admin/status", &status)
	if !strings.HasPrefix(status.Store.Mode, store) || !status.Store.Reachable || status.Resets != 1 || len(status.Routes) == 0 {
		t.Errorf("status: %+v", status)
	}
	if _, _, m := call(t, "GET", admin+"/metrics", ""); !strings.Contains(string(m), "\nexgate_admin_resets_total 1\n") {
		t.Error("the reset is not counted in exgate_admin_resets_total")
	}
	if code, _, _ := call(t, "GET", admin+"/admin/status", ""); code != http.StatusUnauthorized {
		t.Errorf("status without the token: %d", code)
	}
}

// TestTopFleetView: two replicas each see part of one client's traffic;
// exgate top, given both, adds their counts.
func TestTopFleetView(t *testing.T) {
	var admins []string
	for i := 0; i < 2; i++ {
		_, gw, admin := consoleStack(t, "")
		admins = append(admins, "--admin", admin)
		for j := 0; j < 5; j++ {
			get(t, gw+"/api/v1/mkt/markets/", "Authorization", "Bearer hot-token")
		}
	}
	k, _ := limiter.NewKeyer([]byte(keySecret))
	hot := k.ID("hot-token")[:12]
	env := func(key string) (string, bool) {
		if key == adminTokenEnv {
			return testAdminToken, true
		}
		return "", false
	}
	var out, errOut strings.Builder
	if code := run(context.Background(), append([]string{"top", "--window", "1"}, admins...), env, &out, &errOut); code != 0 {
		t.Fatalf("exgate top: %d %s", code, errOut.String())
	}
	if !regexp.MustCompile(`(?s)BY REFUSED\nROUTE +KIND +WHO +REFUSED +±\n[^B]*\nlist_markets +token +` + hot + ` +4 +0\n.*BY REQUESTS\n.*\nlist_markets +token +` + hot + ` +10 +0\n`).MatchString(out.String()) {
		t.Errorf("exgate top printed:\n%s", out.String())
	}
	if code := run(context.Background(), []string{"top"}, env, &out, &errOut); code != 2 {
		t.Errorf("exgate top without -admin: %d", code)
	}
}

// TestAdminListenerBeyondLoopback: an admin listener bound on every
// interface without the admin token serves probes and metrics but
// refuses the console and pprof, and says so at start; the token is read
// from the variable admin.token_env names (not from EXGATE_ADMIN_TOKEN
// then), and opens them.
func TestAdminListenerBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		bearer string
		status int
		warned bool
	}{
		{"no token", nil, "", 403, true},
		{"the default variable when another is named", map[string]string{adminTokenEnv: "default-var-token"}, "default-var-token", 403, true},
		{"the named variable", map[string]string{"OPS_ADMIN_TOKEN": "ops-token"}, "ops-token", 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			st := startStack(t, nil)
			cfg := config.Default()
			cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "0.0.0.0:0"
			cfg.Admin.TokenEnv, cfg.Admin.Pprof = "OPS_ADMIN_TOKEN", true
			cfg.Upstream.URL = config.MustURL(st.bs.URL)
			cfg.Server.DrainDelay = 0
			a := startApp(t, cfg, deps{log: zap.New(core), now: time.Now, getenv: func(k string) (string, bool) {
				if v, ok := tc.env[k]; ok {
					return v, true
				}
				return secretEnv(k)
			}})
			waitCatalogue(t, a)
			_, port, _ := net.SplitHostPort(a.adminAd)
			admin := "http://127.0.0.1:" + port
			for _, path := range []string{"/admin/status", "/admin/top", "/debug/pprof/"} {
				code, _, b := call(t, "GET", admin+path, "", "Authorization", "Bearer "+tc.bearer)
				if code != tc.status || code == 403 && !strings.Contains(string(b), `"code":"admin_token_required"`) {
					t.Errorf("%s: %d %s, want %d", path, code, b, tc.status)
				}
			}
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				if code, _, b := call(t, "GET", admin+path, ""); code != 200 {
					t.Errorf("%s: %d %s, want 200", path, code, b)
				}
			}
			warned := logs.FilterMessageSnippet("admin.token_env").Len() == 1
			if warned != tc.warned {
				t.Errorf("warned at start: %v, want %v (%v)", warned, tc.warned, logs.All())
			}
		})
	}
}

// TestConsoleNamesTheReplicaAndCountsLikeTheMetrics: the replica setting
// names the process on the console (status and top) and in
// exgate_replica_info; while the limit store is down, the console's store
// errors and fallbacks are the exported counters' values — one count, not
// the console's of its own (which counted every decision refused during
// the store's backoff as another error).
func TestConsoleNamesTheReplicaAndCountsLikeTheMetrics(t *testing.T) {
	dead := unreachable.Refused(t)
	a := startStackWith(t, func(c *config.Config) {
		c.Replica = "exgate-blue"
		c.Limiter.Redis.Addrs = []string{dead}
		c.Log.Access = false
	}, func(k string) (string, bool) {
		if k == adminTokenEnv {
			return testAdminToken, true
		}
		return secretEnv(k)
	})
	for i := range 30 {
		get(t, "http://"+a.addr+"/api/v1/mkt/markets/", "Authorization", "Bearer token-"+strconv.Itoa(i%3))
	}
	admin := "http://" + a.adminAd
	var status struct {
		Replica, Host string
		Store         struct {
			StoreErrors   int64 `json:"store_errors"`
			FallbackLocal int64 `json:"fallback_local"`
		}
	}
	adminJSON(t, "GET", admin+"/admin/status", &status)
	m := scrapeAdmin(t, a.adminAd)
	metric := func(prefix string) int64 {
		var n int64
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, prefix) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				n += int64(v)
			}
		}
		return n
	}
	errs, local := metric("exgate_ratelimit_store_errors_total{"), metric(`exgate_ratelimit_fallback_total{mode="local"`)
	if status.Store.StoreErrors == 0 || status.Store.StoreErrors != errs || status.Store.FallbackLocal != local || local < 30 {
		t.Errorf("console: %d store errors, %d local fallbacks; /metrics: %d and %d", status.Store.StoreErrors, status.Store.FallbackLocal, errs, local)
	}
	if h, _ := os.Hostname(); status.Replica != "exgate-blue" || status.Host != h {
		t.Errorf("status names replica %q on host %q", status.Replica, status.Host)
	}
	if !strings.Contains(m, "\nexgate_replica_info{replica=\"exgate-blue\"} 1\n") {
		t.Error("no exgate_replica_info{replica=\"exgate-blue\"} 1 in /metrics")
	}
	var top struct{ Replica string }
	if adminJSON(t, "GET", admin+"/admin/top", &top); top.Replica != "exgate-blue" {
		t.Errorf("top names replica %q", top.Replica)
	}
}
