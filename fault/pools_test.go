package fault

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/sim"
)

// The adversarial table of docs/pools.md: for every pool exgate shares
// between clients, an attacker — one address without an account, one
// account, or three accounts — takes all of it it can, while a victim
// account places, cancels and reads. Each row asserts behaviour, never
// timings:
//
//   - every request of the victim succeeds (the backend's own answer);
//   - the attacker is refused for itself only: each of its refusals is
//     exgate's own, in the one error shape, with one of the row's codes,
//     and the row's metric counts them;
//   - exgate's resident memory grows by at most the row's bound.
//
// A new pool comes with its rows here (GUIDE.md, "Fair shares").

// attackerKind is who attacks a pool.
type attackerKind int

const (
	// oneAddress is one client address without an account: invented
	// tokens, or none.
	oneAddress attackerKind = iota
	// oneAccount is one verified account, from its own address.
	oneAccount
	// threeAccounts is three verified accounts, each from its own
	// address.
	threeAccounts
	// tenAddresses is ten client addresses without an account, each
	// with invented tokens.
	tenAddresses
)

func (k attackerKind) String() string {
	return [...]string{"one address", "one account", "three accounts", "ten addresses"}[k]
}

// Client addresses on loopback (Linux routes all of 127/8 to lo): the
// gateway keys its shares by them.
const (
	victimAddr  = "127.0.0.10"
	anonAddr    = "127.0.0.20"
	anonAddrs   = "127.0.0.3" // + the address's number: 127.0.0.30 … 39 (tenAddresses)
	accountAddr = "127.0.0.2" // + the attacker's number: 127.0.0.21, 22, 23
)

// poolAccounts are the reference backend's accounts (api key = secret
// key): the victim's and the attackers'.
var poolAccounts = []string{"victim", "attacker1", "attacker2", "attacker3"}

// poolRow is one row of the table: a pool, who attacks it and how.
type poolRow struct {
	pool     string // the pool, as docs/pools.md names it
	attacker attackerKind
	// config is the gateway's configuration after the table's header
	// (which writes listen, admin_listen, upstream and log): its server,
	// overload, … sections. limiter and identity are lines under those
	// sections, which the header writes.
	config, limiter, identity string
	// log turns the access log on (the table's header turns it off) and
	// holds lines under the log section.
	log string
	// verify has accounts verified (identity.verify) although the
	// attacker is an address without one.
	verify bool
	// tls serves the row over TLS, HTTP/2 offered: its config names the
	// certificate as CERT_FILE and KEY_FILE.
	tls bool
	// attack takes all of the pool it can as the attackers of a, until
	// ctx ends, adding each of their answers to a.answers.
	attack func(ctx context.Context, t *testing.T, r *poolRun, a *attack)
	// holding reports that the attackers hold what they could take: the
	// victim starts then.
	holding func(t *testing.T, r *poolRun, a *attack) bool
	// reset, when set, clears what attack and holding count across runs
	// of the row (go test -count runs it again): run calls it first.
	reset func()
	// refused are the codes the attackers' refusals may carry; empty
	// when the row's attackers take nothing shared and are refused
	// nothing.
	refused []string
	// metric, when set, is a counter that must count the attackers'
	// refusals: its series whose label sets contain labels.
	metric string
	labels []string
	// maxGrowth bounds the growth of exgate's resident memory over the
	// row, in bytes.
	maxGrowth int64
	// check, when set, checks what else the row bounds, once the
	// attackers stopped.
	check func(t *testing.T, r *poolRun)
	// victimAdmin has the victim, besides its trades, scrape /metrics and
	// ask /healthz and /readyz on the admin listener, as Prometheus and
	// the probes do (poolRun.victimAdmin).
	victimAdmin bool
	// fleet lists the backend's instances (poolEnv.instances: three
	// servers of the one reference backend) in upstream.urls instead of
	// its one url, with upstream holding lines under that section.
	fleet    bool
	upstream string
	// refusing adds to the fleet an instance whose connects are refused
	// (poolEnv.refusing), which the row's upstream lines keep in the
	// rotation.
	refusing bool
}

// poolRows is the table.
var poolRows = []poolRow{}

// TestPools runs the adversarial table against the real exgate, Redis and
// the reference backend.
func TestPools(t *testing.T) {
	env := startPoolEnv(t)
	for _, row := range poolRows {
		t.Run(row.pool+"/"+row.attacker.String(), func(t *testing.T) { env.run(t, row) })
	}
}

// poolEnv is what the rows share: one Redis, and the reference backend
// with its accounts behind a front that parses every body before the
// backend's view (as a framework does) and holds the expensive reads
// (heldPaths) until the row ends.
type poolEnv struct {
	redis   *redistest.Server
	backend string
	// instances are three servers of the backend (the first is backend),
	// for a row's fleet.
	instances []string
	tokens    map[string]string // access tokens by account
	front     *poolFront
	// refusing is an address whose connects are refused, for a row's
	// fleet (poolRow.refusing).
	refusing string
	// tls trusts the certificate of a row over TLS (poolRow.tls), whose
	// files are leaf's.
	tls  *tls.Config
	leaf tlstest.Leaf
}

// heldPaths are the expensive reads: the backend answers them only when
// the row ends. The victim never sends them.
var heldPaths = []string{"/api/v1/odr/fills/", "/api/v1/mkt/tickers/"}

// poolFront is the backend's front.
type poolFront struct {
	h       http.Handler
	mu      sync.Mutex
	release chan struct{} // closed to answer the held reads
	held    atomic.Int64  // held reads under way
	// trickled counts the requests on trickledPaths the backend has seen
	// (their heads: counted before their bodies are read).
	trickled atomic.Int64
	// conns is the state of each of the backend's connections
	// (http.ConnState), for activeConns.
	conns sync.Map // net.Conn → http.ConnState
	// settle holds and answers the settlements row's orders
	// (pools_settle_test.go).
	settle settleFront
}

// trickledPaths are the paths of the trickled bodies' attack
// (trickledBodies). The victim never sends them.
var trickledPaths = []string{"/api/v1/usr/authenticate/", "/api/v1/usr/refresh_token/", "/api/v1/wlt/transfer/"}

// connState records the state of a backend connection.
func (f *poolFront) connState(c net.Conn, s http.ConnState) {
	if s == http.StateClosed || s == http.StateHijacked {
		f.conns.Delete(c)
		return
	}
	f.conns.Store(c, s)
}

// activeConns returns how many of the backend's connections carry a
// request: from its first byte to its answer (http.StateActive).
func (f *poolFront) activeConns() int {
	n := 0
	f.conns.Range(func(_, s any) bool {
		if s == http.StateActive {
			n++
		}
		return true
	})
	return n
}

func (f *poolFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if slices.Contains(trickledPaths, r.URL.Path) {
		f.trickled.Add(1)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // a broken request: nothing to answer
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	if r.Method == http.MethodPost && r.URL.Path == "/api/v1/odr/orders/" && strings.Contains(string(body), `"`+poisonAmount+`"`) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError) // an order the matching engine chokes on (pools_fleet_test.go)
		_, _ = io.WriteString(w, `{"detail":"Internal error.","code":"`+poisonCode+`"}`)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/api/v1/odr/orders/" && strings.Contains(string(body), `"`+settleAmount+`"`) {
		f.settle.serve(w, r) // an order Redis goes away under (pools_settle_test.go)
		return
	}
	if strings.HasPrefix(r.Header.Get("Authorization"), sprayedPrefix) && r.Method == http.MethodPost {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable) // an outage the invented tokens' orders meet (pools_spray_test.go)
		_, _ = io.WriteString(w, `{"detail":"The exchange is unavailable.","code":"`+outageCode+`"}`)
		return
	}
	if slices.Contains(heldPaths, r.URL.Path) {
		f.mu.Lock()
		release := f.release
		f.mu.Unlock()
		f.held.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		f.held.Add(-1)
	}
	f.h.ServeHTTP(w, r)
}

// hold starts holding the expensive reads; the returned function answers
// them.
func (f *poolFront) hold() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan struct{})
	f.release = c
	return sync.OnceFunc(func() { close(c) })
}

func startPoolEnv(t *testing.T) *poolEnv {
	t.Helper()
	creds := map[string]string{}
	for _, a := range poolAccounts {
		creds[a] = a
	}
	front := &poolFront{h: sim.New(sim.Options{Credentials: creds}), release: make(chan struct{})}
	close(front.release)
	var instances []string
	for range 3 {
		bs := httptest.NewUnstartedServer(front)
		bs.Config.ConnState = front.connState
		bs.Start()
		t.Cleanup(bs.Close)
		instances = append(instances, bs.URL)
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir)
	env := &poolEnv{redis: redistest.Start(t), backend: instances[0], instances: instances, tokens: map[string]string{}, front: front,
		tls: &tls.Config{RootCAs: ca.Pool}, leaf: ca.Issue(dir, "exgate", []string{"127.0.0.1"}, tlstest.Options{}),
		refusing: unreachable.Refused(t)}
	for _, a := range poolAccounts {
		env.tokens[a] = signIn(t, env.backend, a)
	}
	return env
}

// signIn signs in to the reference backend as account.
func signIn(t *testing.T, backendURL, account string) string {
	t.Helper()
	res, err := noKeepAlive().Post(backendURL+"/api/v1/usr/authenticate/", "application/json",
		strings.NewReader(fmt.Sprintf(`{"api_key":%q,"secret_key":%q}`, account, account)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct{ Access string }
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || v.Access == "" {
		t.Fatalf("sign in as %s: %d %v", account, res.StatusCode, err)
	}
	return v.Access
}

// poolRun is one row's gateway and its victim.
type poolRun struct {
	env    *poolEnv
	g      *gateway
	host   string
	url    string // the traffic listener, https:// for a row over TLS
	victim *http.Client
	// victimRequests is how many requests exgate had seen when the
	// attack began.
	victimRequests int64
}

// attack is the attackers of one row and what they got.
type attack struct {
	kind    attackerKind
	addrs   []string // the attackers' client addresses
	tokens  []string // their accounts' tokens, "" for the address without one
	answers tally
	// sent and answered count the attackers' requests, for holding.
	sent, answered atomic.Int64
	last           atomic.Int64 // the value settled saw last
}

// attackers returns the attackers of kind k.
func (env *poolEnv) attackers(k attackerKind) *attack {
	a := &attack{kind: k}
	a.last.Store(-1)
	switch k {
	case oneAddress:
		a.addrs, a.tokens = []string{anonAddr}, []string{""}
	case tenAddresses:
		for i := range 10 {
			a.addrs, a.tokens = append(a.addrs, anonAddrs+strconv.Itoa(i)), append(a.tokens, "")
		}
	default:
		n := 1
		if k == threeAccounts {
			n = 3
		}
		for i := 1; i <= n; i++ {
			a.addrs = append(a.addrs, accountAddr+strconv.Itoa(i))
			a.tokens = append(a.tokens, env.tokens["attacker"+strconv.Itoa(i)])
		}
	}
	return a
}

// poolConfig is a row's gateway configuration: the table's header, then
// the row's sections. Accounts are verified (identity.verify) unless the
// attacker is an address without one, whose invented tokens would then be
// refused before they reach anything shared: its rows run with opaque
// tokens, the default, unless they verify tokens on purpose.
func (env *poolEnv) poolConfig(row poolRow) string {
	var b strings.Builder
	upstream := fmt.Sprintf("  url: %q\n", env.backend)
	if row.fleet {
		var urls []string
		for _, u := range env.instances {
			urls = append(urls, strconv.Quote(u))
		}
		if row.refusing {
			urls = append(urls, strconv.Quote("http://"+env.refusing))
		}
		upstream = fmt.Sprintf("  urls: [%s]\n%s", strings.Join(urls, ", "), row.upstream)
	}
	fmt.Fprintf(&b, "listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\nupstream:\n%slog:\n  access: %t\n%s", upstream, row.log != "", row.log)
	fmt.Fprintf(&b, "limiter:\n  redis:\n    addrs: [%q]\n    timeout: 500ms\n%s", env.redis.Addr, row.limiter)
	fmt.Fprintf(&b, "identity:\n  verify: %t\n%s", (row.attacker != oneAddress && row.attacker != tenAddresses) || row.verify, row.identity)
	b.WriteString(strings.NewReplacer("CERT_FILE", env.leaf.CertFile, "KEY_FILE", env.leaf.KeyFile).Replace(row.config))
	return b.String()
}

// holdWithin bounds how long a row's attackers take to hold its pool.
const holdWithin = 2 * time.Minute

// run runs one row: a fresh Redis database and gateway, the victim's
// warm-up, the attack, the victim's trades while the attackers hold the
// pool, and the checks.
func (env *poolEnv) run(t *testing.T, row poolRow) {
	if row.reset != nil {
		row.reset()
	}
	if _, err := env.redis.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	release := env.front.hold()
	defer release()
	g := startGateway(t, env.poolConfig(row), "EXGATE_JWT_SECRET="+sim.DevSecret)
	r := &poolRun{env: env, g: g, host: strings.TrimPrefix(g.url, "http://"), url: g.url, victim: clientFrom(t, victimAddr, 4)}
	if row.tls {
		r.url, r.victim = "https://"+r.host, clientOver(t, victimAddr, 4, env.tls)
	}
	if bad := r.victimTrades(); len(bad) > 0 {
		t.Fatalf("the victim's trades before any attack: %v", bad)
	}
	r.victimRequests = r.seen(t)
	pid := g.cmd.Process.Pid
	base := vmRSS(t, pid)
	var peak atomic.Int64
	stopRSS := watchRSS(t, pid, &peak)
	defer stopRSS()

	a := env.attackers(row.attacker)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); row.attack(ctx, t, r, a) }()
	// The bound only ends a hang: an attack that is a fixed number of
	// requests (the caches' rows: 3000 tokens an attacker, each signed
	// and verified) took over 20s on a loaded machine.
	if !eventually(holdWithin, func() bool { return row.holding(t, r, a) }) {
		t.Logf("metrics: %s", grepLines(g.scrape(t), "exgate_inflight", "exgate_body", "exgate_overload_in"))
		cancel()
		wg.Wait()
		stopRSS()
		t.Fatalf("the attackers did not come to hold the pool within %v: %d sent, %d answered: %s", holdWithin, a.sent.Load(), a.answered.Load(), &a.answers)
	}
	bad := r.victimTrades()
	if row.victimAdmin {
		bad = append(bad, r.victimAdmin()...)
	}
	cancel()
	release()
	wg.Wait()
	stopRSS()

	t.Logf("attackers (%v): %s", row.attacker, &a.answers)
	t.Logf("exgate VmRSS %d MiB at the start, peak +%d MiB", base>>20, (peak.Load()-base)>>20)
	if len(bad) > 0 {
		t.Errorf("the victim's requests failed while %v held %s: %v", row.attacker, row.pool, bad)
	}
	r.checkRefusals(t, row, a)
	if grew := peak.Load() - base; grew > row.maxGrowth {
		t.Errorf("exgate's resident memory grew by %d MiB, want at most %d MiB", grew>>20, row.maxGrowth>>20)
	}
	if row.check != nil {
		row.check(t, r)
	}
}

// checkRefusals checks that the attackers were refused only with the
// row's codes, in exgate's error shape, and that the row's metric counts
// the refusals.
func (r *poolRun) checkRefusals(t *testing.T, row poolRow, a *attack) {
	a.answers.mu.Lock()
	defer a.answers.mu.Unlock()
	if len(a.answers.errs) > 0 {
		t.Errorf("attackers' answers outside exgate's error shape: %v", a.answers.errs)
	}
	refusals := 0
	for k, n := range a.answers.byKey {
		status, code, _ := strings.Cut(k, " ")
		if code == "" || status < "4" {
			continue // the backend's own answer
		}
		if !slices.Contains(row.refused, code) {
			t.Errorf("%d attackers' requests refused %s, want only %v", n, k, row.refused)
		}
		refusals += n
	}
	if len(row.refused) > 0 && refusals == 0 {
		t.Errorf("the attackers took all they could and were never refused (%v): %v", row.refused, a.answers.byKey)
	}
	if row.metric != "" && refusals > 0 && r.g.metric(t, row.metric, row.labels...) == 0 {
		t.Errorf("%s counts none of the attackers' %d refusals", row.metric, refusals)
	}
}

// watchRSS samples the resident memory of pid into peak until the
// returned function is called.
func watchRSS(t *testing.T, pid int, peak *atomic.Int64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			peak.Store(max(peak.Load(), vmRSS(t, pid)))
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return sync.OnceFunc(func() { close(done); <-stopped })
}

// clientFrom returns a client whose connections come from the loopback
// address ip, with a pool of conns connections.
func clientFrom(t *testing.T, ip string, conns int) *http.Client {
	return clientOver(t, ip, conns, nil)
}

// clientOver is clientFrom over TLS with tc (HTTP/2 through ALPN), or
// over plain HTTP/1.1 when tc is nil. Like newClient's, its idle
// connections are closed after clientIdleTimeout, below exgate's
// server.read_header_timeout: the attackers' workers send orders at once
// (the duplicate answers' and settlements' rows), and a connection one of
// them dialed while another's was freed goes to the pool having carried
// no request, which exgate closes at read_header_timeout; an order
// written into it then got a bare EOF, an answer outside exgate's error
// shape.
func clientOver(t *testing.T, ip string, conns int, tc *tls.Config) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		DisableCompression: true, IdleConnTimeout: clientIdleTimeout, ForceAttemptHTTP2: tc != nil}
	if tc != nil {
		tr.TLSClientConfig = tc.Clone() // the transport sets its protocols in it
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// dialFrom opens a connection from the loopback address ip to host.
func dialFrom(ip, host string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", host)
}

// victimOrder is a resting limit order of the victim (far under the
// market), with an identifier.
func victimOrder(id string) string {
	return `{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"0.001","identifier":"` + id + `"}`
}

var victimRound atomic.Int64

// victimTrades is what the victim account does while the attackers hold a
// pool: it reads the markets and its open orders, places an order and a
// bulk of two (each with a new identifier), and cancels them, the order
// alone and the bulk in bulk. It returns each request that did not get
// the backend's success.
func (r *poolRun) victimTrades() []string {
	var bad []string
	send := func(method, path, body string, want int) []byte {
		req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+r.env.tokens["victim"])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		a := do(r.victim, req)
		if a.err != nil || a.status != want {
			bad = append(bad, fmt.Sprintf("%s %s: %d %s %v", method, path, a.status, a.code, a.err))
			return nil
		}
		return a.body
	}
	n := victimRound.Add(1)
	send("GET", "/api/v1/mkt/markets/", "", 200)
	send("GET", "/api/v1/odr/orders/?state=active", "", 200)
	var one struct{ ID int64 }
	if b := send("POST", "/api/v1/odr/orders/", victimOrder(fmt.Sprintf("v%d-a", n)), 201); b != nil {
		_ = json.Unmarshal(b, &one)
	}
	var two struct{ Orders []struct{ ID int64 } }
	if b := send("POST", "/api/v1/odr/orders/bulk/", "["+victimOrder(fmt.Sprintf("v%d-b", n))+","+victimOrder(fmt.Sprintf("v%d-c", n))+"]", 201); b != nil {
		_ = json.Unmarshal(b, &two)
	}
	if one.ID != 0 {
		send("DELETE", "/api/v1/odr/orders/"+strconv.FormatInt(one.ID, 10)+"/", "", 200)
	}
	if o := two.Orders; len(o) == 2 {
		send("POST", "/api/v1/odr/orders/bulk/", fmt.Sprintf(`{"ids":["%d","%d"]}`, o[0].ID, o[1].ID), 200)
	} else {
		bad = append(bad, fmt.Sprintf("bulk placement: %d orders placed, want 2", len(o)))
	}
	return bad
}

// Configurations of the rows: a small body budget and a fixed backend
// limit, so that a few hundred requests take all of either; a read
// timeout longer than any row.
const (
	bodyBudgetConfig = "server:\n  max_buffered_bytes: 4MiB\n  read_timeout: 60s\n"
	slotsConfig      = "server:\n  read_timeout: 60s\noverload:\n  fixed_limit: 16\n"
)

func init() {
	for _, k := range []attackerKind{oneAddress, oneAccount, threeAccounts} {
		poolRows = append(poolRows,
			poolRow{pool: "request-body budget", attacker: k, config: bodyBudgetConfig,
				attack: heldBulkBodies, holding: bodiesHeld,
				refused: []string{"server_busy"}, metric: "exgate_body_budget_refusals_total", maxGrowth: 64 << 20},
			poolRow{pool: "backend slots and connections, trickled bodies", attacker: k, config: slotsConfig,
				attack: trickledBodies, holding: bodiesTrickling, maxGrowth: 64 << 20, check: noTrickledRequest},
			poolRow{pool: "backend slots and queue", attacker: k, config: slotsConfig,
				attack: heldReads, holding: readsHeld,
				refused: []string{"overloaded", "throttled"}, metric: "exgate_overload_shed_total", maxGrowth: 64 << 20},
		)
	}
}

// bodyConns is how many bulk bodies each attacker holds open: 96 of 64 KiB
// are 6 MiB, more than the 4 MiB budget.
const bodyConns = 96

// heldBulkBodies is the attack of the issue's first "Why": each attacker
// opens bodyConns connections, each sending the head of a bulk
// (Content-Length: 65536) and all of its body but the last byte, and holds
// it until exgate answers or the row ends. The address without an account
// invents a token per connection.
func heldBulkBodies(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	body := "[" + strings.Repeat(" ", 65534)
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		for j := range bodyConns {
			tok := a.tokens[i]
			if tok == "" {
				tok = fmt.Sprintf("invented-%d-%d", i, j)
			}
			head := "POST /api/v1/odr/orders/bulk/ HTTP/1.1\r\nHost: " + r.host + "\r\nAuthorization: Bearer " + tok +
				"\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n"
			wg.Add(1)
			go func() { defer wg.Done(); heldRequest(ctx, r, a, addr, head, body) }()
		}
	}
	wg.Wait()
}

// heldRequest sends head and body from addr on a connection of its own
// and waits for exgate's answer, tallied, or for ctx to end.
func heldRequest(ctx context.Context, r *poolRun, a *attack, addr, head, body string) {
	sendOn(ctx, r, a, addr, head, body, false)
}

// sendOn sends head and body from addr on a connection of its own and
// waits for exgate's answer, tallied, or for ctx to end; with keep, the
// connection is then kept open until ctx ends.
func sendOn(ctx context.Context, r *poolRun, a *attack, addr, head, body string, keep bool) {
	conn, err := dialFrom(addr, r.host)
	if err != nil {
		a.answers.add(answer{err: err})
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	start := time.Now()
	_, _ = io.WriteString(conn, head+body) // an error is exgate's answer, closing: read it below
	a.sent.Add(1)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if ctx.Err() != nil {
		return // the row ended
	}
	a.answers.add(readAnswer("", start, res, err))
	a.answered.Add(1)
	if keep {
		<-ctx.Done()
	}
}

// bodiesHeld reports that every attacker's body was sent and is held by
// exgate or answered, and that exgate holds them as it will: the bytes
// it buffers no longer move.
func bodiesHeld(t *testing.T, r *poolRun, a *attack) bool {
	n := int64(len(a.addrs) * bodyConns)
	return a.sent.Load() == n && r.seen(t) >= r.victimRequests+n && a.settled(r.g.metric(t, "exgate_body_buffered_bytes"))
}

// seen returns how many requests exgate has read the head of: those in
// flight and those answered.
func (r *poolRun) seen(t *testing.T) int64 {
	text := r.g.scrape(t)
	return int64(sumMetric(text, "exgate_inflight_requests") + sumMetric(text, "exgate_requests_total"))
}

// settled reports whether v is the value it had at the previous call.
func (a *attack) settled(v float64) bool {
	prev := a.last.Swap(int64(v))
	return prev == int64(v)
}

// trickleConns is how many trickled bodies each attacker holds: the
// address's allowance on the two sign-in routes (20 and 60 a minute),
// and as many for an account.
const trickleConns = 80

// trickledBodies is the attack of the issue's third "Why": each attacker
// sends trickleConns requests whose bodies exgate does not validate
// (trickledPaths: the sign-in routes for the address, a wallet read for
// an account, which the default table serves to a GET alone), each with the first byte of its 64-byte body, and holds
// them. On a backend with a worker per request (gunicorn's sync workers),
// a body forwarded as it arrives would hold a worker and a connection
// each; exgate reads every body whole first.
func trickledBodies(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	r.env.front.trickled.Store(0) // the accounts' sign-ins, when the table started
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		for j := range trickleConns {
			// An account's body goes on a wallet read: the default
			// table refuses a wallet write (405) before reading its body.
			method, path, auth := "GET ", trickledPaths[2], "Authorization: Bearer "+a.tokens[i]+"\r\n"
			if a.tokens[i] == "" {
				method, path, auth = "POST ", trickledPaths[1], ""
				if j < 20 {
					path = trickledPaths[0]
				}
			}
			head := method + path + " HTTP/1.1\r\nHost: " + r.host + "\r\n" + auth +
				"Content-Type: application/json\r\nContent-Length: 64\r\n\r\n"
			wg.Add(1)
			go func() { defer wg.Done(); heldRequest(ctx, r, a, addr, head, "{") }()
		}
	}
	wg.Wait()
}

// bodiesTrickling reports that exgate holds every trickled request and
// that the body bytes it holds no longer move. Then, before the victim
// starts, the backend has seen none of them, no connection to it carries
// a request, and they hold no backend slot.
func bodiesTrickling(t *testing.T, r *poolRun, a *attack) bool {
	n := int64(len(a.addrs) * trickleConns)
	if a.sent.Load() != n || r.seen(t) < r.victimRequests+n || !a.settled(r.g.metric(t, "exgate_body_buffered_bytes")) {
		return false
	}
	if got, active, slots := r.env.front.trickled.Load(), r.env.front.activeConns(), r.g.metric(t, "exgate_overload_in_flight"); got != 0 || active != 0 || slots != 0 {
		t.Errorf("while %d bodies trickle: the backend has seen %d of their requests, %d of its connections carry a request, %v backend slots are held; want none",
			n, got, active, slots)
	}
	return true
}

// noTrickledRequest checks that no trickled request reached the backend,
// although the attackers cut their bodies off when the row ended.
func noTrickledRequest(t *testing.T, r *poolRun) {
	if got := r.env.front.trickled.Swap(0); got != 0 {
		t.Errorf("the backend saw %d requests whose bodies never arrived whole", got)
	}
}

// readWorkers is how many requests each attacker keeps under way.
const readWorkers = 64

// heldReads takes the backend's slots with expensive reads the backend
// holds (heldPaths): each attacker keeps readWorkers of them under way,
// sending another as soon as one is answered. An account reads its fills,
// the address without one the tickers.
func heldReads(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		c := clientFrom(t, addr, readWorkers)
		path, header := heldPaths[0], []string{"Authorization", "Bearer " + a.tokens[i]}
		if a.tokens[i] == "" {
			path, header = heldPaths[1], nil
		}
		for range readWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					a.sent.Add(1)
					ans := do(c, get(r.g.url+path, header...).WithContext(ctx))
					if ctx.Err() != nil {
						return
					}
					a.answers.add(ans)
					a.answered.Add(1)
					select { // refused: ask again a little later
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}()
		}
	}
	wg.Wait()
}

// readsHeld reports that the attackers hold backend slots, no longer
// move, and were refused the rest.
func readsHeld(t *testing.T, r *poolRun, a *attack) bool {
	held := r.env.front.held.Load()
	return held > 0 && a.answered.Load() > 0 && a.settled(float64(held))
}

func grepLines(s string, prefixes ...string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				b.WriteString(line)
			}
		}
	}
	return b.String()
}

// The issue's first attack over HTTP/2, by an account: streams of several
// connections each hold the start of a bulk's body.
const (
	h2Conns   = 4   // connections per attacker
	h2Streams = 100 // streams per connection: server.http2.max_concurrent_streams
	h2Sent    = 16 << 10
	h2Config  = "server:\n  max_buffered_bytes: 4MiB\n  read_timeout: 60s\n  tls:\n    certificates:\n" +
		"      - {cert_file: CERT_FILE, key_file: KEY_FILE}\n"
)

func init() {
	for _, k := range []attackerKind{oneAccount, threeAccounts} {
		poolRows = append(poolRows, poolRow{pool: "request-body budget, HTTP/2 streams", attacker: k, config: h2Config, tls: true,
			attack: h2Bodies, holding: h2BodiesHeld,
			refused: []string{"server_busy"}, metric: "exgate_body_budget_refusals_total", maxGrowth: 96 << 20})
		poolRows = append(poolRows, poolRow{pool: "request-body budget, stalled HTTP/2 streams", attacker: k, config: h2Config, tls: true,
			attack: h2Stalled, holding: h2StalledHeld,
			refused: []string{"server_busy"}, metric: "exgate_body_budget_refusals_total", maxGrowth: 96 << 20})
	}
}

// h2Bodies: each attacker account opens h2Conns HTTP/2 connections and on
// each h2Streams bulks (Content-Length: 65536) whose first 16 KiB it sends
// and holds, until exgate answers or the row ends: 6.4 MiB of bodies per
// account against a 4 MiB budget.
func h2Bodies(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	h2Open(ctx, t, r, a, "["+strings.Repeat(" ", h2Sent-1))
}

// h2Stalled: each attacker account opens h2Conns HTTP/2 connections and on
// each h2Streams bulks (Content-Length: 65536) of which it sends the
// headers and no byte of body, until exgate answers or the row ends: 400
// streams per account, each charged config.BodyReadCharge (9.4 MiB)
// against a 4 MiB budget. Before the charge, exgate held them all and
// counted nothing.
func h2Stalled(ctx context.Context, t *testing.T, r *poolRun, a *attack) {
	h2Open(ctx, t, r, a, "")
}

// h2Open opens the streams of h2Bodies and h2Stalled, each sending start
// (counted in a.sent once written; nothing when empty) and holding.
func h2Open(ctx context.Context, t *testing.T, r *poolRun, a *attack, start string) {
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		for range h2Conns {
			c := clientOver(t, addr, 1, r.env.tls)
			for range h2Streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pr, pw := io.Pipe()
					go func() {
						if start != "" {
							if _, err := io.WriteString(pw, start); err == nil {
								a.sent.Add(1)
							}
						}
						<-ctx.Done()
						pw.Close()
					}()
					req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/api/v1/odr/orders/bulk/", pr)
					req.ContentLength = 65536
					req.Header.Set("Authorization", "Bearer "+a.tokens[i])
					req.Header.Set("Content-Type", "application/json")
					ans := do(c, req)
					if ctx.Err() != nil {
						return
					}
					a.answers.add(ans)
					a.answered.Add(1)
				}()
			}
		}
	}
	wg.Wait()
}

// h2StalledHeld reports that every stalled stream was refused or is
// charged its read's config.BodyReadCharge, and that the bytes exgate
// holds no longer move.
func h2StalledHeld(t *testing.T, r *poolRun, a *attack) bool {
	n := int64(len(a.addrs) * h2Conns * h2Streams)
	b := int64(r.g.metric(t, "exgate_body_buffered_bytes"))
	return b%config.BodyReadCharge == 0 && a.answered.Load()+b/config.BodyReadCharge >= n && a.settled(float64(b))
}

// h2BodiesHeld reports that every stream was refused or sent its 16 KiB,
// and that the bytes exgate holds no longer move.
func h2BodiesHeld(t *testing.T, r *poolRun, a *attack) bool {
	n := int64(len(a.addrs) * h2Conns * h2Streams)
	return a.sent.Load()+a.answered.Load() >= n && a.settled(r.g.metric(t, "exgate_body_buffered_bytes"))
}
