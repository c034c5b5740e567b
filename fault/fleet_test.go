package fault

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The backend fleet (docs/upstream.md) against real reference backends
// (exchange-sim processes) and the real exgate binary: shares by load,
// ejection and return, every instance down, and no order sent twice when
// an instance dies under load. Nothing here asserts a duration: shares
// are compared by counts with bounds no machine load can cross, ejection
// and return are read from /admin/status and the metrics, and waits only
// bound a hang.

// startBackendAt starts exchange-sim listening on addr ("127.0.0.1:0" for
// a free port) with args added.
func startBackendAt(t *testing.T, addr string, args ...string) *backend {
	t.Helper()
	p := startProcess(t, "exchange-sim", nil, bins(t).sim, append([]string{"-listen", addr}, args...)...)
	m := p.logLine(t, "listening", 20*time.Second)
	return &backend{process: p, url: "http://" + m["addr"].(string)}
}

// fleetConfig is a gateway in front of urls, with routes without limits
// (the tests send more than any default limit allows), fast health checks
// and ejections short enough to be seen ending.
func fleetConfig(urls ...string) string {
	return fmt.Sprintf(`listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:0"
upstream:
  urls: [%s]
  health_check: {path: /api/v1/mkt/currencies/, interval: 300ms, timeout: 300ms, healthy_threshold: 1, unhealthy_threshold: 2}
  outlier: {consecutive_connect_failures: 1, base_ejection_time: 1s, max_ejection_time: 2s, max_ejection_percent: 100}
log: {access: false}
overload: {enabled: false}
limiter: {store: memory}
routes:
  - {name: list_markets, match: "GET /api/v1/mkt/markets/"}
  - {name: place_order, match: "POST /api/v1/odr/orders/", auth: required, validate: order}
  - {name: rest, match: "*"}
`, `"`+strings.Join(urls, `", "`)+`"`)
}

// fleetState is the upstream part of /admin/status.
type fleetState []struct {
	Service   string `json:"service"`
	Available bool   `json:"available"`
	Instances []struct {
		Addr  string `json:"addr"`
		State string `json:"state"`
	} `json:"instances"`
}

// upstreamState reads the fleet's state from the console.
func (g *gateway) upstreamState(t *testing.T) fleetState {
	t.Helper()
	res, err := noKeepAlive().Get(g.admin + "/admin/status")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s struct {
		Upstream fleetState `json:"upstream"`
	}
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatalf("/admin/status: %v", err)
	}
	return s.Upstream
}

// instanceState is the state of the instance at addr, or "".
func (s fleetState) instanceState(addr string) string {
	for _, svc := range s {
		for _, in := range svc.Instances {
			if in.Addr == addr {
				return in.State
			}
		}
	}
	return ""
}

// waitFor polls cond until it holds; the deadline only bounds a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// served is how many requests the instance at addr ended with success.
func (g *gateway) served(t *testing.T, addr string) float64 {
	t.Helper()
	return g.metric(t, "exgate_upstream_instance_requests_total", `upstream_instance="`+addr+`"`, `outcome="success"`)
}

// getMarkets sends n GETs of the markets from workers goroutines and
// returns the answers' statuses and codes ("200", "503 upstream_unavailable").
func getMarkets(t *testing.T, g *gateway, workers, n int) map[string]int {
	t.Helper()
	client := newClient(t, workers)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				res, err := client.Get(g.url + "/api/v1/mkt/markets/")
				what := ""
				if err != nil {
					what = "error " + err.Error()
				} else {
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					what = fmt.Sprint(res.StatusCode)
					var e struct{ Code string }
					if res.StatusCode != http.StatusOK && json.Unmarshal(body, &e) == nil {
						what += " " + e.Code
					}
				}
				mu.Lock()
				got[what]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

// TestFleetSlowKilledAllDown runs a gateway in front of three reference
// backends, one of them slow: the slow one gets fewer requests than
// each fast one; one fast one killed is ejected while its requests go
// to the others (no client sees its death), and restarted it is sent
// requests again; with all three down the routes answer 503
// upstream_unavailable in JSON with Retry-After, and /readyz stays 200
// and names the service.
func TestFleetSlowKilledAllDown(t *testing.T) {
	fastA, fastB := startBackend(t), startBackend(t)
	slow := startBackendAt(t, "127.0.0.1:0", "-delay", "50ms")
	g := startGateway(t, fleetConfig(fastA.url, fastB.url, slow.url))
	addr := func(b *backend) string { return strings.TrimPrefix(b.url, "http://") }

	// Shares by load: 16 clients at once.
	if got := getMarkets(t, g, 16, 800); got["200"] != 800 {
		t.Fatalf("answers with every instance up: %v", got)
	}
	a, b, s := g.served(t, addr(fastA)), g.served(t, addr(fastB)), g.served(t, addr(slow))
	t.Logf("served: fast %v and %v, slow %v", a, b, s)
	if s >= a || s >= b {
		t.Errorf("the slow instance served %v, the fast ones %v and %v: want it fewer than each", s, a, b)
	}

	// One instance killed: ejected (or marked down), and no client
	// sees it die: its requests go to the others.
	fastB.kill()
	waitFor(t, "the killed instance leaves the rotation", func() bool {
		if got := getMarkets(t, g, 2, 10); got["200"] != 10 {
			t.Fatalf("answers while an instance died: %v; want every one 200 (a GET whose connect failed moves)", got)
		}
		st := g.upstreamState(t).instanceState(addr(fastB))
		return st == "ejected" || st == "down"
	})
	if got := g.metric(t, "exgate_upstream_retries_total", `service="default"`); got == 0 {
		t.Log("no request needed to move (the health check took the instance out first)")
	}

	// Restarted on its address: back in the rotation, and served.
	before := g.served(t, addr(fastB))
	fastB = startBackendAt(t, addr(fastB))
	waitFor(t, "the restarted instance serves again", func() bool {
		if got := getMarkets(t, g, 4, 40); got["200"] != 40 {
			t.Fatalf("answers after the restart: %v", got)
		}
		return g.served(t, addr(fastB)) > before
	})

	// Every instance down: JSON 503 upstream_unavailable, /readyz 200.
	fastA.kill()
	fastB.kill()
	slow.kill()
	res, err := noKeepAlive().Get(g.url + "/api/v1/mkt/markets/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var e struct{ Code, Detail string }
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/json" ||
		json.Unmarshal(body, &e) != nil || e.Code != "upstream_unavailable" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("with every instance down: %d %q %s (Retry-After %q); want a JSON 503 upstream_unavailable",
			res.StatusCode, res.Header.Get("Content-Type"), body, res.Header.Get("Retry-After"))
	}
	waitFor(t, "/readyz names the service", func() bool {
		res, err := noKeepAlive().Get(g.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("/readyz with every backend down: %d %s; want 200 (readiness is exgate's own)", res.StatusCode, body)
		}
		return strings.Contains(string(body), "service default: no available instance")
	})
	if got := g.metric(t, "exgate_upstream_service_available", `service="default"`); got != 0 {
		t.Errorf("exgate_upstream_service_available = %v with every instance down", got)
	}
	if got := getMarkets(t, g, 4, 20); got["503 upstream_unavailable"] != 20 {
		t.Errorf("answers with every instance down: %v", got)
	}
}

// recorder is a TCP front of a backend that keeps every byte a client
// sent through it: what reached the instance, even a request cut off.
type recorder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	got   strings.Builder
}

// startRecorder listens on a free loopback port and forwards to target.
func startRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, conns: map[net.Conn]bool{}}
	t.Cleanup(r.kill)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns[c], r.conns[up] = true, true
			r.mu.Unlock()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						r.mu.Lock()
						r.got.Write(buf[:n])
						r.mu.Unlock()
						if _, werr := up.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				up.Close()
			}()
		}
	}()
	return r
}

// kill stops the front as a dying instance stops: no new connection, and
// those open are cut.
func (r *recorder) kill() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

var identifierRE = regexp.MustCompile(`"identifier":\s*"([^"]+)"`)

// identifiers counts the order identifiers the front forwarded.
func (r *recorder) identifiers(into map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range identifierRE.FindAllStringSubmatch(r.got.String(), -1) {
		into[m[1]]++
	}
}

// TestFleetKillInstanceUnderLoad places orders through the real exgate in
// front of three reference backends and kills one of them (its
// connections cut, its port closed) while orders are under way: every
// order identifier reached the backends at most once — an order moves to
// another instance only when nothing of it was sent —, every order
// answered 2xx reached exactly one, and orders keep being placed after
// the death.
func TestFleetKillInstanceUnderLoad(t *testing.T) {
	var fronts []*recorder
	var urls []string
	for range 3 {
		b := startBackend(t)
		r := startRecorder(t, strings.TrimPrefix(b.url, "http://"))
		fronts = append(fronts, r)
		urls = append(urls, "http://"+r.ln.Addr().String())
	}
	g := startGateway(t, fleetConfig(urls...))
	token := accessToken(t, urls[0])

	const workers, perWorker = 8, 60
	client := newClient(t, workers)
	var answered atomic.Int64
	var mu sync.Mutex
	status := map[string]string{} // identifier → how it was answered
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				id := fmt.Sprintf("o-%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPost, g.url+"/api/v1/odr/orders/", strings.NewReader(
					`{"symbol":"BTC_USDT","type":"limit","side":"buy","price":"1000","base_amount":"0.001","identifier":"`+id+`"}`))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				what := ""
				if err != nil {
					what = "error"
				} else {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					what = fmt.Sprint(res.StatusCode)
				}
				mu.Lock()
				status[id] = what
				mu.Unlock()
				if answered.Add(1) == workers*perWorker/3 {
					once.Do(func() { fronts[1].kill(); close(killed) })
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatal("the instance was never killed")
	}

	reached := map[string]int{}
	for _, f := range fronts {
		f.identifiers(reached)
	}
	placed, byStatus := 0, map[string]int{}
	for id, what := range status {
		byStatus[what]++
		if n := reached[id]; n > 1 {
			t.Errorf("order %s reached the backends %d times (answered %s)", id, n, what)
		}
		if strings.HasPrefix(what, "2") {
			placed++
			if reached[id] != 1 {
				t.Errorf("order %s was answered %s but reached the backends %d times", id, what, reached[id])
			}
		}
	}
	t.Logf("answers: %v; orders reaching the backends: %d", byStatus, len(reached))
	if placed < workers*perWorker/2 {
		t.Errorf("only %d of %d orders placed: the fleet did not keep serving after the death (%v)", placed, workers*perWorker, byStatus)
	}
	for what, n := range byStatus {
		if !strings.HasPrefix(what, "2") && what != "502" && what != "503" {
			t.Errorf("%d orders answered %s; want 2xx, or 502/503 for those the death caught", n, what)
		}
	}
}
