package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds cmd/exgate into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "exgate")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBinary runs bin with the configuration file cfgPath and env added
// to the environment, until the test ends, and waits for its start line.
// It returns the process, its log and the index of the line after the
// start line.
func startBinary(t *testing.T, bin, cfgPath string, env ...string) (*exec.Cmd, *logWatcher, int) {
	t.Helper()
	cmd := exec.Command(bin, "-config", cfgPath)
	cmd.Env = append(os.Environ(), env...)
	logs := newLogWatcher()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, seen := logs.wait(t, "exgate started", 0)
	return cmd, logs, seen
}

// anyPort is the listen and admin_listen of a test's binary: each
// listener takes a port the kernel finds free as it binds (startedAddrs
// reads which), where a port found free before the start could be taken
// by another process meanwhile (a server another test package starts).
const anyPort = "127.0.0.1:0"

// startedAddrs returns the traffic and admin addresses the binary's start
// line reports.
func startedAddrs(t *testing.T, logs *logWatcher) (listen, admin string) {
	t.Helper()
	line, _ := logs.wait(t, "exgate started", 0)
	var f struct {
		Listen string `json:"listen"`
		Admin  string `json:"admin_listen"`
	}
	if err := json.Unmarshal([]byte(line), &f); err != nil || f.Listen == "" || f.Admin == "" {
		t.Fatalf("start line without the listeners' addresses (%v): %s", err, line)
	}
	return f.Listen, f.Admin
}

// quickstart returns the README's quick-start shell block.
func quickstart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	begin := strings.Index(s, "<!-- quickstart:begin -->")
	end := strings.Index(s, "<!-- quickstart:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README has no quickstart block")
	}
	block := s[begin:end]
	block = block[strings.Index(block, "```sh\n")+len("```sh\n"):]
	return block[:strings.LastIndex(block, "```")]
}

// TestDevModeBinary runs the real binary as the README says, on free
// ports, runs the README's curl lines verbatim against it (only the port
// differs), checks with curl that an order with a query string is refused
// while the order list keeps its filter, then stops it with SIGTERM and
// expects exit code 0.
func TestDevModeBinary(t *testing.T) {
	bin := buildBinary(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	cmd := exec.Command(bin, "-dev")
	cmd.Env = append(os.Environ(), "EXGATE_LISTEN=127.0.0.1:0", "EXGATE_ADMIN_LISTEN=127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	gwRe := regexp.MustCompile(`gateway\s+http://(\S+)`)
	adminRe := regexp.MustCompile(`admin\s+http://(\S+)/healthz`)
	var gw, admin string
	sc := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	for sc.Scan() && (gw == "" || admin == "") {
		if m := gwRe.FindStringSubmatch(sc.Text()); m != nil {
			gw = m[1]
		}
		if m := adminRe.FindStringSubmatch(sc.Text()); m != nil {
			admin = m[1]
		}
	}
	deadline.Stop()
	if gw == "" || admin == "" {
		t.Fatalf("no banner with addresses; stderr:\n%s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	script := strings.ReplaceAll(quickstart(t), "localhost:8080", gw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("quickstart failed: %v\n%s", err, out)
	}
	o := string(out)
	for _, want := range []string{`"symbol":"BTC_USDT"`, `"type":"market"`, `"side":"buy"`, `"price_precision"`,
		`"type":"limit"`, `"state":"active"`, `"state":"canceled"`} {
		if !strings.Contains(o, want) {
			t.Fatalf("quickstart output lacks %s:\n%s", want, o)
		}
	}
	if regexp.MustCompile(`"code":"(not_authenticated|token_not_valid|authentication_failed)"`).MatchString(o) {
		t.Fatalf("quickstart was refused:\n%s", o)
	}
	if !regexp.MustCompile(`"id":"\d+_\d+"`).MatchString(o) {
		t.Fatalf("quickstart listed no match:\n%s", o)
	}

	// An order route refuses a query string (400 invalid_query, nothing
	// placed); a GET route keeps its query, here the order list's filter.
	curl := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "curl", append([]string{"-sS"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var tok struct{ Access string }
	if err := json.Unmarshal([]byte(curl("-X", "POST", "http://"+gw+"/api/v1/usr/authenticate/", "-H", "Content-Type: application/json",
		"-d", `{"api_key":"dev","secret_key":"dev"}`)), &tok); err != nil || tok.Access == "" {
		t.Fatalf("authenticate: %v", err)
	}
	auth := "Authorization: Bearer " + tok.Access
	before := curl("http://"+gw+"/api/v1/odr/orders/?state=active", "-H", auth)
	for _, q := range []string{"?format=json", "?price=1"} {
		out := curl("-X", "POST", "http://"+gw+"/api/v1/odr/orders/"+q, "-H", auth, "-H", "Content-Type: application/json",
			"-d", `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"0.001"}`)
		if !strings.Contains(out, `"code":"invalid_query"`) {
			t.Fatalf("order with %s: %s", q, out)
		}
	}
	if after := curl("http://"+gw+"/api/v1/odr/orders/?state=active", "-H", auth); after != before || !strings.HasPrefix(after, "[") {
		t.Fatalf("active orders before %s, after refused orders %s", before, after)
	}

	res, err := http.Get("http://" + admin + "/readyz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", res, err)
	}
	res.Body.Close()

	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
}

// TestCheckConfigBinary runs `exgate check-config` on a good and a bad file.
func TestCheckConfigBinary(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("listen: \":18080\"\n"), 0o600)
	_ = os.WriteFile(bad, []byte("listen: \":18080\"\nroutes:\n  - name: x\n    match: GTE /a/\n  - name: y\n    match: '*'\n    limts: []\n"), 0o600)

	out, err := exec.Command(bin, "check-config", good).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "\nok\n") || !strings.Contains(string(out), "the memory store (1000000 identifiers, 1024.0 MiB) holds 7 such shares; a client also takes only while it holds less than is left free") {
		t.Fatalf("good file: %v %q", err, out)
	}
	out, err = exec.Command(bin, "check-config", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("bad file accepted: %s", out)
	}
	for _, want := range []string{`routes[0].match`, `unknown method "GTE"`, `routes[1].limts`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("check-config output lacks %q:\n%s", want, out)
		}
	}

	// Redis TLS files are read, relative to the configuration file.
	tlsConf := filepath.Join(dir, "tls.yaml")
	_ = os.WriteFile(tlsConf, []byte("limiter:\n  redis:\n    addrs: [\"127.0.0.1:6380\"]\n    tls: true\n    tls_ca_file: ca.pem\n"), 0o600)
	out, err = exec.Command(bin, "check-config", tlsConf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "limiter.redis.tls_ca_file") {
		t.Fatalf("missing CA file: %v %q", err, out)
	}
	_ = os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("not a certificate"), 0o600)
	out, err = exec.Command(bin, "check-config", tlsConf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "holds no PEM certificate") {
		t.Fatalf("CA file without a certificate: %v %q", err, out)
	}
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	ts.Close()
	_ = os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600)
	out, err = exec.Command(bin, "check-config", tlsConf).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "\nok\n") {
		t.Fatalf("good CA file next to the configuration: %v %q", err, out)
	}
}

// TestVersionOfBuilds: `make install` names the build after the git
// checkout (worktrees included, where the Go toolchain records nothing),
// and a build that recorded nothing says how to get one that does.
func TestVersionOfBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	prefix := t.TempDir()
	if out, err := exec.Command("make", "-C", "../..", "-s", "install", "PREFIX="+prefix).CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(prefix, "bin", "exgate"), "-version").Output()
	want := regexp.MustCompile(`^exgate (v\d+\.\d+\.\d+\S*) ` + rev[:12] + `\n$`)
	if err != nil || !want.Match(out) {
		t.Fatalf("exgate -version after make install: %v %q, want %s", err, out, want)
	}
	if _, err := os.Stat(filepath.Join(prefix, "bin", "exchange-sim")); err != nil {
		t.Errorf("make install: %v", err)
	}

	bin := filepath.Join(t.TempDir(), "exgate")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "exgate devel (no version recorded: build with make build") {
		t.Fatalf("exgate -version of a build without version control information: %v %q", err, out)
	}
}
