package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/testdeps"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/sim"
)

// seen records what the backend learnt of each request it got.
type seen struct {
	mu    sync.Mutex
	xff   []string
	proto []string
}

func (s *seen) last() (xff, proto string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.xff) == 0 {
		return "", ""
	}
	return s.xff[len(s.xff)-1], s.proto[len(s.proto)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.xff)
}

// edgeStack is exgate serving TLS (certificates of ca for
// "api.example.test") in front of the reference backend.
type edgeStack struct {
	app  *app
	ca   *tlstest.CA
	seen *seen
	dir  string
}

// startEdgeStack starts the reference backend (recording the forwarded
// headers of the requests exgate forwards) and exgate with TLS, further
// configured by mut. leaf, when not nil, replaces the certificate files.
func startEdgeStack(t *testing.T, mut func(cfg *config.Config, ca *tlstest.CA, dir string)) *edgeStack {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	leaf := ca.Issue(dir, "api", []string{"api.example.test"}, tlstest.Options{})
	s := &seen{}
	simh := sim.New(sim.Options{})
	bs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
			s.mu.Lock()
			s.xff = append(s.xff, xff)
			s.proto = append(s.proto, r.Header.Get("X-Forwarded-Proto"))
			s.mu.Unlock()
		}
		simh.ServeHTTP(w, r)
	}))
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Server.DrainDelay = 0
	cfg.Server.TLS.Certificates = []config.Certificate{{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}}
	if mut != nil {
		mut(cfg, ca, dir)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg, deps{log: zap.NewNop(), now: time.Now})
	waitCatalogue(t, a)
	return &edgeStack{app: a, ca: ca, seen: s, dir: dir}
}

// matchesLimit makes list_matches allow n requests a minute per address.
func matchesLimit(cfg *config.Config, n int64) {
	for i := range cfg.Routes {
		if cfg.Routes[i].Name == "list_matches" {
			cfg.Routes[i].Limits[0].Rate = config.Rate{N: n, Period: time.Minute}
			cfg.Routes[i].Limits[0].Burst = int(n)
		}
	}
}

// curlCodes runs curl with args over one connection for each URL and
// returns "version code" per request.
func curlCodes(t *testing.T, curl string, args []string, urls ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := append([]string{"-sS", "-w", `%{http_version} %{http_code}\n`}, args...)
	for _, u := range urls {
		all = append(all, "-o", "/dev/null", u)
	}
	out, err := exec.CommandContext(ctx, curl, all...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", strings.Join(all, " "), err, out)
	}
	return strings.Fields(string(out))
}

// repeat returns n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestCurlOverTLS drives exgate with Debian's curl over TLS, once with
// HTTP/2 and once with HTTP/1.1, each from its own loopback address:
// both are answered, limited per address alike (429 in exgate's JSON),
// and forwarded with X-Forwarded-Proto: https.
func TestCurlOverTLS(t *testing.T) {
	curl := testdeps.Command(t, "curl", "curl")
	e := startEdgeStack(t, func(cfg *config.Config, _ *tlstest.CA, _ string) { matchesLimit(cfg, 3) })
	_, port, _ := net.SplitHostPort(e.app.addr)
	url := "https://api.example.test:" + port + "/api/v1/mth/matches/BTC_USDT/"
	for _, tc := range []struct {
		flag, from, version string
	}{
		{"--http2", "127.0.0.2", "2"},
		{"--http1.1", "127.0.0.3", "1.1"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			args := []string{tc.flag, "--cacert", e.ca.File, "--resolve", "api.example.test:" + port + ":127.0.0.1", "--interface", tc.from}
			got := strings.Join(curlCodes(t, curl, args, repeat(url, 4)...), " ")
			want := strings.Join([]string{tc.version, "200", tc.version, "200", tc.version, "200", tc.version, "429"}, " ")
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
			xff, proto := e.seen.last()
			if xff != tc.from || proto != "https" {
				t.Fatalf("backend got X-Forwarded-For %q, X-Forwarded-Proto %q; want %q, https", xff, proto, tc.from)
			}
			out, err := exec.Command(curl, append(args, "-s", url)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), `"code":"throttled"`) {
				t.Fatalf("over the limit: %v %s", err, out)
			}
			// Headers over server.max_header_bytes (16 KiB), just over
			// and by half again, are refused alike with exgate's 431,
			// before any limit or the backend. (net/http reads a header
			// block up to twice the limit, so that over HTTP/2 a block
			// spread over a HEADERS frame and its CONTINUATION gets its
			// answer instead of the connection's end.)
			before := e.seen.count()
			for _, n := range []int{16300, 24 << 10} {
				big := "X-Padding: " + strings.Repeat("a", n)
				out, err = exec.Command(curl, append(args, "-s", "-w", " %{http_code}", "-H", big, url)...).CombinedOutput()
				if err != nil || !strings.Contains(string(out), `"code":"request_header_too_large"`) || !strings.HasSuffix(string(out), " 431") {
					t.Fatalf("oversize headers (%d bytes): %v %s", n, err, out)
				}
			}
			if n := e.seen.count(); n != before {
				t.Fatalf("oversize headers reached the backend")
			}
		})
	}
}

// TestHAProxyProxyProtocol puts Debian's HAProxy in TCP mode in front of
// exgate (TLS passes through to exgate), once with send-proxy-v2 and once
// with send-proxy. Clients connecting from 127.0.0.2 and 127.0.0.3 each
// get their own per-address allowance, whichever frontend they use; a
// client connecting to exgate directly with a forged PROXY header gets
// nothing.
func TestHAProxyProxyProtocol(t *testing.T) {
	haproxy := testdeps.Command(t, "haproxy", "haproxy")
	curl := testdeps.Command(t, "curl", "curl")
	e := startEdgeStack(t, func(cfg *config.Config, _ *tlstest.CA, _ string) {
		matchesLimit(cfg, 3)
		cfg.Server.MaxConnections = 8 // an address alone holds 4
		var p config.Prefix
		_ = p.UnmarshalText([]byte("127.0.0.1"))
		cfg.Server.ProxyProtocol = config.ProxyProtocol{TrustedPeers: []config.Prefix{p}, Policy: config.ProxyRequired}
	})
	v2, v1, logs := startHAProxy(t, haproxy, e.dir, e.app.addr)

	get := func(t *testing.T, from string, port, n int) string {
		t.Helper()
		url := fmt.Sprintf("https://api.example.test:%d/api/v1/mth/matches/BTC_USDT/", port)
		args := []string{"--cacert", e.ca.File, "--resolve", fmt.Sprintf("api.example.test:%d:127.0.0.1", port), "--interface", from}
		codes := curlCodes(t, curl, args, repeat(url, n)...)
		var out []string
		for i := 1; i < len(codes); i += 2 {
			out = append(out, codes[i])
		}
		return strings.Join(out, " ")
	}
	t.Run("send-proxy-v2 from 127.0.0.2", func(t *testing.T) {
		if got := get(t, "127.0.0.2", v2, 4); got != "200 200 200 429" {
			t.Fatalf("codes %q, want 200 200 200 429; haproxy:\n%s", got, logs.String())
		}
		if xff, proto := e.seen.last(); xff != "127.0.0.2" || proto != "https" {
			t.Fatalf("backend got X-Forwarded-For %q, X-Forwarded-Proto %q", xff, proto)
		}
	})
	t.Run("send-proxy from 127.0.0.3", func(t *testing.T) {
		if got := get(t, "127.0.0.3", v1, 4); got != "200 200 200 429" {
			t.Fatalf("codes %q, want 200 200 200 429", got)
		}
		if xff, _ := e.seen.last(); xff != "127.0.0.3" {
			t.Fatalf("backend got X-Forwarded-For %q", xff)
		}
	})
	t.Run("127.0.0.2 through the other frontend is the same client", func(t *testing.T) {
		if got := get(t, "127.0.0.2", v1, 1); got != "429" {
			t.Fatalf("codes %q, want 429", got)
		}
	})
	t.Run("forged header sent directly", func(t *testing.T) { checkForgedProxyHeaders(t, e) })
	t.Run("one client's connections through HAProxy are its share", func(t *testing.T) {
		for i := range 4 {
			if status, code := tlsGet(t, e, "127.0.0.5", v2); status != http.StatusOK {
				t.Fatalf("connection %d of 127.0.0.5: %d %s, want 200", i, status, code)
			}
		}
		if status, code := tlsGet(t, e, "127.0.0.5", v1); status != http.StatusServiceUnavailable || code != "too_many_connections" {
			t.Fatalf("a fifth connection of 127.0.0.5: %d %s, want 503 too_many_connections", status, code)
		}
		if status, code := tlsGet(t, e, "127.0.0.6", v2); status != http.StatusOK {
			t.Fatalf("another client beside it: %d %s, want 200", status, code)
		}
	})
}

// startHAProxy starts HAProxy in front of the gateway at addr with two
// frontends, one sending PROXY protocol v2 and one v1, and returns their
// ports and HAProxy's output. HAProxy serves on listeners the test
// opened (bind fd@N: the descriptors it inherits), where ports found
// free before it starts could be taken by another process meanwhile.
func startHAProxy(t *testing.T, haproxy, dir, addr string) (v2, v1 int, logs *strings.Builder) {
	t.Helper()
	v2, v2File := inheritedListener(t)
	v1, v1File := inheritedListener(t)
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	hcfg := fmt.Sprintf(`global
  maxconn 200
defaults
  mode tcp
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend v2
  bind fd@3
  default_backend exgate_v2
frontend v1
  bind fd@4
  default_backend exgate_v1
backend exgate_v2
  server gw %s send-proxy-v2
backend exgate_v1
  server gw %s send-proxy
`, addr, addr)
	if err := os.WriteFile(cfgFile, []byte(hcfg), 0o600); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(haproxy, "-c", "-f", cfgFile)
	check.ExtraFiles = []*os.File{v2File, v1File}
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	cmd := exec.Command(haproxy, "-db", "-f", cfgFile)
	cmd.ExtraFiles = []*os.File{v2File, v1File}
	logs = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for _, p := range []int{v1, v2} {
		waitListening(t, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return v2, v1, logs
}

// tlsGet opens a TLS connection from the loopback address from through
// HAProxy's port, sends one request on it and returns the answer's status
// and error code; the connection stays open until the test ends.
func tlsGet(t *testing.T, e *edgeStack, from string, port int) (int, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /api/v1/mkt/markets/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Code string `json:"code"`
	}
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body.Code
}

// checkForgedProxyHeaders sends PROXY v1 and v2 headers naming another
// client straight to exgate, from an address it does not trust: none is
// served, and none reaches the backend.
func checkForgedProxyHeaders(t *testing.T, e *edgeStack) {
	before := e.seen.count()
	for _, header := range []string{
		"PROXY TCP4 127.0.0.9 127.0.0.1 40000 443\r\n",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\x7f\x00\x00\x09\x7f\x00\x00\x01\x9c\x40\x01\xbb",
	} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", e.app.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, header); err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.test"})
		if err := tc.Handshake(); err == nil {
			_, _ = io.WriteString(tc, "GET /api/v1/mth/matches/BTC_USDT/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
			b, _ := io.ReadAll(tc)
			t.Fatalf("a forged header was served: %q", b)
		}
		c.Close()
	}
	if n := e.seen.count(); n != before {
		t.Fatalf("backend got %d requests from forged headers", n-before)
	}
}

// inheritedListener opens a listener on a free loopback port for a
// child process to serve (exec.Cmd.ExtraFiles) and returns its port and
// descriptor; the test's copies are closed when it ends.
func inheritedListener(t *testing.T) (int, *os.File) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return ln.Addr().(*net.TCPAddr).Port, f
}

// waitListening waits until addr accepts connections.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening: %v", addr, err)
		}
	}
}

// TestCertificateRotatedUnderLoad swaps the certificate's Secret volume
// (a "..data" symlink renamed over, as the kubelet does) while clients
// keep sending: over keep-alive HTTP/2 and HTTP/1.1 connections and over
// a new connection per request. No request fails, and new connections
// get the new certificate afterwards.
func TestCertificateRotatedUnderLoad(t *testing.T) {
	var vol *tlstest.SecretVolume
	var second tlstest.Leaf
	e := startEdgeStack(t, func(cfg *config.Config, ca *tlstest.CA, dir string) {
		first := ca.Issue(dir, "first", []string{"api.example.test"}, tlstest.Options{})
		second = ca.Issue(dir, "second", []string{"api.example.test"}, tlstest.Options{})
		vol = tlstest.NewSecretVolume(t, filepath.Join(dir, "secret"), first)
		cfg.Server.TLS.Certificates = []config.Certificate{{CertFile: vol.CertFile(), KeyFile: vol.KeyFile()}}
		cfg.Server.TLS.ReloadInterval = time.Second
		for i := range cfg.Routes {
			for j := range cfg.Routes[i].Limits {
				cfg.Routes[i].Limits[j].Rate = config.Rate{N: 1000000, Period: time.Minute}
				cfg.Routes[i].Limits[j].Burst = 1000000
			}
		}
	})
	url := "https://" + e.app.addr + "/api/v1/mkt/currencies/"
	tlsCfg := &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.test"}
	clients := map[string]*http.Client{
		"http2 keep-alive":   {Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true}},
		"http1.1 keep-alive": {Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}},
		"new connections":    {Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), DisableKeepAlives: true}},
	}
	var stop atomic.Bool
	var failed atomic.Int64
	var firstErr atomic.Value
	okBy := map[string]*atomic.Int64{} // requests answered 200, by client
	var wg sync.WaitGroup
	for name, c := range clients {
		ok := new(atomic.Int64)
		okBy[name] = ok
		c.Timeout = 5 * time.Second
		wg.Go(func() {
			defer c.CloseIdleConnections()
			for !stop.Load() {
				res, err := c.Get(url)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", res.Status)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, name+": "+err.Error())
					continue
				}
				ok.Add(1)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// Each client has been answered this many more times than before:
	// its traffic spans the moment in question, however slow the machine.
	const span = 20
	eachAnswered := func(what string) {
		t.Helper()
		from := map[string]int64{}
		for name, ok := range okBy {
			from[name] = ok.Load()
		}
		for name, ok := range okBy {
			if !waitFor(60*time.Second, func() bool { return ok.Load() >= from[name]+span || failed.Load() > 0 }) {
				t.Fatalf("%s: %s answered %d requests in 60s", what, name, ok.Load()-from[name])
			}
		}
	}
	eachAnswered("before the rotation")
	vol.Swap(second.CertPEM, second.KeyPEM)
	served := func() int64 {
		c, err := tls.Dial("tcp", e.app.addr, tlsCfg)
		if err != nil {
			t.Error(err)
			return 0
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if !waitFor(60*time.Second, func() bool { return served() == second.Serial }) {
		t.Fatalf("new connections get serial %d 60s after the rotation, want %d", served(), second.Serial)
	}
	eachAnswered("on the new certificate")
	stop.Store(true)
	wg.Wait()
	var total int64
	for _, ok := range okBy {
		total += ok.Load()
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed during the rotation; first: %v", n, n+total, firstErr.Load())
	}
	t.Logf("%d requests across the rotation, none failed", total)
}

// TestSIGHUPReloadsCertificates rewrites the certificate files with
// polling off: SIGHUP's reload serves the new certificate, and a bad file
// then keeps it, counted as a failed reload.
func TestSIGHUPReloadsCertificates(t *testing.T) {
	var next tlstest.Leaf
	var files config.Certificate
	e := startEdgeStack(t, func(cfg *config.Config, ca *tlstest.CA, dir string) {
		next = ca.Issue(dir, "next", []string{"api.example.test"}, tlstest.Options{})
		cfg.Server.TLS.ReloadInterval = 0
		files = cfg.Server.TLS.Certificates[0]
	})
	served := func() int64 {
		t.Helper()
		c, err := tls.Dial("tcp", e.app.addr, &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.test"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	before := served()
	write := func(cert, key []byte) {
		t.Helper()
		if err := os.WriteFile(files.CertFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files.KeyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(next.CertPEM, next.KeyPEM)
	if got := served(); got != before {
		t.Fatalf("certificate changed to %d without a reload or polling", got)
	}
	if err := e.app.reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != next.Serial {
		t.Fatalf("after SIGHUP's reload: serial %d, want %d", got, next.Serial)
	}
	write([]byte("-----BEGIN CERTIFICATE-----\ntruncated"), next.KeyPEM)
	if err := e.app.reload(); err != nil {
		t.Fatalf("a bad certificate failed the configuration reload: %v", err)
	}
	if got := served(); got != next.Serial {
		t.Fatalf("after a bad file: serial %d, want the last good %d", got, next.Serial)
	}
	if got := testutil.ToFloat64(e.app.edge.CertReloadCounter(false)); got != 1 {
		t.Fatalf("failed reloads counted %v, want 1", got)
	}
}

// waitFor reports whether cond became true within timeout, a bound on a
// hang only: a loaded machine makes the wait longer, never the test fail.
func waitFor(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
