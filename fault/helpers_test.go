package fault

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// keySecret is the key secret of every gateway the suite starts.
const keySecret = "fault-suite-key-secret-0123456789"

// binDir is where TestMain builds the binaries: one directory per test
// process, removed when it ends.
func binDir() string {
	return filepath.Join(os.TempDir(), "exgate-fault-"+strconv.Itoa(os.Getpid()))
}

// build builds the gateway and the reference backend once per test run,
// without the race detector (the subprocesses are what is under test,
// not instrumented), and returns their paths.
var build = sync.OnceValues(func() (binaries, error) {
	dir := binDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return binaries{}, err
	}
	b := binaries{exgate: filepath.Join(dir, "exgate"), sim: filepath.Join(dir, "exchange-sim")}
	for path, pkg := range map[string]string{b.exgate: "github.com/exgate/exgate/cmd/exgate", b.sim: "github.com/exgate/exgate/cmd/exchange-sim"} {
		cmd := exec.Command("go", "build", "-o", path, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return binaries{}, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return b, nil
})

// binaries are the paths of the built programs.
type binaries struct{ exgate, sim string }

func TestMain(m *testing.M) {
	code := m.Run()
	_ = os.RemoveAll(binDir())
	os.Exit(code)
}

// bins returns the built binaries or fails the test.
func bins(t *testing.T) binaries {
	t.Helper()
	b, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lockedBuffer is an io.Writer safe for concurrent use, holding a
// process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// process is a program started by a test, in its own process group,
// killed when the test ends (and, should the test binary die, by
// Pdeathsig).
type process struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// startProcess starts bin with args, env added to the environment.
func startProcess(t *testing.T, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s output (last 40 lines, access log left out):\n%s", name, lastLines(withoutAccessLog(p.out.String()), 40))
		}
	})
	return p
}

// kill ends the process with SIGKILL and waits for it.
func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logLine waits for a JSON log line whose "msg" is msg and returns it
// decoded.
func (p *process) logLine(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
				return m
			}
		}
		if p.exited() {
			t.Fatalf("%s exited before logging %q: %v\n%s", p.name, msg, p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", p.name, msg, timeout, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withoutAccessLog returns the lines of a process's output that are not
// exgate access log lines (JSON lines whose "msg" is "request").
func withoutAccessLog(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !isAccessLine(line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// isAccessLine reports whether line is an exgate access log line.
func isAccessLine(line string) bool {
	return strings.Contains(line, `"msg":"request"`)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// backend is a running reference backend (exchange-sim).
type backend struct {
	*process
	url string
}

// startBackend starts exchange-sim on a free loopback port.
func startBackend(t *testing.T) *backend {
	t.Helper()
	p := startProcess(t, "exchange-sim", nil, bins(t).sim, "-listen", "127.0.0.1:0")
	m := p.logLine(t, "listening", 20*time.Second)
	return &backend{process: p, url: "http://" + m["addr"].(string)}
}

// gateway is a running exgate.
type gateway struct {
	*process
	url   string // traffic listener
	admin string // admin listener, with scheme
}

// configHeader is the start of every gateway configuration: free
// loopback ports, the upstream (with any further upstream keys, one
// "key: value" each), no access log, and no concurrency limit to the
// backend: these tests hold hundreds of requests at a backend that does
// not answer, on purpose, which the limit would shed (overload_test.go
// tests the limit itself, with its own configuration). Tests append their own
// sections (server, limiter, routes, …).
func configHeader(upstream string, upstreamKeys ...string) string {
	return gatewayHeader(upstream, false, upstreamKeys...)
}

// configHeaderAccessLog is configHeader with the access log on (in the
// process's output), for tests that explain a failed request by its
// X-Request-ID; they read every line of their requests, so each client's
// share of refusal lines is off: their loads come from an address or two
// standing for many clients (the failover's hundred order clients share
// one), and the share has its own row in the adversarial table.
func configHeaderAccessLog(upstream string, upstreamKeys ...string) string {
	return gatewayHeader(upstream, true, upstreamKeys...)
}

// gatewayHeader is configHeader with the access log on or off.
func gatewayHeader(upstream string, access bool, upstreamKeys ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\nupstream:\n  url: %q\n", upstream)
	for _, k := range upstreamKeys {
		fmt.Fprintf(&b, "  %s\n", k)
	}
	fmt.Fprintf(&b, "log:\n  access: %t\n", access)
	if access {
		b.WriteString("  refusals_per_client: { rate: \"\" }\n")
	}
	b.WriteString("overload:\n  enabled: false\n")
	return b.String()
}

// accessToken signs in to the reference backend with its dev account.
func accessToken(t *testing.T, backendURL string) string {
	t.Helper()
	res, err := noKeepAlive().Post(backendURL+"/api/v1/usr/authenticate/", "application/json",
		strings.NewReader(`{"api_key":"dev","secret_key":"dev"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Access string `json:"access"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || v.Access == "" {
		t.Fatalf("authenticate: %d %v", res.StatusCode, err)
	}
	return v.Access
}

// startGatewayServing starts exgate with the configuration yaml, and env
// ("NAME=value") added to its environment, and waits until it serves,
// ready or not (its backend may be what the test broke).
func startGatewayServing(t *testing.T, yaml string, env ...string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "exgate.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "exgate", append([]string{"EXGATE_KEY_SECRET=" + keySecret}, env...), bins(t).exgate, "-config", path)
	m := p.logLine(t, "exgate started", 30*time.Second)
	return &gateway{process: p, url: "http://" + m["listen"].(string), admin: "http://" + m["admin_listen"].(string)}
}

// startGateway starts exgate with the configuration yaml (and env added
// to its environment) and waits until it serves and is ready.
func startGateway(t *testing.T, yaml string, env ...string) *gateway {
	t.Helper()
	g := startGatewayServing(t, yaml, env...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := noKeepAlive().Get(g.admin + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return g
			}
			err = fmt.Errorf("%d %s", res.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("exgate not ready within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noKeepAlive returns a client that opens a connection per request, so
// that it holds no connection (and no server goroutine) between requests.
func noKeepAlive() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// newClient returns a client with a keep-alive pool for conns
// connections; its idle connections are closed when the test ends. Like
// every client of exgate should (docs/operations.md, "Keep-alive in front
// of exgate"), it closes an idle connection before exgate would: a POST
// written into a connection exgate has just closed fails with a bare EOF
// (TestKeepAliveIdleTimeout). exgate closes a connection that has carried
// a request after server.idle_timeout (2m by default), and one that has
// carried none yet after server.read_header_timeout (5s by default): its
// bound on a connection that sends no header. Go's transport pools such
// connections: one it dialed for a request that another connection,
// freed meanwhile, then carried. So its idle timeout, clientIdleTimeout,
// is below read_header_timeout. Its connections are traced
// (tracedConn), so that a request that gets no answer tells what its
// connection carried before.
func newClient(t *testing.T, conns int) *http.Client {
	d := &net.Dialer{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tracedConn{Conn: c, dialed: time.Now()}, nil
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
		IdleConnTimeout: clientIdleTimeout, DialContext: dial}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// clientIdleTimeout is how long newClient's clients keep an idle
// connection: a fifth of server.read_header_timeout's default (5s), the
// earliest exgate closes one (a connection that has carried no request
// yet). Go's transport never hands out a connection idle for longer,
// whenever its timer fires; the margin is for the time between exgate's
// accepting a connection, when its bound starts, and the client's
// pooling it (a loaded machine's scheduling). With the 90s this client
// had before, exgate closed 0 to 9 connections of each failover run's load
// (TestSentinelFailover, TestClusterFailover under -race at load 12: 16
// in 4 runs), each dialed in the load's first burst, pooled without
// having carried a request and closed 5s after; CI on 8ecf11d failed
// with two orders answered by a bare EOF on two connections reused after
// 4.98s idle, at that moment. With 1s, none was closed by exgate in 20
// runs beside stress-ng at load 15 (2 to 82 such connections a run,
// closed by the client first).
const clientIdleTimeout = time.Second

// tracedConn is a client connection of newClient's that keeps what do
// needs to explain a request that got no answer on it: when it was
// dialed, how many requests it carried, the last one's answer, and when
// a read first met the server's end of it (io.EOF).
type tracedConn struct {
	net.Conn
	dialed time.Time
	mu     sync.Mutex
	sent   int       // requests sent on it (do's GotConn)
	last   string    // the last answer recorded on it: X-Request-ID and status
	lastAt time.Time // when that answer was read
	eofAt  time.Time // when a read first returned io.EOF, or zero
}

func (c *tracedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.mu.Lock()
		if c.eofAt.IsZero() {
			c.eofAt = time.Now()
		}
		c.mu.Unlock()
	}
	return n, err
}

// took counts a request sent on c and returns how many c carried before.
func (c *tracedConn) took() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent++
	return c.sent - 1
}

// answered records a, an answer read on c.
func (c *tracedConn) answered(a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.lastAt = strings.TrimSpace(fmt.Sprintf("%s %d %s", a.id, a.status, a.code)), time.Now()
}

// history describes c for a request sent on it after before others,
// at its end (now).
func (c *tracedConn) history(before int, now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "dialed %v before", now.Sub(c.dialed).Round(time.Millisecond))
	if before == 0 {
		b.WriteString(", it had carried no request")
	} else {
		fmt.Fprintf(&b, ", it had carried %d requests", before)
		if c.last != "" {
			fmt.Fprintf(&b, ", the last answer recorded %s, %v before", c.last, now.Sub(c.lastAt).Round(time.Millisecond))
		}
	}
	if !c.eofAt.IsZero() {
		fmt.Fprintf(&b, "; the server's close read %v before", now.Sub(c.eofAt).Round(time.Microsecond))
	}
	return b.String()
}

// metric returns the sum of the samples of the named metric on the
// gateway's /metrics whose labels contain every one of labels (each
// written as name="value").
func (g *gateway) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return sumMetric(g.scrape(t), name, labels...)
}

// scrape returns the gateway's /metrics text: one scrape, for figures
// that must be read at one instant (a histogram's count and buckets).
func (g *gateway) scrape(t *testing.T) string {
	t.Helper()
	res, err := noKeepAlive().Get(g.admin + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// sumMetric sums the samples of name in a Prometheus text exposition
// whose label sets contain all of labels.
func sumMetric(text, name string, labels ...string) float64 {
	total := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// answer is one HTTP exchange as a test saw it.
type answer struct {
	id      string // the X-Request-ID the test sent, or ""
	status  int
	code    string // the "code" of an error body, or ""
	err     error  // transport error, or a malformed error answer
	latency time.Duration
	body    []byte
	// rateLimit is the RateLimit header (limiter.headers: ietf), or "".
	rateLimit string
	// replayed is whether the answer is a replay of an order's first
	// answer (Idempotent-Replayed: true).
	replayed bool
	// conn says which connection a request that got no answer went out
	// on: a new one, or one reused after how long idle, and its local
	// address; "" when it got an answer.
	conn string
}

// do sends req and reads the whole answer. Any answer with status ≥ 400
// must be exgate's JSON error: Content-Type application/json, an
// X-Request-ID, and a body {"detail": string, "code": string}; anything
// else is recorded as an error.
func do(c *http.Client, req *http.Request) answer {
	var got httptrace.GotConnInfo
	before := 0
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		got = info
		if tc, ok := info.Conn.(*tracedConn); ok {
			before = tc.took()
		}
	}}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	start := time.Now()
	res, err := c.Do(req)
	a := readAnswer(req.Header.Get("X-Request-Id"), start, res, err)
	tc, traced := got.Conn.(*tracedConn)
	switch {
	case err != nil:
		a.conn = connInfo(got)
		if traced {
			a.conn += "; " + tc.history(before, time.Now())
		}
	case traced:
		tc.answered(a)
	}
	return a
}

// connInfo describes the connection a request went out on, for a request
// that got no answer: a connection exgate closed while the client reused
// it is told apart from a new one. Go's transport reports a pooled
// connection as reused even when it has carried no request (tracedConn
// tells).
func connInfo(info httptrace.GotConnInfo) string {
	switch {
	case info.Conn == nil:
		return "no connection"
	case info.Reused:
		return fmt.Sprintf("reused connection from %v, idle %v before it (was idle: %v)",
			info.Conn.LocalAddr(), info.IdleTime.Round(time.Microsecond), info.WasIdle)
	}
	return fmt.Sprintf("new connection from %v", info.Conn.LocalAddr())
}

// readAnswer reads the answer res (or the transport error err) to a
// request with X-Request-ID id sent at start, as do does.
func readAnswer(id string, start time.Time, res *http.Response, err error) answer {
	if err != nil {
		return answer{id: id, err: err, latency: time.Since(start)}
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	a := answer{id: id, status: res.StatusCode, latency: time.Since(start), body: body,
		rateLimit: res.Header.Get("Ratelimit"), replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	if err != nil {
		a.err = fmt.Errorf("reading the body of a %d: %w", res.StatusCode, err)
		return a
	}
	if res.StatusCode >= 400 {
		var e struct {
			Detail *string `json:"detail"`
			Code   *string `json:"code"`
		}
		switch {
		case !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"):
			a.err = fmt.Errorf("%d with Content-Type %q: %q", res.StatusCode, res.Header.Get("Content-Type"), body)
		case json.Unmarshal(body, &e) != nil || e.Detail == nil || e.Code == nil:
			a.err = fmt.Errorf("%d without the error shape: %q", res.StatusCode, body)
		case res.Header.Get("X-Request-Id") == "":
			a.err = fmt.Errorf("%d without X-Request-ID: %q", res.StatusCode, body)
		default:
			a.code = *e.Code
		}
	}
	return a
}

// get builds a GET request, with header name/value pairs.
func get(url string, header ...string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// tally counts answers by status and error code, keeping a few errors
// and the X-Request-ID of every one.
type tally struct {
	mu      sync.Mutex
	byKey   map[string]int // "200", "503 rate_limit_unavailable", …
	errs    []error
	nErrs   int
	failed  []answer // the answers with an error that carried an X-Request-ID
	total   int
	slowest time.Duration
}

func (ty *tally) add(a answer) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	if ty.byKey == nil {
		ty.byKey = map[string]int{}
	}
	ty.total++
	ty.slowest = max(ty.slowest, a.latency)
	if a.err != nil {
		ty.nErrs++
		if len(ty.errs) < 5 {
			ty.errs = append(ty.errs, a.err)
		}
		if a.id != "" {
			ty.failed = append(ty.failed, a)
		}
		return
	}
	k := strconv.Itoa(a.status)
	if a.code != "" {
		k += " " + a.code
	}
	ty.byKey[k]++
}

func (ty *tally) String() string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return fmt.Sprintf("%d answers %v, %d errors %v, slowest %v", ty.total, ty.byKey, ty.nErrs, ty.errs, ty.slowest)
}

// load runs workers goroutines that each send next(worker, i) in a loop
// until ctx ends, tallying the answers. It returns when they stop.
func load(ctx context.Context, c *http.Client, workers int, next func(w, i int) *http.Request, ty *tally) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req := next(w, i).WithContext(ctx)
				a := do(c, req)
				if ctx.Err() != nil && a.err != nil {
					return // cut off by the end of the load, not by the gateway
				}
				ty.add(a)
			}
		}()
	}
	wg.Wait()
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
