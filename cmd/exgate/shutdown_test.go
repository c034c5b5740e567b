package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shutdownConfig is the configuration of TestShutdownBinary: listen and
// admin addresses, backend, drain delay, shutdown timeout. The route
// timeout (20s) outlasts every shutdown timeout the tests set: a request
// held at the backend is still running when the shutdown timeout ends,
// however the two timers fall (with both at 10s, the route's 504 could
// end the request just before the shutdown timeout, and exgate exit 0).
const shutdownConfig = `
listen: %q
admin_listen: %q
upstream: { url: %q, timeout: 20s }
server: { drain_delay: %s, shutdown_timeout: %s }
reload_interval: 0s
routes:
  - { name: default, match: "*" }
`

// TestShutdownBinary proves what the README and docs/operations.md say of
// stopping exgate, on the real binary: during server.drain_delay /readyz
// answers 503 while new connections are still served, and the exit code
// is 0 when nothing was running; a request still running at
// server.shutdown_timeout is cut and the exit code is 1 (the admin
// listener answers /readyz 503 until then); a second SIGTERM during the
// drain ends the process at once. The delays are far beyond what a busy
// machine takes to send the test's requests (each subtest runs its own
// exgate, in parallel with the others).
func TestShutdownBinary(t *testing.T) {
	bin := buildBinary(t)
	release := make(chan struct{})
	arrived := make(chan struct{}, 1) // a request reached /slow
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			return
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); backend.Close() })
	run := func(t *testing.T, drain, timeout string) (*exec.Cmd, *logWatcher, string, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "exgate.yaml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(shutdownConfig, anyPort, anyPort, backend.URL, drain, timeout)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, logs, _ := startBinary(t, bin, path)
		listen, admin := startedAddrs(t, logs)
		return cmd, logs, "http://" + listen, "http://" + admin
	}

	t.Run("drain", func(t *testing.T) {
		t.Parallel()
		cmd, logs, base, admin := run(t, "10s", "15s")
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		logs.wait(t, "draining", 0)
		if res, err := http.Get(admin + "/readyz"); err != nil || res.StatusCode != 503 {
			t.Errorf("admin /readyz while draining: %v %v, want 503", res, err)
		} else {
			res.Body.Close()
		}
		// A new connection during the drain delay is still served.
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		if res, err := (&http.Client{Transport: tr}).Get(base + "/fast"); err != nil || res.StatusCode != 200 {
			t.Errorf("traffic while draining: %v %v, want 200", res, err)
		} else {
			res.Body.Close()
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("exit: %v, want exit code 0", err)
		}
		if d := time.Since(start); d < 10*time.Second {
			t.Errorf("exited %v after SIGTERM, before the 10s drain delay", d)
		}
	})

	t.Run("requests outlast the shutdown timeout", func(t *testing.T) {
		t.Parallel()
		cmd, logs, base, admin := run(t, "0s", "10s")
		checkShutdownTimeoutCuts(t, cmd, logs, base, admin, arrived)
	})

	t.Run("second signal", func(t *testing.T) {
		t.Parallel()
		cmd, logs, _, _ := run(t, "30s", "25s")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		logs.wait(t, "draining", 0)
		// Killed by the signal: an exit at the end of the 30s drain
		// would be a status, not a signal.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("exit: %v, want killed by the second SIGTERM", err)
		}
	})
}

// checkShutdownTimeoutCuts sends a request to /slow, which the backend
// holds (it says so on arrived), and SIGTERM to the binary run as cmd:
// /readyz on admin answers 503 while the request runs, the request is cut
// at the shutdown timeout, and the process exits 1, its last log line
// saying why.
func checkShutdownTimeoutCuts(t *testing.T, cmd *exec.Cmd, logs *logWatcher, base, admin string, arrived <-chan struct{}) {
	t.Helper()
	failed := make(chan error, 1)
	go func() {
		res, err := http.Get(base + "/slow")
		if err == nil {
			res.Body.Close()
			err = fmt.Errorf("answered %s", res.Status)
		}
		failed <- err
	}()
	<-arrived // the request is at the backend
	_ = cmd.Process.Signal(syscall.SIGTERM)
	logs.wait(t, "shutting down", 0)
	// Logged just before /readyz turns 503: the test asks until it
	// has (the shutdown timeout leaves it 10s).
	var status int
	for deadline := time.Now().Add(10 * time.Second); status != 503 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		res, err := http.Get(admin + "/readyz")
		if err != nil {
			t.Fatalf("admin /readyz while requests finish: %v", err)
		}
		res.Body.Close()
		status = res.StatusCode
	}
	if status != 503 {
		t.Errorf("admin /readyz while requests finish: %d, want 503", status)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit: %v, want exit code 1", err)
	}
	if err := <-failed; err == nil {
		t.Error("the request still running at the shutdown timeout was answered")
	}
	logs.wait(t, "shutdown incomplete", 0)
	// The last line says so: exit code 1, the signal, the requests cut.
	line, _ := logs.wait(t, "exgate stopped", 0)
	if !strings.Contains(line, `"exit_code":1`) || !strings.Contains(line, "terminated signal received; shutdown incomplete") ||
		!strings.Contains(line, `"level":"error"`) {
		t.Errorf("the last line: %s", line)
	}
}
