package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/sim"
)

// reloadConfig is the configuration the reload test starts with; rate
// and tier are filled in.
const reloadConfig = `
listen: %q
admin_listen: %q
upstream: { url: %q }
server: { drain_delay: 0s }
log: { access: false }
reload_interval: 0s # reloads come from SIGHUP only, and are counted
limiter:
  token_spray: { max_tokens: 0 }
tiers:
  vip: { list_markets: { rate: %s } }
tokens_file: tokens.yaml
routes:
  - name: list_markets
    match: GET /api/v1/mkt/markets/
    auth: optional
    limits:
      - { key: address, when: anonymous, rate: %s }
      - { key: token, when: token, rate: 1000/1h }
  - name: default
    match: "*"
`

// logWatcher collects a process's log lines and waits for one.
type logWatcher struct {
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

func watchLog(r io.Reader) *logWatcher {
	w := &logWatcher{}
	w.cond = sync.NewCond(&w.mu)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.cond.Broadcast()
			w.mu.Unlock()
		}
	}()
	return w
}

// wait returns the first line after the first skip lines that contains
// want, or fails after 10s.
func (w *logWatcher) wait(t *testing.T, want string, skip int) (string, int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	go func() { time.Sleep(10 * time.Second); w.cond.Broadcast() }()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for i := skip; i < len(w.lines); i++ {
			if strings.Contains(w.lines[i], want) {
				return w.lines[i], i + 1
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q; log:\n%s", want, strings.Join(w.lines, "\n"))
		}
		w.cond.Wait()
	}
}

// TestReloadBinary runs the real binary with a configuration file and a
// tokens file, changes both and sends SIGHUP while clients keep sending
// requests: the new limits and tiers apply, no request fails, a bad file
// keeps the last good configuration and the log says why.
func TestReloadBinary(t *testing.T) {
	bin := buildBinary(t)
	bs := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(bs.Close)
	dir := t.TempDir()
	listen, admin := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	cfgPath := filepath.Join(dir, "exgate.yaml")
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("exgate.yaml", fmt.Sprintf(reloadConfig, listen, admin, bs.URL, "2000/1h", "3/1h"))
	write("tokens.yaml", "tokens: {}\n")

	cmd := exec.Command(bin, "-config", cfgPath)
	cmd.Env = append(os.Environ(), "EXGATE_KEY_SECRET="+keySecret)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	logs := watchLog(stderr)
	_, seen := logs.wait(t, "exgate started", 0)

	base := "http://" + listen + "/api/v1/mkt/markets/"
	// Background traffic through every reload: nothing may fail.
	var failures, sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", base, nil)
				req.Header.Set("Authorization", "Bearer background")
				res, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					failures.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 && res.StatusCode != 429 {
					failures.Add(1)
				}
			}
		}()
	}

	anon := func(n int) (ok int) {
		for i := 0; i < n; i++ {
			if code, _ := get(t, base); code == 200 {
				ok++
			}
		}
		return ok
	}
	if got := anon(5); got != 3 {
		t.Fatalf("before reload: %d of 5 anonymous requests allowed, want 3", got)
	}

	// Raise the anonymous limit and put a token in the vip tier.
	k, _ := limiter.NewKeyer([]byte(keySecret))
	write("exgate.yaml", fmt.Sprintf(reloadConfig, listen, admin, bs.URL, "2/1h", "10/1h"))
	write("tokens.yaml", fmt.Sprintf("tokens:\n  %s: vip\n", k.ID("vip-token")))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	line, seen := logs.wait(t, "configuration reloaded", seen)
	if !strings.Contains(line, `"tier_tokens":1`) {
		t.Errorf("reload log line lacks the token count: %s", line)
	}
	if got := anon(12); got != 10 {
		t.Errorf("after reload: %d of 12 anonymous requests allowed, want 10 (a changed limit counts afresh)", got)
	}
	vip := 0
	for i := 0; i < 4; i++ {
		if code, _ := get(t, base, "Authorization", "Bearer vip-token"); code == 200 {
			vip++
		}
	}
	if vip != 2 {
		t.Errorf("vip token: %d of 4 allowed, want 2 (its tier's limit)", vip)
	}

	// A bad configuration: the last good one stays, the log says why.
	write("exgate.yaml", fmt.Sprintf(reloadConfig, listen, admin, bs.URL, "2/1h", "ten/1h"))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	line, seen = logs.wait(t, "configuration reload failed", seen)
	if !strings.Contains(line, "routes[0].limits[0].rate") || !strings.Contains(line, "keeping the last good configuration") {
		t.Errorf("failed reload log line: %s", line)
	}
	// A bad tokens file: likewise.
	write("exgate.yaml", fmt.Sprintf(reloadConfig, listen, admin, bs.URL, "2/1h", "10/1h"))
	write("tokens.yaml", fmt.Sprintf("tokens:\n  %s: platinum\n", k.ID("x")))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	line, _ = logs.wait(t, "configuration reload failed", seen)
	if !strings.Contains(line, `unknown tier \"platinum\"`) {
		t.Errorf("failed tokens reload log line: %s", line)
	}
	if code, _ := get(t, base, "Authorization", "Bearer vip-token"); code != 429 {
		t.Errorf("vip token after failed reloads: %d, want 429 (still its tier, already used up)", code)
	}

	close(stop)
	wg.Wait()
	if failures.Load() != 0 || sent.Load() < 10 {
		t.Errorf("background traffic: %d of %d requests failed across reloads", failures.Load(), sent.Load())
	}
	m := scrapeAdmin(t, admin)
	if sample(m, `exgate_config_reloads_total{result="success"}`) != "1" || sample(m, `exgate_config_reloads_total{result="failure"}`) != "2" {
		t.Errorf("reload metrics: success %q failure %q", sample(m, `exgate_config_reloads_total{result="success"}`),
			sample(m, `exgate_config_reloads_total{result="failure"}`))
	}
}

// liveConfig is the configuration of TestReloadAppliesLiveSettings: Redis
// at an address where nothing listens, so the limit store fails; the
// fallback of "limited" is its own, "guarded" follows
// limiter.on_store_error. Filled in: listen and admin addresses, backend,
// upstream timeout, replicas, on_store_error, idempotency timeout, log
// level.
const liveConfig = `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: { url: %q, timeout: %s }
server: { drain_delay: 0s }
reload_interval: 0s
log: { access: false, level: %s }
limiter:
  backend: redis
  redis: { addrs: [%q], timeout: 20ms }
  replicas: %d
  on_store_error: %s
  token_spray: { max_tokens: 0 }
idempotency: { timeout: %s }
routes:
  - { name: slow, match: GET /slow/ }
  - name: limited
    match: GET /limited/
    on_store_error: local
    limits: [{ key: address, rate: 8/1h }]
  - name: guarded
    match: GET /guarded/
    limits: [{ key: address, rate: 1000/1h }]
  - { name: default, match: "*" }
`

// TestReloadAppliesLiveSettings proves on the running gateway what
// config.ReloadModes says: upstream.timeout, limiter.replicas and
// limiter.on_store_error take effect on a reload, readiness follows the
// reloaded on_store_error both ways, and restart-only settings that
// changed are named in the log line.
func TestReloadAppliesLiveSettings(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow/" {
			time.Sleep(300 * time.Millisecond)
		}
	}))
	t.Cleanup(backend.Close)
	deadRedis := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	write := func(timeout string, replicas int, onStoreError, idemTimeout, level string) {
		t.Helper()
		body := fmt.Sprintf(liveConfig, backend.URL, timeout, level, deadRedis, replicas, onStoreError, idemTimeout)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("2s", 1, "local", "100ms", "info")
	cfg, err := config.Load(path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a := startApp(t, cfg, deps{log: zap.New(core), now: time.Now, getenv: secretEnv, configPath: path})
	base := "http://" + a.addr
	ready := func() (int, string) {
		t.Helper()
		time.Sleep(1100 * time.Millisecond) // /readyz reuses its answer for a second
		code, _, body := call(t, "GET", "http://"+a.adminAd+"/readyz", "")
		return code, string(body)
	}
	reload := func() map[string]any {
		t.Helper()
		if err := a.reload(); err != nil {
			t.Fatal(err)
		}
		var entries []observer.LoggedEntry
		for _, e := range logs.TakeAll() {
			if e.Message == "configuration reloaded" {
				entries = append(entries, e)
			}
		}
		if len(entries) != 1 {
			t.Fatalf("%d reload log lines", len(entries))
		}
		return entries[0].ContextMap()
	}

	if code, _, _ := call(t, "GET", base+"/slow/", ""); code != 200 {
		t.Fatalf("slow backend within upstream.timeout 2s: %d", code)
	}
	if code, _, _ := call(t, "GET", base+"/guarded/", ""); code != 200 {
		t.Fatalf("guarded route, store down, on_store_error local: %d", code)
	}
	if code, body := ready(); code != 200 || !strings.Contains(body, "routes limited, guarded are limited by each replica on its own (on_store_error: local): rate-limit store unreachable") {
		t.Errorf("readiness with a local fallback: %d %s", code, body)
	}

	write("100ms", 4, "closed", "1s", "debug")
	fields := reload()
	if got, want := fmt.Sprint(fields["applied"]), "[upstream.timeout limiter.replicas limiter.on_store_error]"; got != want {
		t.Errorf("applied = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(fields["ignored_until_restart"]), "[idempotency.timeout log.level]"; got != want {
		t.Errorf("ignored_until_restart = %s, want %s", got, want)
	}
	if code, _, _ := call(t, "GET", base+"/slow/", ""); code != 504 {
		t.Errorf("slow backend after upstream.timeout 100ms: %d, want 504", code)
	}
	allowed := 0
	for i := 0; i < 5; i++ {
		if code, _, _ := call(t, "GET", base+"/limited/", ""); code == 200 {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("local fallback after replicas: 4: %d of 5 allowed, want 2 (8/1h ÷ 4)", allowed)
	}
	if code, _, body := call(t, "GET", base+"/guarded/", ""); code != 503 || errCode(t, body) != "rate_limit_unavailable" {
		t.Errorf("guarded route after on_store_error: closed: %d %s", code, body)
	}
	if code, body := ready(); code != 503 || !strings.Contains(body, "routes guarded answer 503 rate_limit_unavailable (on_store_error: closed); routes limited are limited by each replica on its own") {
		t.Errorf("readiness failing closed: %d %s", code, body)
	}

	write("100ms", 4, "open", "1s", "debug")
	fields = reload()
	if got := fmt.Sprint(fields["applied"]); got != "[limiter.on_store_error]" {
		t.Errorf("applied = %s", got)
	}
	if code, body := ready(); code != 200 || !strings.Contains(body, "routes guarded are not limited (on_store_error: open)") {
		t.Errorf("readiness failing open: %d %s", code, body)
	}
}

// TestReloadOnFileChange lays out the configuration as a Kubernetes
// ConfigMap volume does (exgate.yaml → ..data/exgate.yaml, ..data → a
// timestamped directory, swapped by renaming a new link over ..data) and
// changes it the way the kubelet does: exgate sees the new content on its
// next poll and reloads it as on SIGHUP, without a signal; a bad file
// keeps the last good configuration.
func TestReloadOnFileChange(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	body := func(rate string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nreload_interval: 1s\nupstream: { url: %q }\n"+
			"server: { drain_delay: 0s }\nlog: { access: false }\nroutes:\n  - { name: default, match: \"*\", limits: [{ key: address, rate: %s }] }\n", backend.URL, rate)
	}
	version := 0
	publish := func(content string) {
		t.Helper()
		version++
		ts := filepath.Join(dir, fmt.Sprintf("..2026_%d", version))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "exgate.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish(body("2/1h"))
	path := filepath.Join(dir, "exgate.yaml")
	if err := os.Symlink("..data/exgate.yaml", path); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a, err := start(cfg, deps{log: zap.New(core), now: time.Now, configPath: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- a.wait(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitLog := func(msg string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if logs.FilterMessage(msg).Len() > 0 {
				logs.TakeAll()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q log line within 15s", msg)
			}
		}
	}
	rate := func() string { return a.live.Load().Routes[0].Limits[0].Rate.String() }

	publish(body("50/1h"))
	waitLog("configuration reloaded")
	if got := rate(); got != "50/1h" {
		t.Errorf("after the ConfigMap changed: rate %s, want 50/1h", got)
	}
	base := "http://" + a.addr + "/x"
	for i := 0; i < 3; i++ {
		if code, _, _ := call(t, "GET", base, ""); code != 200 {
			t.Fatalf("request %d under the new limit: %d", i, code)
		}
	}

	publish(body("ten/1h"))
	waitLog("configuration reload failed; keeping the last good configuration")
	if got := rate(); got != "50/1h" {
		t.Errorf("after a bad file: rate %s, want the last good 50/1h", got)
	}
	if got := sample(scrapeAdmin(t, a.adminAd), `exgate_config_reloads_total{result="failure"}`); got != "1" {
		t.Errorf("failed reloads counted: %q, want 1", got)
	}
}

// orderRouteConfig is a gateway whose one order route validates orders
// or not, as %q says ("order" or "").
const orderRouteConfig = `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: { url: %q }
server: { drain_delay: 0s }
reload_interval: 0s
log: { access: false }
routes:
  - { name: place, match: POST /orders/, auth: required, validate: %q }
  - { name: default, match: "*" }
`

// TestReloadRefusesOrderValidationAddedLater: a reload that gives a route
// validate: order when no route had it at start is refused whole (the
// market catalogue and duplicate protection are built only at start), so
// that the route never runs as validated while its orders go to the
// backend unchecked and unclaimed; the configuration in force stays, and
// later reloads without it apply.
func TestReloadRefusesOrderValidationAddedLater(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(backend.Close)
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	write := func(validate string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(orderRouteConfig, backend.URL, validate)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	cfg, err := config.Load(path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now, getenv: secretEnv, configPath: path})

	write("order")
	err = a.reload()
	if err == nil || !strings.Contains(err.Error(), "validate: order needs a restart") {
		t.Fatalf("reload adding validate: order = %v, want it refused", err)
	}
	if got := a.live.Load().Route("place").Validate; got != "" {
		t.Errorf("route in force after the refused reload: validate %q", got)
	}
	write("")
	if err := a.reload(); err != nil {
		t.Errorf("reload of the file in force: %v", err)
	}
}
