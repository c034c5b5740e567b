package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/jwttest"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/internal/unreachable"
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

// logWatcher collects a process's log lines and waits for one. It is the
// process's exec.Cmd.Stderr (not a pipe read on the side), so that
// Cmd.Wait returns only once every line written before the exit is here:
// Wait closes a StderrPipe after the exit, dropping what was still
// unread, a process's last lines among them.
type logWatcher struct {
	mu      sync.Mutex
	lines   []string
	partial []byte // the start of a line still being written
	cond    *sync.Cond
}

func newLogWatcher() *logWatcher {
	w := &logWatcher{}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// Write adds the complete lines of p to the log.
func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	w.cond.Broadcast()
	return len(p), nil
}

// wait returns the first line after the first skip lines that contains
// want, or fails after 30s (a line that never comes).
func (w *logWatcher) wait(t *testing.T, want string, skip int) (string, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	go func() { time.Sleep(30 * time.Second); w.cond.Broadcast() }()
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
	cfgPath := filepath.Join(dir, "exgate.yaml")
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("exgate.yaml", fmt.Sprintf(reloadConfig, anyPort, anyPort, bs.URL, "2000/1h", "3/1h"))
	write("tokens.yaml", "tokens: {}\n")

	cmd, logs, seen := startBinary(t, bin, cfgPath, "EXGATE_KEY_SECRET="+keySecret)
	listen, admin := startedAddrs(t, logs)

	base := "http://" + listen + "/api/v1/mkt/markets/"
	// Background traffic through every reload: nothing may fail.
	stopBackground := sendBackground(base)
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
	write("exgate.yaml", fmt.Sprintf(reloadConfig, anyPort, anyPort, bs.URL, "2/1h", "10/1h"))
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
	write("exgate.yaml", fmt.Sprintf(reloadConfig, anyPort, anyPort, bs.URL, "2/1h", "ten/1h"))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	line, seen = logs.wait(t, "configuration reload failed", seen)
	if !strings.Contains(line, "routes[0].limits[0].rate") || !strings.Contains(line, "keeping the last good configuration") {
		t.Errorf("failed reload log line: %s", line)
	}
	// A bad tokens file: likewise.
	write("exgate.yaml", fmt.Sprintf(reloadConfig, anyPort, anyPort, bs.URL, "2/1h", "10/1h"))
	write("tokens.yaml", fmt.Sprintf("tokens:\n  %s: platinum\n", k.ID("x")))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	line, _ = logs.wait(t, "configuration reload failed", seen)
	if !strings.Contains(line, `unknown tier \"platinum\"`) {
		t.Errorf("failed tokens reload log line: %s", line)
	}
	if code, _ := get(t, base, "Authorization", "Bearer vip-token"); code != 429 {
		t.Errorf("vip token after failed reloads: %d, want 429 (still its tier, already used up)", code)
	}

	if failures, sent := stopBackground(); failures != 0 || sent < 10 {
		t.Errorf("background traffic: %d of %d requests failed across reloads", failures, sent)
	}
	m := scrapeAdmin(t, admin)
	if sample(m, `exgate_config_reloads_total{result="success"}`) != "1" || sample(m, `exgate_config_reloads_total{result="failure"}`) != "2" {
		t.Errorf("reload metrics: success %q failure %q", sample(m, `exgate_config_reloads_total{result="success"}`),
			sample(m, `exgate_config_reloads_total{result="failure"}`))
	}
}

// sendBackground starts four clients sending GET url as one token until
// the returned stop is called; stop waits for them and returns how many
// requests they sent and how many failed (answered neither 200 nor 429).
func sendBackground(url string) (stop func() (failures, sent int64)) {
	var failures, sent atomic.Int64
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopped:
					return
				default:
				}
				req, _ := http.NewRequest("GET", url, nil)
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
	return func() (int64, int64) {
		close(stopped)
		wg.Wait()
		return failures.Load(), sent.Load()
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
  store: redis
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
	deadRedis := unreachable.Refused(t)
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	write := func(timeout string, replicas int, onStoreError, idemTimeout, level string) {
		t.Helper()
		body := fmt.Sprintf(liveConfig, backend.URL, timeout, level, deadRedis, replicas, onStoreError, idemTimeout)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("20s", 1, "local", "100ms", "info")
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
		t.Fatalf("slow backend within upstream.timeout 20s: %d", code)
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
	go func() { code, _ := a.wait(ctx); done <- code }()
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

// sectionsConfig is the configuration TestReloadReportIsTrue starts
// with: every top-level section written out, so that each row of the test
// changes one setting by replacing its text. BACKEND is the backend's URL.
const sectionsConfig = `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin: { pprof: false }
replica: exgate-0
server: { drain_delay: 0s, max_header_bytes: 16KiB, tls: { certificates: [] } }
upstream: { url: BACKEND, timeout: 2s }
client_ip: { trusted_proxies: [] }
limiter: { store: memory, headers: ietf, token_spray: { max_tokens: 0 } }
tiers:
  vip: { capped: { rate: 3/1h } }
reload_interval: 0s
tokens_file: tokens.yaml
validation:
  unknown_fields: reject
  catalogue: { refresh: 30s }
idempotency: { enabled: true }
identity: { verify: false }
log: { access: false, level: info }
tracing: { sampler: parentbased_always_on }
overload: { fixed_limit: 0, max_wait: { market_data: 5ms } }
cors: { allowed_origins: [] }
routes:
  - { name: slow, match: GET /slow/, priority: market_data }
  - name: capped
    match: GET /capped/
    auth: optional
    limits: [{ key: token, when: token, rate: 2/1h }]
  - name: by_address
    match: GET /by-address/
    limits: [{ key: address, rate: 2/1h }]
  - name: headed
    match: GET /headed/
    limits: [{ key: address, rate: 1000/1h }]
  - { name: plain, match: GET /plain/ }
  - { name: place, match: POST /api/v1/odr/orders/, auth: required, validate: order }
  - { name: default, match: "*" }
`

// sectionsBackend answers the test routes itself (/slow/ after 300ms, or
// when concurrentSlow releases it) and sends the rest to the reference
// backend, counting the orders that reach it.
type sectionsBackend struct {
	sim    http.Handler
	orders atomic.Int64
	hold   atomic.Pointer[slowHold] // set by concurrentSlow
}

// slowHold holds concurrentSlow's /slow/ requests at the backend: each is
// told on arrived, and answered once release is closed.
type slowHold struct {
	arrived, release chan struct{}
}

func (b *sectionsBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/slow/":
		if h := b.hold.Load(); h != nil {
			h.arrived <- struct{}{}
			<-h.release
			break
		}
		time.Sleep(300 * time.Millisecond)
	case "/capped/", "/by-address/", "/headed/", "/plain/":
	default:
		if r.URL.Path == "/api/v1/odr/orders/" {
			b.orders.Add(1)
		}
		b.sim.ServeHTTP(w, r)
	}
}

// TestReloadReportIsTrue changes, for every top-level section of the
// configuration, one setting in the file and sends SIGHUP to the running
// gateway. The reload report (the log line's applied and
// ignored_until_restart, from config.Reloaded and the reload tags) must
// name exactly that setting, in the right list, and be true: a setting
// reported applied changes what clients see at once, without a restart;
// a setting reported as waiting for a restart changes nothing, neither in
// what clients see nor in the configuration in force. Putting the file
// back reloads again: a live setting goes back, a restart-only one was
// never in force.
func TestReloadReportIsTrue(t *testing.T) {
	g := startReloadGateway(t)
	rows := append(serverReloadRows(t, g), requestReloadRows(g)...)
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.section] = true
	}
	for setting := range config.ReloadModes() {
		if section, _, _ := strings.Cut(setting, "."); !covered[section] {
			t.Errorf("no row changes a setting of section %s", section)
		}
	}

	for _, r := range rows {
		t.Run(r.setting, func(t *testing.T) { g.checkReloadRow(t, r) })
	}
}

// reloadRow is a setting TestReloadReportIsTrue changes, and how it checks
// the change.
type reloadRow struct {
	section, setting string // top-level section; the setting changed, by YAML path
	reported         string // how the report names it, when not by its path
	from, to         string // the text of the file replaced, once
	live             bool   // the report says the change applies at once
	// before and after observe, through the gateway, what the setting
	// governs; after runs once the reload is logged.
	before, after func(*testing.T)
}

// reloadGateway is the gateway TestReloadReportIsTrue reloads: started in
// this process from the file path in dir, whose text was base at start, in
// front of be.
type reloadGateway struct {
	be        *sectionsBackend
	dir, path string
	base      string
	a         *app
	logs      *observer.ObservedLogs
	gw, token string // the gateway's URL, and a token of the backend's
}

// startReloadGateway writes the configuration and tokens files, starts the
// gateway in this process and waits until it answers SIGHUP with a reload.
func startReloadGateway(t *testing.T) *reloadGateway {
	t.Helper()
	be := &sectionsBackend{sim: sim.New(sim.Options{})}
	bs := httptest.NewServer(be)
	t.Cleanup(bs.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "exgate.yaml")
	base := strings.Replace(sectionsConfig, "BACKEND", bs.URL, 1)
	g := &reloadGateway{be: be, dir: dir, path: path, base: base}
	k, _ := limiter.NewKeyer([]byte(keySecret))
	g.write(t, "exgate.yaml", base)
	g.write(t, "tokens.yaml", fmt.Sprintf("tokens:\n  %s: vip\n", k.ID("vip-token")))
	g.write(t, "more-tokens.yaml", fmt.Sprintf("tokens:\n  %s: vip\n  %s: vip\n", k.ID("vip-token"), k.ID("new-vip")))
	cfg, err := config.Load(path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}

	// SIGHUP is delivered to this process: the test's own registration
	// keeps its default effect (ending the process) away until wait has
	// registered its own.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	core, logs := observer.New(zap.InfoLevel)
	g.logs = logs
	a, err := start(cfg, deps{log: zap.New(core), now: time.Now, getenv: secretEnv, configPath: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { code, _ := a.wait(ctx); done <- code }()
	t.Cleanup(func() { cancel(); <-done })
	waitCatalogue(t, a)
	g.a, g.gw = a, "http://"+a.addr

	// wait registers for SIGHUP as it starts: a SIGHUP sent before is
	// not answered, and is sent again. Each is given as long as a row's
	// (sighup): one sent again while the reload of an earlier one ran
	// would reload once more after it, and that report would be read as
	// the next row's. The file is the one the gateway started with, so
	// the reload applies nothing.
	for attempt := 1; ; attempt++ {
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		applied, ignored, ok := g.report(t, 10*time.Second)
		if ok {
			if applied != "[]" || ignored != "[]" {
				t.Fatalf("reload of the unchanged file: applied %s, ignored %s", applied, ignored)
			}
			break
		}
		if attempt == 3 {
			t.Fatal("SIGHUP not answered within 10s, three times")
		}
	}

	g.token = authenticate(t, g.gw)
	return g
}

// write writes a file of the gateway's directory.
func (g *reloadGateway) write(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// report waits for the gateway to log a reload and returns its report: the
// settings applied and those ignored until a restart, by YAML path.
func (g *reloadGateway) report(t *testing.T, within time.Duration) (applied, ignored string, ok bool) {
	t.Helper()
	logs := g.logs
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if failed := logs.FilterMessage("configuration reload failed; keeping the last good configuration").All(); len(failed) > 0 {
			logs.TakeAll()
			t.Fatalf("reload failed: %v", failed[0].ContextMap()["error"])
		}
		if reloads := logs.FilterMessage("configuration reloaded").All(); len(reloads) > 0 {
			logs.TakeAll()
			f := reloads[0].ContextMap()
			list := func(k string) string {
				if v, ok := f[k]; ok {
					return fmt.Sprint(v)
				}
				return "[]"
			}
			return list("applied"), list("ignored_until_restart"), true
		}
	}
	return "", "", false
}

// sighup sends SIGHUP and returns the report of the reload it causes.
func (g *reloadGateway) sighup(t *testing.T) (applied, ignored string) {
	t.Helper()
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	applied, ignored, ok := g.report(t, 10*time.Second)
	if !ok {
		t.Fatal("no reload logged within 10s of SIGHUP")
	}
	return applied, ignored
}

// allowed sends n requests to path with header (name, value pairs) and
// returns how many the gateway let through.
func (g *reloadGateway) allowed(t *testing.T, n int, path string, header ...string) (ok int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if code, _, _ := call(t, "GET", g.gw+path, "", header...); code == 200 {
			ok++
		}
	}
	return ok
}

// expectAllowed checks that want of n requests to path with header are let
// through.
func (g *reloadGateway) expectAllowed(want, n int, path string, header ...string) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if got := g.allowed(t, n, path, header...); got != want {
			t.Errorf("%s %v: %d of %d allowed, want %d", path, header, got, n, want)
		}
	}
}

// expectStatus checks that a request to path with header is answered want.
func (g *reloadGateway) expectStatus(want int, path string, header ...string) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if code, _, b := call(t, "GET", g.gw+path, "", header...); code != want {
			t.Errorf("GET %s %v: %d %s, want %d", path, header, code, b, want)
		}
	}
}

// concurrentSlow sends two requests to /slow/ at once and returns their
// statuses: the second once the backend holds the first, which it holds
// until the second is decided (answered, or held there too), whatever
// the time each takes to arrive.
func (g *reloadGateway) concurrentSlow(t *testing.T) []int {
	t.Helper()
	h := &slowHold{arrived: make(chan struct{}, 2), release: make(chan struct{})}
	g.be.hold.Store(h)
	var release sync.Once
	defer func() { release.Do(func() { close(h.release) }); g.be.hold.Store(nil) }()
	codes := make([]int, 2)
	answered := make(chan struct{}, 2)
	send := func(i int) {
		codes[i], _, _ = call(t, "GET", g.gw+"/slow/", "")
		answered <- struct{}{}
	}
	done := 0
	next := func() { // a request reaches the backend, or is answered
		t.Helper()
		select {
		case <-h.arrived:
		case <-answered:
			done++
		case <-time.After(30 * time.Second):
			t.Fatal("a request to /slow/ neither reached the backend nor was answered within 30s")
		}
	}
	go send(0)
	next()
	go send(1)
	next()
	release.Do(func() { close(h.release) })
	for ; done < 2; done++ {
		<-answered
	}
	return codes
}

// notListening checks that nothing accepts connections at addr.
func notListening(addr string) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s accepts connections: a restart-only listener moved", addr)
		}
	}
}

// orderWithUnknownField posts an order with an unknown field and returns
// how many orders the backend has seen.
func (g *reloadGateway) orderWithUnknownField(t *testing.T) int64 {
	t.Helper()
	call(t, "POST", g.gw+"/api/v1/odr/orders/", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"100.00","base_amount":"0.001","note":"x"}`,
		"Authorization", "Bearer "+g.token, "Content-Type", "application/json")
	return g.be.orders.Load()
}

// placedTwice checks that an order with identifier, sent twice, reaches the
// backend once (duplicate protection).
func (g *reloadGateway) placedTwice(identifier string) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		before := g.be.orders.Load()
		for i := 0; i < 2; i++ {
			if code, _, b := order(t, g.gw, g.token, identifier, "0.001"); code != 201 {
				t.Fatalf("order %s: %d %s", identifier, code, b)
			}
		}
		if got := g.be.orders.Load() - before; got != 1 {
			t.Errorf("order %s sent twice: the backend saw it %d times, want once (duplicate protection)", identifier, got)
		}
	}
}

// serverReloadRows are the rows of the settings of how the gateway serves:
// its listeners, admin, replica, server, upstream and client addresses.
func serverReloadRows(t *testing.T, g *reloadGateway) []reloadRow {
	listenPort, adminPort := reservedAddr(t), reservedAddr(t)
	bigHeader := strings.Repeat("x", 8<<10)
	leaf := tlstest.NewCA(t, g.dir).Issue(g.dir, "gateway", []string{"127.0.0.1"}, tlstest.Options{})
	return []reloadRow{
		{section: "listen", setting: "listen", from: "\nlisten: 127.0.0.1:0", to: "\nlisten: " + listenPort,
			after: func(t *testing.T) { g.expectStatus(200, "/plain/")(t); notListening(listenPort)(t) }},
		{section: "admin_listen", setting: "admin_listen", from: "admin_listen: 127.0.0.1:0", to: "admin_listen: " + adminPort,
			after: notListening(adminPort)},
		{section: "admin", setting: "admin.pprof", from: "pprof: false", to: "pprof: true",
			after: func(t *testing.T) {
				if code, _, _ := call(t, "GET", "http://"+g.a.adminAd+"/debug/pprof/", ""); code != 404 {
					t.Errorf("pprof served after a reload: %d", code)
				}
			}},
		{section: "replica", setting: "replica", from: "replica: exgate-0", to: "replica: exgate-1",
			after: func(t *testing.T) {
				if _, _, b := call(t, "GET", "http://"+g.a.adminAd+"/admin/status", ""); !strings.Contains(string(b), `"replica": "exgate-0"`) {
					t.Errorf("the console names another replica after a reload: %.300s", b)
				}
			}},
		{section: "server", setting: "server.max_header_bytes", from: "max_header_bytes: 16KiB", to: "max_header_bytes: 4KiB",
			after: g.expectStatus(200, "/plain/", "X-Big", bigHeader)},
		{section: "server", setting: "server.tls.certificates", reported: "server.tls.certificates (turning TLS on or off)",
			from: "certificates: []", to: fmt.Sprintf("certificates: [{ cert_file: %s, key_file: %s }]", leaf.CertFile, leaf.KeyFile),
			after: g.expectStatus(200, "/plain/")},
		{section: "upstream", setting: "upstream.timeout", from: "timeout: 2s", to: "timeout: 100ms", live: true,
			before: g.expectStatus(200, "/slow/"), after: g.expectStatus(504, "/slow/")},
		{section: "client_ip", setting: "client_ip.trusted_proxies", from: "trusted_proxies: []", to: "trusted_proxies: [127.0.0.1/32]",
			after: func(t *testing.T) {
				// Were the loopback peer trusted, each forwarded address
				// would count on its own.
				ok := 0
				for _, xff := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
					ok += g.allowed(t, 1, "/by-address/", "X-Forwarded-For", xff)
				}
				if ok != 2 {
					t.Errorf("%d of 3 requests with distinct X-Forwarded-For allowed, want 2 (one peer address)", ok)
				}
			}},
	}
}

// requestReloadRows are the rows of the settings of what requests get:
// limits, tiers and tokens, validation, duplicate protection, identity,
// logs and traces, overload, CORS and routes, and reload_interval.
func requestReloadRows(g *reloadGateway) []reloadRow {
	return []reloadRow{
		{section: "limiter", setting: "limiter.headers", from: "headers: ietf", to: "headers: legacy", live: true,
			before: func(t *testing.T) {
				if _, h, _ := call(t, "GET", g.gw+"/headed/", ""); h.Get("RateLimit-Policy") == "" || h.Get("X-RateLimit-Limit") != "" {
					t.Errorf("ietf headers: %v", h)
				}
			},
			after: func(t *testing.T) {
				if _, h, _ := call(t, "GET", g.gw+"/headed/", ""); h.Get("RateLimit-Policy") != "" || h.Get("X-RateLimit-Limit") != "1000" {
					t.Errorf("legacy headers: %v", h)
				}
			}},
		{section: "tiers", setting: "tiers", from: "capped: { rate: 3/1h }", to: "capped: { rate: 5/1h }", live: true,
			before: g.expectAllowed(3, 4, "/capped/", "Authorization", "Bearer vip-token"),
			after:  g.expectAllowed(5, 6, "/capped/", "Authorization", "Bearer vip-token")},
		{section: "reload_interval", setting: "reload_interval", from: "reload_interval: 0s", to: "reload_interval: 1s"},
		{section: "tokens_file", setting: "tokens_file", from: "tokens_file: tokens.yaml", to: "tokens_file: more-tokens.yaml", live: true,
			before: g.expectAllowed(2, 3, "/capped/", "Authorization", "Bearer new-vip"),
			after:  g.expectAllowed(3, 4, "/capped/", "Authorization", "Bearer new-vip")},
		{section: "validation", setting: "validation.unknown_fields", from: "unknown_fields: reject", to: "unknown_fields: allow", live: true,
			before: func(t *testing.T) {
				if n, m := g.be.orders.Load(), g.orderWithUnknownField(t); m != n {
					t.Errorf("an order with an unknown field reached the backend under unknown_fields: reject")
				}
			},
			after: func(t *testing.T) {
				if n, m := g.be.orders.Load(), g.orderWithUnknownField(t); m != n+1 {
					t.Errorf("an order with an unknown field did not reach the backend under unknown_fields: allow")
				}
			}},
		{section: "validation", setting: "validation.catalogue.refresh", from: "refresh: 30s", to: "refresh: 1m"},
		{section: "idempotency", setting: "idempotency.enabled", from: "idempotency: { enabled: true }", to: "idempotency: { enabled: false }",
			before: g.placedTwice("before-reload"), after: g.placedTwice("after-reload")},
		{section: "identity", setting: "identity.jwt.leeway", from: "identity: { verify: false }", to: "identity: { verify: false, jwt: { leeway: 1m } }"},
		{section: "log", setting: "log.level", from: "level: info", to: "level: debug"},
		{section: "tracing", setting: "tracing.sampler", from: "sampler: parentbased_always_on", to: "sampler: always_off"},
		{section: "overload", setting: "overload.fixed_limit", from: "fixed_limit: 0", to: "fixed_limit: 1", live: true,
			before: func(t *testing.T) {
				if got := g.concurrentSlow(t); got[0] != 200 || got[1] != 200 {
					t.Errorf("two requests at once without a fixed limit: %v, want both 200", got)
				}
			},
			after: func(t *testing.T) {
				got := g.concurrentSlow(t)
				if slices.Sort(got); got[0] != 200 || got[1] != 503 {
					t.Errorf("two requests at once under fixed_limit 1: %v, want one 200 and one 503", got)
				}
			}},
		{section: "cors", setting: "cors.allowed_origins", from: "allowed_origins: []", to: "allowed_origins: [https://app.example]", live: true,
			before: func(t *testing.T) {
				if _, h, _ := call(t, "GET", g.gw+"/plain/", "", "Origin", "https://app.example"); h.Get("Access-Control-Allow-Origin") != "" {
					t.Errorf("CORS answered while off: %v", h)
				}
			},
			after: func(t *testing.T) {
				if _, h, _ := call(t, "GET", g.gw+"/plain/", "", "Origin", "https://app.example"); h.Get("Access-Control-Allow-Origin") != "https://app.example" {
					t.Errorf("CORS not answered once on: %v", h)
				}
			}},
		{section: "routes", setting: "routes", from: "{ name: plain, match: GET /plain/ }", to: "{ name: plain, match: GET /plain/, limits: [{ key: address, rate: 1/1h }] }", live: true,
			before: g.expectAllowed(3, 3, "/plain/"), after: g.expectAllowed(1, 3, "/plain/")},
	}
}

// checkReloadRow changes r's setting in the file, sends SIGHUP and checks
// the reload's report, the configuration in force and what r observes;
// putting the file back, it checks the report of that reload too.
func (g *reloadGateway) checkReloadRow(t *testing.T, r reloadRow) {
	if strings.Count(g.base, r.from) != 1 {
		t.Fatalf("%q is not in the configuration once", r.from)
	}
	if r.before != nil {
		r.before(t)
	}
	changed := strings.Replace(g.base, r.from, r.to, 1)
	g.write(t, "exgate.yaml", changed)
	t.Cleanup(func() {
		g.write(t, "exgate.yaml", g.base)
		wantApplied := "[]"
		if r.live {
			wantApplied = "[" + r.setting + "]"
		}
		if applied, ignored := g.sighup(t); applied != wantApplied || ignored != "[]" {
			t.Errorf("putting the file back: applied %s, ignored %s; want applied %s", applied, ignored, wantApplied)
		}
	})

	applied, ignored := g.sighup(t)
	reported := cmp.Or(r.reported, r.setting)
	wantApplied, wantIgnored := "[]", "["+reported+"]"
	if r.live {
		wantApplied, wantIgnored = wantIgnored, wantApplied
	}
	if applied != wantApplied || ignored != wantIgnored {
		t.Errorf("report: applied %s, ignored until restart %s; want %s, %s", applied, ignored, wantApplied, wantIgnored)
	}
	// The configuration in force holds a live change, and not a
	// restart-only one: it differs from the file in that setting
	// alone.
	file, err := config.Load(g.path, secretEnv)
	if err != nil {
		t.Fatal(err)
	}
	_, live, restart := config.Reloaded(g.a.live.Load(), file)
	wantDiffer := "[" + r.setting + "]"
	if r.live {
		wantDiffer = "[]"
	}
	if differ := fmt.Sprint(append(live, restart...)); differ != wantDiffer {
		t.Errorf("the configuration in force differs from the file in %s, want %s", differ, wantDiffer)
	}
	if r.after != nil {
		r.after(t)
	}
}

// TestReloadKeepsRelativeFiles: the files a configuration names by
// relative paths are taken from its directory at start without changing
// the configuration in force, so that a reload of the unchanged file
// reports nothing changed (a relative jwks_file was reported ignored
// until a restart on every reload) and tokens still verify after it.
func TestReloadKeepsRelativeFiles(t *testing.T) {
	dir := t.TempDir()
	k := mustRSA(t)
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("jwks.json", set)
	write("pub.pem", jwttest.PublicKeyPEM(t, &k.PublicKey))
	write("exgate.yaml", []byte(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
server: { drain_delay: 0s }
identity:
  verify: true
  jwt:
    keys: [{ kid: k2, algorithms: [RS256], public_key_file: pub.pem }]
    jwks_file: jwks.json
    jwks_algorithms: [RS256]
routes:
  - { name: all, match: "*", auth: required }
`))
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(bs.Close)
	getenv := func(name string) (string, bool) {
		if name == "EXGATE_UPSTREAM_URL" {
			return bs.URL, true
		}
		return secretEnv(name)
	}
	path := filepath.Join(dir, "exgate.yaml")
	cfg, err := config.Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a := startApp(t, cfg, deps{log: zap.New(core), now: time.Now, getenv: getenv, configPath: path})
	status := func(kid string) int {
		tok := jwttest.Sign(t, jwt.SigningMethodRS256, k, kid, jwt.MapClaims{"user_id": "7", "token_type": "access", "exp": time.Now().Add(time.Hour).Unix()}, nil)
		code, _, _ := call(t, "GET", "http://"+a.addr+"/x", "", "Authorization", "Bearer "+tok)
		return code
	}
	for _, kid := range []string{"k1", "k2"} {
		if code := status(kid); code != http.StatusNoContent {
			t.Fatalf("token of key %s before the reload: %d", kid, code)
		}
	}
	a.reloadNow()
	reloaded := logs.FilterMessage("configuration reloaded").All()
	if len(reloaded) != 1 {
		t.Fatalf("reload not logged: %v", logs.All())
	}
	if f := reloaded[0].ContextMap(); f["ignored_until_restart"] != nil || fmt.Sprint(f["applied"]) != "[]" {
		t.Errorf("reload of the unchanged file: applied %v, ignored until restart %v", f["applied"], f["ignored_until_restart"])
	}
	for _, kid := range []string{"k1", "k2"} {
		if code := status(kid); code != http.StatusNoContent {
			t.Errorf("token of key %s after the reload: %d", kid, code)
		}
	}
}

// TestReloadFromPipeRefused: a configuration read from a pipe cannot be
// read again; a reload says so and keeps it, where reading the empty pipe
// would have put the defaults in force.
func TestReloadFromPipeRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "exgate.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, _ = f.WriteString("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nupstream: { url: http://192.0.2.1:9000 }\n")
			_ = f.Close()
		}
	}()
	data, err := config.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(fifo, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a := startApp(t, cfg, deps{log: zap.New(core), now: time.Now, configPath: fifo, configData: data})
	a.reloadNow()
	failed := logs.FilterMessage("configuration reload failed; keeping the last good configuration").All()
	if len(failed) != 1 || !strings.Contains(fmt.Sprint(failed[0].ContextMap()["error"]), "a pipe or device") {
		t.Fatalf("reload of a configuration read from a pipe: %v", logs.All())
	}
	if got := a.live.Load().Upstream.URL.String(); got != "http://192.0.2.1:9000" {
		t.Errorf("upstream in force after the refused reload: %s", got)
	}
}
