package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/exgate/exgate/internal/logshare"
	"github.com/exgate/exgate/sim"
)

// samplingConfig is TestAccessLogSamplingBinary's configuration: listen
// and admin addresses, backend. Sampling keeps 5 lines of a message a
// second, then one in a thousand; the address's share of refusal lines
// is its first 300.
const samplingConfig = `
listen: %q
admin_listen: %q
upstream: { url: %q }
server: { drain_delay: 0s }
reload_interval: 0s
replica: exgate-7
log: { sampling: { initial: 5, thereafter: 1000 }, refusals_per_client: { rate: 1/1h, burst: 300 } }
`

// TestAccessLogSamplingBinary runs the real binary with log sampling and
// sends it refused orders, cancels and market reads in a burst: every
// order and cancel has its access log line (the evidence of a 401 or a
// 429 must not thin out under load) up to the address's share of refusal
// lines (the 401s of its orders), and those past it are counted in the
// summary written at shutdown, by status and code; the cancels reached
// the backend and are all written; the reads are sampled; every line
// names the protocol and the client's user agent, and every line of the
// process the replica; after SIGTERM the last line says the process
// stopped, with its exit code and why.
func TestAccessLogSamplingBinary(t *testing.T) {
	bin := buildBinary(t)
	backend := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(backend.Close)
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(samplingConfig, anyPort, anyPort, backend.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, logs, _ := startBinary(t, bin, path)
	listen, _ := startedAddrs(t, logs)

	const orders, cancels, reads = 400, 50, 100
	base := "http://" + listen
	send := func(n int, method, path string, header ...string) {
		body := `{"symbol":"BTC_USDT"}`
		if method != "POST" {
			body = "" // a cancel by id takes no body (400 unexpected_body)
		}
		for range n {
			code, _, _ := call(t, method, base+path, body, append([]string{"User-Agent", "trading-bot/2.1"}, header...)...)
			if code == 0 {
				t.Fatal("no answer")
			}
		}
	}
	send(orders, "POST", "/api/v1/odr/orders/", "Content-Type", "application/json") // 401: no token
	send(cancels, "DELETE", "/api/v1/odr/orders/7/", "Authorization", "Bearer not-a-jwt")
	send(reads, "GET", "/api/v1/mkt/markets/")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	logs.wait(t, "exgate stopped", 0)

	count := map[string]int{}
	var notWritten float64
	var last map[string]any
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, line := range logs.lines {
		var f map[string]any
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("not a JSON line: %s", line)
		}
		last = f
		if f["replica"] != "exgate-7" {
			t.Errorf("a line without the replica's name: %s", line)
		}
		if f["msg"] == logshare.SummaryMessage {
			if f["client"] != "127.0.0.1" {
				t.Errorf("a summary without its client: %s", line)
			}
			notWritten += f["lines_not_written"].(float64)
		}
		if f["msg"] != "request" {
			continue
		}
		count[fmt.Sprint(f["route"])]++
		if f["protocol"] != "HTTP/1.1" || f["user_agent"] != "trading-bot/2.1" {
			t.Errorf("a line without protocol or user agent: %s", line)
		}
		if f["route"] == "place_order" && f["auth_failure"] != "no_credentials" {
			t.Errorf("a 401 without its reason: %s", line)
		}
	}
	if count["place_order"] != 300 || count["cancel_order"] != cancels || count["list_markets"] >= reads {
		t.Errorf("access log lines by route: %v; want the first 300 of %d orders, every one of %d cancels (the backend answered them), fewer than the %d reads", count, orders, cancels, reads)
	}
	if notWritten != orders-300 {
		t.Errorf("summaries count %v refusal lines not written, want %d", notWritten, orders-300)
	}
	if last["msg"] != "exgate stopped" || last["exit_code"] != 0.0 || !strings.Contains(fmt.Sprint(last["reason"]), "terminated") {
		t.Errorf("the last line: %v, want exgate stopped with exit code 0 and the signal", last)
	}
}

// TestLastLineWhenStartFails: a gateway that cannot start (its port is
// taken) also ends its log with the exit code and why.
func TestLastLineWhenStartFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	env := func(k string) (string, bool) {
		switch k {
		case "EXGATE_LISTEN":
			return taken.Addr().String(), true
		case "EXGATE_ADMIN_LISTEN":
			return "127.0.0.1:0", true
		}
		return secretEnv(k)
	}
	var stdout, stderr strings.Builder
	if code := run(context.Background(), nil, env, &stdout, &stderr); code != 1 {
		t.Fatalf("exit code %d, want 1; log:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["msg"] != "exgate stopped" || last["exit_code"] != 1.0 || !strings.HasPrefix(fmt.Sprint(last["reason"]), "cannot start: listen ") {
		t.Errorf("the last line: %v", last)
	}
}
