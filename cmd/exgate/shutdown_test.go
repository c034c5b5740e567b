package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/starvation"
)

// shutdownConfig is the configuration of TestShutdownBinary: listen and
// admin addresses, backend, drain delay, shutdown timeout.
const shutdownConfig = `
listen: %q
admin_listen: %q
upstream: { url: %q }
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
// drain ends the process at once.
func TestShutdownBinary(t *testing.T) {
	bin := buildBinary(t)
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); backend.Close() })
	run := func(t *testing.T, drain, timeout string) (*exec.Cmd, *logWatcher, string, string) {
		t.Helper()
		listen, admin := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		path := filepath.Join(t.TempDir(), "exgate.yaml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(shutdownConfig, listen, admin, backend.URL, drain, timeout)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-config", path)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		logs := watchLog(stderr)
		logs.wait(t, "exgate started", 0)
		return cmd, logs, "http://" + listen, "http://" + admin
	}

	t.Run("drain", func(t *testing.T) {
		cmd, logs, base, admin := run(t, "3s", "5s") // room for a loaded machine
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
		if d := time.Since(start); d < 3*time.Second {
			t.Errorf("exited %v after SIGTERM, before the 3s drain delay", d)
		}
	})

	t.Run("requests outlast the shutdown timeout", func(t *testing.T) {
		cmd, logs, base, admin := run(t, "0s", "1s")
		failed := make(chan error, 1)
		go func() {
			res, err := http.Get(base + "/slow")
			if err == nil {
				res.Body.Close()
				err = fmt.Errorf("answered %s", res.Status)
			}
			failed <- err
		}()
		time.Sleep(200 * time.Millisecond) // the request is at the backend
		v := starvation.New(t)
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
		if res, err := http.Get(admin + "/readyz"); err != nil || res.StatusCode != 503 {
			t.Errorf("admin /readyz while requests finish: %v %v, want 503", res, err)
		} else {
			res.Body.Close()
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit: %v, want exit code 1", err)
		}
		d := time.Since(start)
		exiting := v.Phase("shutdown")
		if d > 5*time.Second {
			v.Errorf(exiting, "took %v to exit with a 1s shutdown timeout", d)
		}
		if err := <-failed; err == nil {
			t.Error("the request still running at the shutdown timeout was answered")
		}
		logs.wait(t, "shutdown incomplete", 0)
		v.Settle()
	})

	t.Run("second signal", func(t *testing.T) {
		cmd, logs, _, _ := run(t, "30s", "25s")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		logs.wait(t, "draining", 0)
		v := starvation.New(t)
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("exit: %v, want killed by the second SIGTERM", err)
		}
		d := time.Since(start)
		killed := v.Phase("second signal")
		if d > 3*time.Second {
			v.Errorf(killed, "took %v after the second signal", d)
		}
		v.Settle()
	})
}
