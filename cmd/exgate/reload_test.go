package main

import (
	"bufio"
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
