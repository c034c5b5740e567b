// Package promtest runs a real Prometheus server for tests, on a loopback
// port it binds itself (port 0) and reports in its log, where a port
// found free before it starts could be taken by another process
// meanwhile (a server another test package starts).
package promtest

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// listening is Prometheus's log line naming the address its web
// listener bound (info level).
var listening = regexp.MustCompile(`msg="Listening on" address=(\S+)`)

// Start runs the prometheus binary bin with the configuration file
// cfgPath and its data in a temporary directory, until the test ends,
// and returns the "127.0.0.1:port" address of its HTTP API once it
// listens. The server's log is written to the test's log when the test
// fails.
func Start(t *testing.T, bin, cfgPath string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(t.TempDir(), "data"),
		"--web.listen-address=127.0.0.1:0", "--log.level=info")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs strings.Builder
	addr, done := make(chan string, 1), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	select {
	case a := <-addr:
		return a
	case <-done:
		t.Fatal("prometheus exited before it listened")
	case <-time.After(30 * time.Second):
		t.Fatal("prometheus did not listen within 30s")
	}
	return ""
}
