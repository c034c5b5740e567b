package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// Failover timings and limits the tests hold exgate to.
const (
	// failoverStoreTimeout is limiter.redis.timeout and
	// idempotency.timeout of the gateways under test.
	failoverStoreTimeout = 100 * time.Millisecond
	// switchGoal is how soon after the promotion is announced (Sentinel's
	// +switch-master, or the Cluster's slot map) every decision should be
	// the new master's again: a figure the test logs, and `make bench`'s
	// business, not an assertion (docs/operations.md gives the figures).
	switchGoal = time.Second
	// switchHang bounds how long the load goes on after the announcement
	// waiting for every gateway to decide in Redis again, and how long a
	// gateway's /readyz may stay 503: only a gateway that never followed
	// the promotion (no subscription, no slot-map reload) reaches it.
	switchHang = 30 * time.Second
	// resumeHang bounds how long after the lost master follows the new
	// one the test tries to place an order: claims need a replica's
	// acknowledgement, and only a gateway that never resumes reaches it.
	resumeHang = 60 * time.Second
	// failoverLimit is the per-address limit of the two hammered routes.
	failoverLimit = 20
	// failoverAfter is how long the load runs after the announcement.
	failoverAfter = 2500 * time.Millisecond
)

// failoverConfig is a gateway sharing limits through the Redis described
// by redisKeys (lines under limiter.redis) with one other replica:
//   - list_markets, the background load, with a limit it never reaches;
//   - list_matches, 20/1h per address, falling back to local limits
//     (10 per replica) while the store fails;
//   - list_currencies, 20/1h per address, failing closed (503);
//   - place_order, duplicate-protected, failing closed too.
func failoverConfig(upstream string, redisKeys ...string) string {
	var r strings.Builder
	for _, k := range redisKeys {
		fmt.Fprintf(&r, "    %s\n", k)
	}
	return configHeaderAccessLog(upstream) + fmt.Sprintf(`client_ip:
  trusted_proxies: ["127.0.0.1"]
limiter:
  store: redis
  replicas: 2
  on_store_error: local
  redis:
%s    timeout: %s
  token_spray:
    max_tokens: 0
idempotency:
  timeout: %s
routes:
  - name: place_order
    match: POST /api/v1/odr/orders/
    auth: required
    validate: order
    on_store_error: closed
    limits:
      - {key: address, rate: 1000000/1h}
  - name: list_markets
    match: GET /api/v1/mkt/markets/
    limits:
      - {key: address, rate: 1000000/1h}
  - name: list_matches
    match: GET /api/v1/mth/matches/{symbol}/
    limits:
      - {key: address, rate: %d/1h}
  - name: list_currencies
    match: GET /api/v1/mkt/currencies/
    on_store_error: closed
    limits:
      - {key: address, rate: %d/1h}
  - name: default
    match: "*"
`, r.String(), failoverStoreTimeout, failoverStoreTimeout, failoverLimit, failoverLimit)
}

// countingBackend is the reference backend behind a proxy that counts,
// per order identifier, the orders the backend placed (2xx answers to
// POST /api/v1/odr/orders/), and records, per X-Request-ID, what became of
// every request exgate forwarded: the backend's view of a request whose
// client saw no answer.
type countingBackend struct {
	url    string
	mu     sync.Mutex
	placed map[string]int
	times  []time.Time             // of each placement
	seen   map[string]*backendSeen // by X-Request-ID
	errLog lockedBuffer            // the proxy's server's own log (broken connections, …)
}

// backendSeen is what the backend did with one request.
type backendSeen struct {
	at         time.Time // when it arrived
	identifier string    // an order's identifier, or ""
	status     int       // the reference backend's status, or 0
	err        string    // why no answer came from the reference backend, if none did
	done       bool      // the answer was written out in full
}

func (s *backendSeen) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "received at %s", s.at.Format("15:04:05.000000"))
	if s.identifier != "" {
		fmt.Fprintf(&b, ", order %s", s.identifier)
	}
	if s.status != 0 {
		fmt.Fprintf(&b, ", answered %d", s.status)
		if s.identifier != "" && s.status/100 == 2 {
			b.WriteString(" (placed)")
		}
	}
	if s.err != "" {
		fmt.Fprintf(&b, ", failed: %s", s.err)
	}
	if !s.done {
		b.WriteString(", its answer not written out in full")
	}
	return b.String()
}

func startCountingBackend(t *testing.T) *countingBackend {
	t.Helper()
	be := startBackend(t)
	u, _ := url.Parse(be.url)
	rp := httputil.NewSingleHostReverseProxy(u)
	cb := &countingBackend{placed: map[string]int{}, seen: map[string]*backendSeen{}}
	rp.ErrorLog = log.New(&cb.errLog, "reverseproxy: ", log.Lmicroseconds)
	rp.ModifyResponse = func(res *http.Response) error {
		cb.mu.Lock()
		defer cb.mu.Unlock()
		if s := cb.seen[clientsRequestID(res.Request.Header)]; s != nil {
			s.status = res.StatusCode
		}
		if id := res.Request.Header.Get("X-Test-Identifier"); id != "" && res.StatusCode/100 == 2 {
			cb.placed[id]++
			cb.times = append(cb.times, time.Now())
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		cb.mu.Lock()
		if s := cb.seen[clientsRequestID(r.Header)]; s != nil {
			s.err = err.Error()
		}
		cb.mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen := &backendSeen{at: time.Now()}
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/odr/orders/" {
			b, _ := io.ReadAll(r.Body)
			var o struct {
				Identifier string `json:"identifier"`
			}
			_ = json.Unmarshal(b, &o)
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.Header.Set("X-Test-Identifier", o.Identifier)
			seen.identifier = o.Identifier
		}
		if id := clientsRequestID(r.Header); id != "" {
			cb.mu.Lock()
			cb.seen[id] = seen
			cb.mu.Unlock()
		}
		rp.ServeHTTP(w, r) // a response broken off panics (http.ErrAbortHandler): done stays false
		cb.mu.Lock()
		seen.done = true
		cb.mu.Unlock()
	}))
	srv.Config.ErrorLog = log.New(&cb.errLog, "server: ", log.Lmicroseconds)
	srv.Start()
	t.Cleanup(srv.Close)
	cb.url = srv.URL
	return cb
}

// clientsRequestID returns the X-Request-ID the client sent of a request
// as the backend received it: exgate sends the client's id with a part of
// its own after the last dot, so that no two requests in flight share one.
func clientsRequestID(h http.Header) string {
	id := h.Get("X-Request-Id")
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		return id[:i]
	}
	return id
}

// view returns what the backend did with the request with X-Request-ID
// id.
func (cb *countingBackend) view(id string) string {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.viewLocked(id)
}

// viewLocked is view with cb.mu held.
func (cb *countingBackend) viewLocked(id string) string {
	if s := cb.seen[id]; s != nil {
		return s.String()
	}
	return "never received"
}

// probe is one request of a prober: a new client address each time on
// list_matches, so that its RateLimit header tells who decided it: r=19
// is Redis (20/1h), r=9 the local fallback (20/1h over 2 replicas).
type probe struct {
	sent, answered time.Time
	by             string // "redis", "local" or the answer's status and code
}

// failoverRun is what a failover under load produced.
type failoverRun struct {
	announced time.Time
	// back is when the old master was brought back, if it was during
	// the run: the switch is measured before it, what its return does
	// after it.
	back      time.Time
	probes    [][]probe // per gateway, in order
	probeErrs []answer  // the probes that got no answer
	load      tally     // list_markets
	limited   [2]tally  // list_matches, list_currencies hammered
	admitted  [2]map[string]int
	orders    tally
	readyz    map[string]int // "<gateway> <status>" seen during the failover
	notReady  time.Time      // the last time a gateway's /readyz was not 200
	placed    map[string]int
	placedAt  []time.Time
	fallback  float64 // exgate_ratelimit_fallback_total, summed, after
	fallback0 float64 // the same before the failure
	latencies []timed
	// orderAnswers is every order's answer, with its identifier.
	orderAnswers []orderAnswer
	gws          []*gateway
	cb           *countingBackend
	seq          atomic.Int64 // numbers the requests' X-Request-IDs
	ended        time.Time    // when the load ended
	mu           sync.Mutex
}

// orderAnswer is an order's answer as its client saw it.
type orderAnswer struct {
	answer
	identifier string
}

// tag gives req an X-Request-ID naming what it is and the gateway gi it
// goes to, unique within the run, so that a request whose client got no
// answer can be looked up in that gateway's access log and the backend's
// record.
func (r *failoverRun) tag(req *http.Request, what string, gi int) *http.Request {
	req.Header.Set("X-Request-Id", what+"-g"+strconv.Itoa(gi)+"-"+strconv.FormatInt(r.seq.Add(1), 10))
	return req
}

// timed is one answer's latency, when it came and what it was.
type timed struct {
	d    time.Duration
	at   time.Time
	what string
}

func (r *failoverRun) latency(what string, a answer) {
	r.mu.Lock()
	r.latencies = append(r.latencies, timed{a.latency, time.Now(), fmt.Sprintf("%s %d %s", what, a.status, a.code)})
	r.mu.Unlock()
}

// failOver runs load through gws (two gateways on the same store, backed
// by cb) for a moment, calls fail, which breaks the master and returns
// when the promotion is announced, and keeps the load going for
// failoverAfter more. The load is:
//   - 4 workers on list_markets, new addresses, every 20ms;
//   - per gateway, a prober on list_matches every 20ms;
//   - 6 workers hammering list_matches and 6 list_currencies every 40ms,
//     each with a new address every 40 requests, alternating the gateways, so that
//     some addresses are short of their limit when the master fails;
//   - 100 order clients, each sending every 300ms, retrying 10
//     identifiers at a time (a new set every 150ms) through both
//     gateways.
func failOver(t *testing.T, gws []*gateway, cb *countingBackend, token string, fail func() time.Time) *failoverRun {
	t.Helper()
	run := &failoverRun{probes: make([][]probe, len(gws)), readyz: map[string]int{}, gws: gws, cb: cb}
	for i := range run.admitted {
		run.admitted[i] = map[string]int{}
	}
	c := newClient(t, 256)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	spawn := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	start := time.Now()

	spawn(func() {
		load(ctx, c, 4, func(w, i int) *http.Request {
			if i > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			gi := (w + i) % 2
			return run.tag(get(gws[gi].url+"/api/v1/mkt/markets/", "X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", w, i/250%250, i%250)), "markets", gi)
		}, &run.load)
	})
	for gi, g := range gws {
		spawn(func() { run.probeLoop(ctx, c, gi, g) })
	}
	for ri, path := range []string{"/api/v1/mth/matches/ETH_BTC/", "/api/v1/mkt/currencies/"} {
		for w := range 6 {
			spawn(func() { run.limitedLoop(ctx, c, ri, w, path) })
		}
	}
	for cl := range 100 {
		spawn(func() { run.orderLoop(ctx, c, cl, start, token) })
	}

	time.Sleep(1500 * time.Millisecond) // steady state, and keys short of their limits
	for _, g := range gws {
		run.fallback0 += g.metric(t, "exgate_ratelimit_fallback_total")
	}
	watch, stopWatch := context.WithCancel(ctx)
	spawn(func() { run.watchReadyz(watch) })
	run.announced = fail()
	time.Sleep(failoverAfter)
	// On a loaded machine a gateway may still be falling back here; the
	// load goes on (up to switchHang) until every gateway's latest probe
	// was decided by Redis, so that a late switch is measured, not cut off.
	for time.Since(run.announced) < switchHang && !run.settled() {
		time.Sleep(100 * time.Millisecond)
	}
	stopWatch()
	stop()
	wg.Wait()
	run.ended = time.Now()
	for _, g := range gws {
		run.fallback += g.metric(t, "exgate_ratelimit_fallback_total")
	}
	cb.mu.Lock()
	run.placed = maps(cb.placed)
	run.placedAt = slices.Clone(cb.times)
	cb.mu.Unlock()
	return run
}

// probeLoop probes list_matches through gateway gi, g, every 20ms until ctx
// ends, and records which store decided each answer.
func (r *failoverRun) probeLoop(ctx context.Context, c *http.Client, gi int, g *gateway) {
	for i := 0; ctx.Err() == nil; i++ {
		p := probe{sent: time.Now()}
		a := do(c, r.tag(get(g.url+"/api/v1/mth/matches/BTC_USDT/", "X-Forwarded-For", fmt.Sprintf("172.%d.%d.%d", 16+gi, i/250%250, i%250)), "probe", gi))
		p.answered = time.Now()
		r.latency("probe", a)
		// "list_matches";r=19;t=… : the remaining count.
		remaining, _, _ := strings.Cut(a.rateLimit, ";t=")
		switch {
		case a.err != nil:
			p.by = a.err.Error()
			r.mu.Lock()
			r.probeErrs = append(r.probeErrs, a)
			r.mu.Unlock()
		case a.status == http.StatusOK && strings.HasSuffix(remaining, ";r=19"):
			p.by = "redis"
		case a.status == http.StatusOK && strings.HasSuffix(remaining, ";r=9"):
			p.by = "local"
		default:
			p.by = strings.TrimSpace(strconv.Itoa(a.status) + " " + a.code + " " + a.rateLimit)
		}
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.probes[gi] = append(r.probes[gi], p)
		r.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// limitedLoop is worker w hammering path, the limited route ri, every 40ms
// until ctx ends, with a new address every 40 requests, alternating the
// gateways.
func (r *failoverRun) limitedLoop(ctx context.Context, c *http.Client, ri, w int, path string) {
	gws := r.gws
	for i := 0; ctx.Err() == nil; i++ {
		addr := fmt.Sprintf("198.%d.%d.%d", 18+ri, w, i/40)
		a := do(c, r.tag(get(gws[i%2].url+path, "X-Forwarded-For", addr), "limited", i%2))
		if ctx.Err() != nil && a.err != nil {
			return
		}
		r.latency(path, a)
		r.limited[ri].add(a)
		if a.err == nil && a.status == http.StatusOK {
			r.mu.Lock()
			r.admitted[ri][addr]++
			r.mu.Unlock()
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// orderLoop is order client cl sending an order every 300ms until ctx ends,
// retrying one of 10 identifiers that change every 150ms from start,
// alternating the gateways.
func (r *failoverRun) orderLoop(ctx context.Context, c *http.Client, cl int, start time.Time, token string) {
	gws := r.gws
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("fo-%d-%d", time.Since(start)/(150*time.Millisecond), cl%10)
		gi := (cl + i) % 2
		a := do(c, r.tag(orderWithID(gws[gi].url, token, id).WithContext(ctx), "order", gi))
		if ctx.Err() != nil && a.err != nil {
			return
		}
		r.latency("order", a)
		r.orders.add(a)
		r.mu.Lock()
		r.orderAnswers = append(r.orderAnswers, orderAnswer{a, id})
		r.mu.Unlock()
		time.Sleep(300 * time.Millisecond)
	}
}

// watchReadyz asks every gateway's /readyz every 100ms until watch ends,
// and counts the answers.
func (r *failoverRun) watchReadyz(watch context.Context) {
	gws := r.gws
	for watch.Err() == nil {
		for gi, g := range gws {
			if res, err := noKeepAlive().Get(g.admin + "/readyz"); err == nil {
				res.Body.Close()
				r.mu.Lock()
				r.readyz[fmt.Sprintf("gateway %d: %d", gi, res.StatusCode)]++
				if res.StatusCode != http.StatusOK {
					r.notReady = time.Now()
				}
				r.mu.Unlock()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settled reports whether every gateway's latest probe was sent after
// the announcement and decided by Redis.
func (r *failoverRun) settled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range r.probes {
		if len(ps) == 0 {
			return false
		}
		if p := ps[len(ps)-1]; p.by != "redis" || !p.sent.After(r.announced) {
			return false
		}
	}
	return true
}

// orderWithID builds a market buy with the identifier id.
func orderWithID(base, token, id string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/odr/orders/",
		strings.NewReader(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001","identifier":"`+id+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// maps copies m.
func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// switched returns how long after the announcement gateway gi's probes
// were all decided by Redis again: the answer time of the last probe not
// decided by Redis, after the announcement (0 if there was none). ok is
// false when no probe after the announcement was decided by Redis.
func (r *failoverRun) switched(gi int) (d time.Duration, local, redis int, ok bool) {
	return r.switchedBetween(gi, r.announced, r.back)
}

// switchedBetween is switched over the probes answered after from and,
// when until is not zero, sent before until.
func (r *failoverRun) switchedBetween(gi int, from, until time.Time) (d time.Duration, local, redis int, ok bool) {
	last := from
	var in []probe
	for _, p := range r.probes[gi] {
		if !p.answered.After(from) || !until.IsZero() && p.sent.After(until) {
			continue
		}
		in = append(in, p)
		switch {
		case p.by == "local":
			local++
		case p.by == "redis":
			redis++
		}
		if p.by != "redis" && p.answered.After(last) {
			last = p.answered
		}
	}
	for _, p := range in {
		if p.sent.After(last) && p.by == "redis" {
			ok = true
		}
	}
	return last.Sub(from), local, redis, ok
}

// check asserts the declared behaviour of a failover run, and reports
// its figures: the switch time per gateway, the slowest answer, the
// fallbacks, readiness, the over-admission per route and the orders
// placed per identifier.
func (r *failoverRun) check(t *testing.T) {
	t.Helper()
	r.explainBroken(t)
	r.checkTruthful(t)
	r.checkSwitches(t)
	r.checkLatencyAndFallback(t)
	r.checkReadiness(t)
	r.checkLimits(t)
	r.checkOrders(t)
}

// checkSwitches reports, per gateway, how long after the announcement its
// decisions were all in Redis again, and fails the gateways that never
// came back to Redis.
func (r *failoverRun) checkSwitches(t *testing.T) {
	t.Helper()
	for gi := range r.probes {
		d, local, redis, ok := r.switched(gi)
		if !ok && !r.back.IsZero() {
			// No probe sent before the old master came back was decided
			// by Redis after the gateway's last fallback: on a loaded
			// machine the switch can come later than the comeback. Then
			// it is measured over the whole run, comeback included.
			t.Logf("gateway %d: not back in Redis before the old master came back (%v after the announcement); measured to the end of the load",
				gi, r.back.Sub(r.announced).Round(time.Millisecond))
			d, local, redis, ok = r.switchedBetween(gi, r.announced, time.Time{})
		}
		t.Logf("gateway %d: all decisions in Redis again %v after the announcement, goal %v (probes since: %d by Redis, %d local)", gi, d.Round(time.Millisecond), switchGoal, redis, local)
		if !ok {
			t.Errorf("gateway %d: decisions not back in Redis %v after the promotion was announced; probes: %v", gi, switchHang, r.probeSummary(gi))
		}
		if !r.back.IsZero() {
			d, local, _, _ := r.switchedBetween(gi, r.back, time.Time{})
			t.Logf("gateway %d: after the old master came back (%v after the announcement), %d decisions without Redis, the last %v after", gi,
				r.back.Sub(r.announced).Round(time.Millisecond), local, d.Round(time.Millisecond))
		}
	}
}

// checkLatencyAndFallback reports the answers' latencies and the fallback
// decisions, and checks that list_markets answered only 200s and that the
// fallback counter rose by at least the local probe answers.
func (r *failoverRun) checkLatencyAndFallback(t *testing.T) {
	t.Helper()
	slices.SortFunc(r.latencies, func(a, b timed) int { return int(a.d - b.d) })
	n := len(r.latencies)
	slowest := r.latencies[n-1]
	t.Logf("%d answers: p50 %v, p99 %v, slowest %v: %s, %v after the announcement (store deadline %v)", n,
		r.latencies[n/2].d.Round(time.Microsecond), r.latencies[n*99/100].d.Round(time.Microsecond),
		slowest.d.Round(time.Microsecond), slowest.what, slowest.at.Sub(r.announced).Round(time.Millisecond), failoverStoreTimeout)

	t.Logf("list_markets load: %s", &r.load)
	if r.load.nErrs > 0 || r.load.byKey["200"] != r.load.total {
		t.Errorf("list_markets (on_store_error local) wants only 200s: %s", &r.load)
	}
	localProbes := 0
	for _, ps := range r.probes {
		for _, p := range ps {
			if p.by == "local" {
				localProbes++
			}
		}
	}
	t.Logf("fallback decisions counted: %v (local probe answers seen: %d)", r.fallback-r.fallback0, localProbes)
	if r.fallback-r.fallback0 < float64(localProbes) || r.fallback-r.fallback0 < 1 {
		t.Errorf("exgate_ratelimit_fallback_total rose by %v during the failover, want at least the %d local probe answers (and > 0)", r.fallback-r.fallback0, localProbes)
	}
}

// checkReadiness checks that /readyz answered only 200 or 503 during the
// failover, and 200 again on every gateway after it.
func (r *failoverRun) checkReadiness(t *testing.T) {
	t.Helper()
	// A route failing closed makes Redis critical to readiness: /readyz
	// may answer 503 while the store is lost, and is 200 again once the
	// promotion is announced.
	if r.notReady.IsZero() {
		t.Logf("/readyz during the failover: %v", r.readyz)
	} else {
		t.Logf("/readyz during the failover: %v; last not ready %v after the announcement", r.readyz, r.notReady.Sub(r.announced).Round(time.Millisecond))
	}
	for k := range r.readyz {
		if !strings.HasSuffix(k, ": 200") && !strings.HasSuffix(k, ": 503") {
			t.Errorf("/readyz during the failover: %v, want 200 or 503", r.readyz)
		}
	}
	for gi, g := range r.gws {
		var status int
		if !eventually(switchHang, func() bool {
			res, err := noKeepAlive().Get(g.admin + "/readyz")
			if err != nil {
				return false
			}
			res.Body.Close()
			status = res.StatusCode
			return status == http.StatusOK
		}) {
			t.Errorf("gateway %d: /readyz %d %v after the load, want 200 again", gi, status, switchHang)
		}
	}
}

// checkLimits checks what each address got against its limit across the
// failover, within the bound docs/limits.md declares.
func (r *failoverRun) checkLimits(t *testing.T) {
	t.Helper()
	// Limits: what each address got against its 20/1h.
	for ri, route := range []string{"list_matches (local)", "list_currencies (closed)"} {
		over, worst, keys := 0, 0, 0
		for _, n := range r.admitted[ri] {
			keys++
			over += max(0, n-failoverLimit)
			worst = max(worst, n)
		}
		t.Logf("%s: %d addresses, %d admitted beyond the limit in all, at most %d of %d for one address; answers %s",
			route, keys, over, worst, failoverLimit, &r.limited[ri])
		if r.limited[ri].nErrs > 0 {
			t.Errorf("%s: errors: %s", route, &r.limited[ri])
		}
		// The declared bound (docs/limits.md): the limit, plus for the
		// local fallback a full burst more (each replica's share), plus
		// what the lost replication forgot: the decisions the old master
		// acknowledged and did not pass on, a handful on a local network.
		bound := failoverLimit + lostReplicationAllowance
		if ri == 0 {
			bound += failoverLimit
		}
		if worst > bound {
			t.Errorf("%s: an address was admitted %d times across the failover, want at most %d", route, worst, bound)
		}
	}
	for k := range r.limited[1].byKey {
		if !slices.Contains([]string{"200", "429 throttled", "503 rate_limit_unavailable"}, k) {
			t.Errorf("list_currencies (closed) answered %q: %s", k, &r.limited[1])
		}
	}
}

// checkOrders checks that every identifier was placed at most once and
// that orders got complete answers, and reports when they resumed.
func (r *failoverRun) checkOrders(t *testing.T) {
	t.Helper()
	// Orders: every identifier placed at most once.
	t.Logf("orders: %s; %d identifiers placed", &r.orders, len(r.placed))
	for id, n := range r.placed {
		if n > 1 {
			t.Errorf("identifier %s placed %d times", id, n)
		}
	}
	for k := range r.orders.byKey {
		if !slices.Contains([]string{"201", "409 request_in_progress", "503 duplicate_protection_unavailable", "503 rate_limit_unavailable"}, k) {
			t.Errorf("orders answered %q: %s", k, &r.orders)
		}
	}
	if r.orders.nErrs > 0 || r.orders.byKey["201"] == 0 || len(r.placed) == 0 {
		t.Errorf("orders: want complete answers and some placed: %s", &r.orders)
	}
	// Claims need a replica's acknowledgement: orders go again once the
	// new master has a replica (at once in a Cluster for the other
	// shards; in Sentinel once the old master is back as a replica).
	if resumed := slices.IndexFunc(r.placedAt, func(at time.Time) bool { return at.After(r.announced) }); resumed >= 0 {
		t.Logf("orders placed again %v after the announcement", r.placedAt[resumed].Sub(r.announced).Round(time.Millisecond))
	} else {
		t.Logf("no order placed within %v of the announcement: no replica acknowledged claims yet", failoverAfter)
	}
}

// ordersOnceReplicated waits for old, the lost master, to follow the new
// one, and then for an order with a new identifier to be placed through
// g (within resumeHang, which only a gateway that never resumes
// reaches): claims need a replica to acknowledge them.
func (r *failoverRun) ordersOnceReplicated(t *testing.T, old *redistest.Server, g *gateway, token string) {
	t.Helper()
	var replicaAt time.Time
	// Sentinel reconfigures the old master once it sees it back, after its
	// restart and a full resynchronisation; the bound only ends a hang (at
	// load 15 it took over 20s).
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if info, err := old.Info("replication"); err == nil && info["role"] == "slave" && info["master_link_status"] == "up" {
			replicaAt = time.Now()
			break
		}
	}
	if replicaAt.IsZero() {
		t.Fatal("the old master did not follow the new one within 2 minutes")
	}
	t.Logf("old master a replica again %v after the announcement", replicaAt.Sub(r.announced).Round(time.Millisecond))
	c := newClient(t, 1)
	id := "after-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	// A new identifier per try: a try whose claim was taken but whose
	// answer timed out may leave its identifier in flight (outcome
	// unknown, 409 to every retry for idempotency.in_flight_timeout) when
	// the free of its lost claim fails too, the master being lost.
	placedAt := time.Now()
	tries := 0
	var last answer
	placed := eventually(resumeHang, func() bool {
		tries++
		last = do(c, orderWithID(g.url, token, id+"-"+strconv.Itoa(tries)))
		return last.status == http.StatusCreated
	})
	if !placed {
		t.Errorf("no order placed within %v of the new master having a replica (%d tries, the last answered %d %s %v)", resumeHang, tries, last.status, last.code, last.err)
	}
	t.Logf("order placed %v after the old master followed the new one, try %d (goal %v)", time.Since(placedAt).Round(time.Millisecond), tries, switchGoal)
}

// lostReplicationAllowance is how many decisions per address the tests
// allow a failover to forget: those the old master acknowledged in the
// moment before it was lost and had not yet passed to its replica.
const lostReplicationAllowance = 2

// probeSummary condenses a gateway's probes around the announcement.
func (r *failoverRun) probeSummary(gi int) string {
	var b strings.Builder
	prev := ""
	for _, p := range r.probes[gi] {
		if p.by != prev {
			fmt.Fprintf(&b, "[%+v %s] ", p.sent.Sub(r.announced).Round(time.Millisecond), p.by)
			prev = p.by
		}
	}
	return b.String()
}

// failoverWithin bounds the wait for Redis to fail a master over: only a
// failover that never comes reaches it. Sentinel retries an election that
// failed every 2 × failover-timeout (10 s in redistest), and on a busy
// machine the first attempts can fail: a fresh-clone CI run beside other
// engineers' suites (load 7 on 2 CPUs) saw no +switch-master in 20 s.
const failoverWithin = time.Minute

// TestSentinelFailover fails the master of a Sentinel setup (a master, a
// replica, three Sentinels; down after 500ms) under load through two
// exgate replicas: killed (SIGKILL), and frozen (SIGSTOP) until the
// promotion is announced, then let go. After the announcement every
// decision is the new master's again (how soon is logged: the goal is a
// second); every request is answered; every fallback is counted; /readyz
// is 200 again afterwards; no address gets more than the declared bound;
// no order identifier is placed twice.
func TestSentinelFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail breaks the master; back brings it back after the
		// promotion, as a replica of the new master.
		fail, back func(g *redistest.Sentinels)
	}{
		{"master killed", func(g *redistest.Sentinels) { g.Master.Stop() },
			func(g *redistest.Sentinels) { g.Master.RestartReplicaOf(g.Replica) }}, // as a supervisor would
		{"master frozen", func(g *redistest.Sentinels) { g.Master.Freeze() },
			func(g *redistest.Sentinels) { g.Master.Thaw() }}, // Sentinel turns it into a replica
	} {
		t.Run(tc.name, func(t *testing.T) {
			sg := redistest.StartSentinels(t, "exgate", 500*time.Millisecond)
			cb := startCountingBackend(t)
			token := accessToken(t, cb.url)
			cfg := failoverConfig(cb.url, fmt.Sprintf("addrs: [%q, %q, %q]", sg.Addrs()[0], sg.Addrs()[1], sg.Addrs()[2]), "master_name: exgate")
			gws := []*gateway{startGateway(t, cfg), startGateway(t, cfg)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switches, err := sg.Switches(ctx)
			if err != nil {
				t.Fatal(err)
			}
			run := failOver(t, gws, cb, token, func() time.Time {
				broken := time.Now()
				tc.fail(sg)
				select {
				case sw := <-switches:
					if sw.Addr != sg.Replica.Addr {
						t.Fatalf("Sentinel promoted %s, want the replica %s", sw.Addr, sg.Replica.Addr)
					}
					t.Logf("+switch-master %v after the master was broken", sw.At.Sub(broken).Round(time.Millisecond))
					go tc.back(sg)
					return sw.At
				case <-time.After(failoverWithin):
					t.Fatalf("no +switch-master within %v", failoverWithin)
				}
				return time.Time{}
			})
			run.check(t)
			run.ordersOnceReplicated(t, sg.Master, gws[0], token)
			run.checkAccessLog(t)
			if info, err := sg.Replica.Info("replication"); err != nil || info["role"] != "master" {
				t.Errorf("the replica after the failover: %v %v, want the master", info, err)
			}
		})
	}
}

// comeback is how long after the promotion a Cluster test brings the old
// master back: after exgate has moved to the new master, within the load.
const comeback = 1200 * time.Millisecond

// TestClusterFailover fails one master of a Cluster of three masters
// with a replica each (cluster-node-timeout 1s) under load through two
// exgate replicas: the master holding the orders' claims (all of one
// account, so one hash slot), killed (SIGKILL, then restarted by a
// supervisor) or frozen (SIGSTOP until the slot map names its replica).
// After the slot map names the promoted replica, every decision is made
// in Redis again; once the old master is back as a replica, orders go
// again; the rest as TestSentinelFailover.
func TestClusterFailover(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fail, back func(*redistest.Server)
	}{
		{"master killed", (*redistest.Server).Stop, (*redistest.Server).Restart}, // rejoins with its nodes.conf, as a replica
		{"master frozen", (*redistest.Server).Freeze, (*redistest.Server).Thaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartReplicatedCluster(t, 3, time.Second)
			cb := startCountingBackend(t)
			token := accessToken(t, cb.url)
			addrs, _ := json.Marshal(cl.Addrs)
			cfg := failoverConfig(cb.url, "addrs: "+string(addrs))
			gws := []*gateway{startGateway(t, cfg), startGateway(t, cfg)}
			var victim, witness *redistest.Server
			var backMu sync.Mutex
			var backAt time.Time
			run := failOver(t, gws, cb, token, func() time.Time {
				var slot int64
				victim, witness, slot = claimsMaster(t, cl)
				broken := time.Now()
				tc.fail(victim)
				deadline := time.Now().Add(failoverWithin)
				for time.Now().Before(deadline) {
					if owner, err := cl.SlotOwner(witness, int(slot)); err == nil && owner != victim.Addr {
						t.Logf("slot map names %s for slot %d %v after the master was broken", owner, slot, time.Since(broken).Round(time.Millisecond))
						announced := time.Now()
						time.AfterFunc(comeback, func() {
							backMu.Lock()
							backAt = time.Now()
							backMu.Unlock()
							tc.back(victim)
						})
						return announced
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Fatalf("the Cluster did not fail the master over within %v", failoverWithin)
				return time.Time{}
			})
			backMu.Lock()
			run.back = backAt
			backMu.Unlock()
			run.check(t)
			run.ordersOnceReplicated(t, victim, gws[0], token)
			run.checkAccessLog(t)
		})
	}
}

// claimsMaster returns the master holding the duplicate-protection keys
// (every order of the test's one account is in one hash slot), another
// master, and the keys' slot.
func claimsMaster(t *testing.T, cl *redistest.Cluster) (holder, other *redistest.Server, slot int64) {
	t.Helper()
	for _, s := range cl.Servers {
		if info, err := s.Info("replication"); err != nil || info["role"] != "master" {
			continue
		}
		v, err := s.Do("SCAN", "0", "MATCH", "exgate:idem:*", "COUNT", "100000")
		if keys, _ := v.([]any); err == nil && len(keys) == 2 && len(keys[1].([]any)) > 0 && holder == nil {
			holder = s
			n, err := s.Do("CLUSTER", "KEYSLOT", keys[1].([]any)[0])
			if err != nil {
				t.Fatal(err)
			}
			slot = n.(int64)
		} else if other == nil {
			other = s
		}
	}
	if holder == nil || other == nil {
		t.Fatal("no master holds the orders' claims")
	}
	return holder, other, slot
}

// logFlush is how long the gateways' log lines may wait in their buffer
// before they are written out (1s outside dev mode), with a margin.
const logFlush = 1200 * time.Millisecond

// waitForLogs waits until the gateways have written out the log lines of
// every request of the run.
func (r *failoverRun) waitForLogs() {
	time.Sleep(logFlush - time.Since(r.ended))
}

// checkAccessLog asserts that each order's access log line says what its
// client was told: the status, exgate's own error code (which 503 it
// was: duplicate_protection_unavailable or rate_limit_unavailable) and
// whether it was a replay. The lines are read once every order's is
// written out (the gateways flush their log at least once a second; a
// loaded machine may be late), for at most accessLogWait.
func (r *failoverRun) checkAccessLog(t *testing.T) {
	t.Helper()
	r.waitForLogs()
	type line struct {
		RequestID      string `json:"request_id"`
		Status         int    `json:"status"`
		Code           string `json:"code"`
		Replayed       bool   `json:"replayed"`
		UpstreamStatus int    `json:"upstream_status"`
	}
	logged := map[string]line{}
	var missing int
	for deadline := time.Now().Add(accessLogWait); ; time.Sleep(100 * time.Millisecond) {
		clear(logged)
		for _, g := range r.gws {
			for l := range strings.Lines(g.out.String()) {
				var v line
				if isAccessLine(l) && json.Unmarshal([]byte(l), &v) == nil {
					logged[v.RequestID] = v
				}
			}
		}
		missing = 0
		for _, a := range r.orderAnswers {
			if _, ok := logged[a.id]; !ok && a.err == nil {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
	}
	var wrong []string
	for _, a := range r.orderAnswers {
		if a.err != nil {
			continue
		}
		l, ok := logged[a.id]
		// The code of exgate's own answer; the backend's error codes
		// (its answer passed through, upstream_status) are not logged.
		code := a.code
		if l.UpstreamStatus == a.status {
			code = ""
		}
		if !ok || l.Status != a.status || l.Code != code || l.Replayed != a.replayed {
			wrong = append(wrong, fmt.Sprintf("%s answered %d %q replayed=%v, logged %+v (found: %v)", a.id, a.status, a.code, a.replayed, l, ok))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d orders' access log lines do not say what their client was told (%d not found within %v), e.g. %s",
			len(wrong), len(r.orderAnswers), missing, accessLogWait, wrong[0])
	}
}

// accessLogWait bounds how long checkAccessLog waits for the gateways to
// write out every order's access log line.
const accessLogWait = 5 * time.Second

// explainBroken fails the test for every request of the run whose client
// got no answer at all (a transport error such as a bare EOF: the request
// was written and the connection closed before an answer byte), each with
// what the gateways' access logs say of its X-Request-ID, what the
// backend did with it (never received it, placed the order, …), and the
// gateways' lines that close a connection without an answer: 499s,
// aborted responses, recovered panics and net/http's own errors.
func (r *failoverRun) explainBroken(t *testing.T) {
	t.Helper()
	var broken []answer
	for _, ty := range []*tally{&r.load, &r.limited[0], &r.limited[1], &r.orders} {
		ty.mu.Lock()
		broken = append(broken, ty.failed...)
		ty.mu.Unlock()
	}
	r.mu.Lock()
	broken = append(broken, r.probeErrs...)
	r.mu.Unlock()
	if len(broken) > 0 {
		r.waitForLogs()
	}
	outs := make([]string, len(r.gws))
	for gi, g := range r.gws {
		outs[gi] = g.out.String()
	}
	unusual := unusualLines(outs)
	t.Logf("gateway lines that end a connection without an answer (499, aborted, panic, net/http errors): %d", len(unusual))
	if len(broken) == 0 {
		for _, line := range unusual[:min(len(unusual), 5)] {
			t.Logf("  %s", strings.TrimSpace(line))
		}
		return
	}
	var b strings.Builder
	for i, a := range broken {
		if i == 10 {
			fmt.Fprintf(&b, "… and %d more\n", len(broken)-i)
			break
		}
		fmt.Fprintf(&b, "request %s: %v (io.EOF: %v) after %v, on a %s\n", a.id, a.err, errors.Is(a.err, io.EOF), a.latency.Round(time.Microsecond), a.conn)
		found := false
		for gi, out := range outs {
			for line := range strings.Lines(out) {
				if strings.Contains(line, `"`+a.id+`"`) {
					fmt.Fprintf(&b, "  gateway %d: %s", gi, line)
					found = true
				}
			}
		}
		if !found {
			b.WriteString("  no line of either gateway names it\n")
		}
		fmt.Fprintf(&b, "  backend: %s\n", r.cb.view(a.id))
	}
	fmt.Fprintf(&b, "gateway lines that end a connection without an answer (%d):\n", len(unusual))
	for i, line := range unusual {
		if i == 20 {
			fmt.Fprintf(&b, "  … and %d more\n", len(unusual)-i)
			break
		}
		b.WriteString("  " + line)
	}
	fmt.Fprintf(&b, "the backend's proxy's own log:\n%s", lastLines(r.cb.errLog.String(), 20))
	t.Errorf("%d requests got no answer at all:\n%s", len(broken), b.String())
}

// unusualLines returns the lines of the gateways' outputs (each prefixed
// with its gateway) that tell of a connection ended without an answer: an
// access log line with status 499 (the client went away) or "aborted"
// (the backend broke off a response under way), a recovered panic, and
// net/http's own error log (logger "http": panics it recovered, failed
// TLS handshakes, accept errors).
func unusualLines(outs []string) []string {
	var found []string
	for gi, out := range outs {
		for line := range strings.Lines(out) {
			if strings.Contains(line, `"status":499`) || strings.Contains(line, `"aborted":true`) ||
				strings.Contains(line, "panic") || strings.Contains(line, `"logger":"http"`) {
				found = append(found, fmt.Sprintf("gateway %d: %s", gi, line))
			}
		}
	}
	return found
}

// checkTruthful asserts that every order's answer told its client the
// truth about the order, by the backend's record of the request's
// X-Request-ID: a 201 was placed by the backend for this request (or, a
// replay, for an earlier one with the same identifier, and not sent
// again); exgate's refusals (409, 503) never reached the backend; a 502
// or 504 may have (their outcome is unknown, as their code says). And the
// other way round: every order the backend placed was answered 201, or
// 502/504, to the client that sent it.
func (r *failoverRun) checkTruthful(t *testing.T) {
	t.Helper()
	r.cb.mu.Lock()
	defer r.cb.mu.Unlock()
	answered := make(map[string]orderAnswer, len(r.orderAnswers))
	var lies []string
	for _, a := range r.orderAnswers {
		answered[a.id] = a
		if a.err != nil {
			continue // explainBroken tells what became of it
		}
		seen := r.cb.seen[a.id]
		what := fmt.Sprintf("%s (identifier %s) answered %d %s", a.id, a.identifier, a.status, a.code)
		switch {
		case a.status == http.StatusCreated && a.replayed:
			if r.placed[a.identifier] == 0 {
				lies = append(lies, what+" replayed, and the backend never placed the identifier")
			}
			if seen != nil {
				lies = append(lies, what+" replayed, and the backend received it: "+seen.String())
			}
		case a.status == http.StatusCreated:
			if seen == nil || seen.status/100 != 2 || seen.identifier != a.identifier {
				lies = append(lies, what+", and the backend did not place it: "+r.cb.viewLocked(a.id))
			}
		case a.code == "bad_gateway" || a.code == "gateway_timeout":
			// Outcome unknown: the backend may have placed it.
		default:
			if seen != nil {
				lies = append(lies, what+", and the backend received it: "+seen.String())
			}
		}
	}
	placedByBackend := 0
	for id, seen := range r.cb.seen {
		if seen.identifier == "" || seen.status/100 != 2 {
			continue
		}
		placedByBackend++
		a, ok := answered[id]
		switch {
		case !ok:
			// Sent at the end of the load, its client gone: not tallied.
		case a.err != nil:
			lies = append(lies, fmt.Sprintf("%s (identifier %s) placed by the backend, and its client got no answer: %v", id, seen.identifier, a.err))
		case a.status != http.StatusCreated && a.code != "bad_gateway" && a.code != "gateway_timeout":
			lies = append(lies, fmt.Sprintf("%s (identifier %s) placed by the backend, and its client was told %d %s", id, seen.identifier, a.status, a.code))
		}
	}
	t.Logf("orders: %d answers checked against the backend's record, %d placements by the backend", len(r.orderAnswers), placedByBackend)
	if len(lies) > 0 {
		if len(lies) > 10 {
			lies = append(lies[:10], fmt.Sprintf("… and %d more", len(lies)-10))
		}
		t.Errorf("orders whose answer was not the truth:\n  %s", strings.Join(lies, "\n  "))
	}
}
