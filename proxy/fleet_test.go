package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/unreachable"
	"github.com/exgate/exgate/overload"
	"github.com/exgate/exgate/upstream"
)

// startBackends starts n recording backends and returns them with their
// URLs.
func startBackends(t *testing.T, n int) ([]*backend, []config.URL) {
	t.Helper()
	var bes []*backend
	var urls []config.URL
	for range n {
		be := &backend{}
		s := httptest.NewServer(be)
		t.Cleanup(s.Close)
		bes = append(bes, be)
		urls = append(urls, config.MustURL(s.URL))
	}
	return bes, urls
}

const fleetOrder = `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.001"}`

// TestRouteForwardsToItsService sends a route naming a service to that
// service's instances, and every other route to the default service.
func TestRouteForwardsToItsService(t *testing.T) {
	bes, urls := startBackends(t, 3)
	e := startEnv(t, func(c *config.Config) {
		c.Upstream.URLs = urls[:2]
		c.Upstream.Services = map[string]config.Service{"markets": {URLs: urls[2:]}}
		c.Route("list_markets").Service = "markets"
	})
	for range 10 {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
		res.Body.Close()
		res = do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
		res.Body.Close()
	}
	for _, r := range bes[2].all() {
		if r.Path != "/api/v1/mkt/markets/" {
			t.Errorf("the markets service got %s", r.Path)
		}
	}
	if got := bes[2].count(); got != 10 {
		t.Errorf("the markets service got %d requests, want the route's 10", got)
	}
	if got := bes[0].count() + bes[1].count(); got != 10 {
		t.Errorf("the default service got %d requests, want the other route's 10", got)
	}
}

// TestOrderMovesOnlyWhenNothingWasSent points the default service at a
// live instance and one whose connects are refused: every order is
// placed once (those that met the refusal moved, nothing of them having
// been sent), while an order a live instance read and then dropped its
// connection on is answered 502 and never sent again — a GET dropped the
// same way moves to another instance.
func TestOrderMovesOnlyWhenNothingWasSent(t *testing.T) {
	refused := config.MustURL("http://" + unreachable.Refused(t))
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) {
		c.Upstream.URLs = []config.URL{refused, c.Upstream.URL}
		c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep the refusing instance in the rotation
	})
	for range 20 {
		res := postOrder(t, e, fleetOrder)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("order: %d %s", res.StatusCode, body)
		}
	}
	if got := e.backend.orders.Load(); got != 20 {
		t.Errorf("the live instance got %d orders, want each of the 20 once", got)
	}
	if got := e.gw.fleet.Service("").Counts().Retries; got == 0 {
		t.Error("no order met the refusing instance: the test proves nothing")
	}

	// An instance that reads the request and drops the connection.
	var dropped atomic.Int64
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if strings.Contains(r.URL.Path, "orders") {
			dropped.Add(1)
		}
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	t.Cleanup(drop.Close)
	e2 := startOrdersConfig(t, placed, nil, func(c *config.Config) {
		c.Upstream.URLs = []config.URL{config.MustURL(drop.URL), c.Upstream.URL}
		c.Upstream.Outlier.Consecutive5xx = 0
	})
	sentDrop := 0
	for range 20 {
		res := postOrder(t, e2, fleetOrder)
		res.Body.Close()
		if res.StatusCode == http.StatusBadGateway {
			sentDrop++
		} else if res.StatusCode/100 != 2 {
			t.Fatalf("order: %d", res.StatusCode)
		}
	}
	if int64(sentDrop) != dropped.Load() || e2.backend.orders.Load()+dropped.Load() != 20 {
		t.Errorf("orders: %d answered 502, %d read by the dropping instance, %d placed by the other; want each order sent once",
			sentDrop, dropped.Load(), e2.backend.orders.Load())
	}
	if sentDrop == 0 {
		t.Error("no order met the dropping instance: the test proves nothing")
	}
	for range 20 {
		res := do(t, "GET", e2.url+"/api/v1/mkt/markets/", nil)
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("GET with one instance dropping connections: %d; want it moved to the other", res.StatusCode)
		}
	}
}

// TestAccessLogNamesTheInstance writes the instance that served a request
// in its access log line.
func TestAccessLogNamesTheInstance(t *testing.T) {
	_, urls := startBackends(t, 2)
	e := startEnv(t, func(c *config.Config) {
		c.Upstream.URLs = urls
		c.Log.Access = true
	})
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	res.Body.Close()
	lines := e.logs.FilterMessage("request").All()
	if len(lines) == 0 {
		t.Fatal("no access log line")
	}
	got, _ := lines[len(lines)-1].ContextMap()["upstream_instance"].(string)
	if got != strings.TrimPrefix(urls[0].String(), "http://") && got != strings.TrimPrefix(urls[1].String(), "http://") {
		t.Errorf("upstream_instance %q, want one of %v", got, urls)
	}
}

// TestReloadedRouteToServiceNotStarted answers 503 upstream_unavailable on
// a route a reload pointed at a service the process did not start
// (services are fixed at start), rather than sending it elsewhere.
func TestReloadedRouteToServiceNotStarted(t *testing.T) {
	e := startEnv(t, nil)
	cfg := config.Default()
	cfg.Upstream = config.DefaultUpstream()
	cfg.Upstream.Services = map[string]config.Service{"later": {URLs: []config.URL{config.MustURL("http://127.0.0.1:1")}}}
	cfg.Route("list_markets").Service = "later"
	e.gw.Reload(cfg, e.gw.Rules(), nil)
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	assertError(t, res, http.StatusServiceUnavailable, "upstream_unavailable")
	if e.backend.count() != 0 {
		t.Error("the request reached the default service")
	}
}

// TestReloadedSplitToServiceNotStarted answers 503 upstream_unavailable on
// the share of a route's split that a reload gave to a service the
// process did not start, as for a route pointed at one (service:), and
// serves the share of a started one: before, the split was dropped
// whole and the route forwarded to the default service, which the
// requests of the other services were never meant for.
func TestReloadedSplitToServiceNotStarted(t *testing.T) {
	cases := []struct {
		name   string
		split  []config.SplitTarget
		sticky string
		want   int
	}{
		{name: "none started", split: []config.SplitTarget{{Service: "later", Weight: 9}, {Service: "later_canary", Weight: 1}},
			want: http.StatusServiceUnavailable},
		{name: "none started, sticky", split: []config.SplitTarget{{Service: "later", Weight: 9}, {Service: "later_canary", Weight: 1}},
			sticky: config.StickyAccount, want: http.StatusServiceUnavailable},
		{name: "the share of one not started", split: []config.SplitTarget{{Service: config.DefaultService, Weight: 0}, {Service: "later", Weight: 1}},
			want: http.StatusServiceUnavailable},
		{name: "the share of the started one", split: []config.SplitTarget{{Service: config.DefaultService, Weight: 1}, {Service: "later", Weight: 0}},
			want: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, nil)
			cfg := config.Default()
			cfg.Upstream = config.DefaultUpstream()
			cfg.Upstream.Services = map[string]config.Service{
				"later":        {URLs: []config.URL{config.MustURL("http://127.0.0.1:1")}},
				"later_canary": {URLs: []config.URL{config.MustURL("http://127.0.0.1:2")}},
			}
			r := cfg.Route("list_markets")
			r.Split, r.Sticky = tc.split, tc.sticky
			e.gw.Reload(cfg, e.gw.Rules(), nil)
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
			if tc.want == http.StatusOK {
				res.Body.Close()
				if res.StatusCode != tc.want || e.backend.count() != 1 {
					t.Errorf("status %d, %d requests at the default service, want %d, 1", res.StatusCode, e.backend.count(), tc.want)
				}
				return
			}
			assertError(t, res, tc.want, "upstream_unavailable")
			if e.backend.count() != 0 {
				t.Error("the request reached the default service")
			}
		})
	}
}

// controller is the concurrency limit of the default service's first
// instance: the one instance of the tests' gateways.
func (g *Gateway) controller() *overload.Controller {
	return g.fleet.Service("").Instances()[0].Controller
}

// TestOverloadLimitPerInstance gives each instance its own concurrency
// limit: with a fixed limit of one and no wait, one instance holding a
// request does not shed the next, which goes to the other instance (its
// own limit free); with both held, the next is shed.
func TestOverloadLimitPerInstance(t *testing.T) {
	release := make(chan struct{})
	held := make(chan string, 4)
	hold := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			held <- name
			<-release
		}
	}
	var urls []config.URL
	for _, name := range []string{"a", "b"} {
		s := httptest.NewServer(hold(name))
		t.Cleanup(s.Close)
		urls = append(urls, config.MustURL(s.URL))
	}
	e := startEnv(t, func(c *config.Config) {
		c.Upstream.URLs = urls
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.MarketData = 0
	})
	t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for them
	answers := make(chan int, 3)
	get := func() {
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
		res.Body.Close()
		answers <- res.StatusCode
	}
	go get()
	first := <-held
	go get()
	second := <-held
	if first == second {
		t.Fatalf("both held requests went to instance %s; the second should go to the instance with room", first)
	}
	res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	assertError(t, res, http.StatusServiceUnavailable, "overloaded")
	for _, inst := range e.gw.fleet.Service("").Instances() {
		if got := inst.Controller.InFlight(); got != 1 {
			t.Errorf("instance %s holds %d slots of its own limit, want 1", inst.Addr, got)
		}
	}
}

// TestOverloadLimitCountsTheRotation sums only the limits of instances
// requests go to: with a fixed limit of 3 at each of two instances, the
// gauge reads 6, and 3 once the instance that refuses connections is
// ejected (its limit lets nothing be under way).
func TestOverloadLimitCountsTheRotation(t *testing.T) {
	refused := config.MustURL("http://" + unreachable.Refused(t))
	e := startOrdersConfig(t, placed, nil, func(c *config.Config) {
		c.Upstream.URLs = []config.URL{refused, c.Upstream.URL}
		c.Upstream.Outlier.ConsecutiveConnectFailures = 1
		c.Overload.FixedLimit = 3
	})
	gauge := fleetOverload{e.gw.fleet}
	if got := gauge.Limit(); got != 6 {
		t.Fatalf("limit with both instances in the rotation: %d, want 6", got)
	}
	for i := 0; e.gw.fleet.Service("").State().Ejected == 0; i++ {
		if i == 100 {
			t.Fatal("the refusing instance was never ejected")
		}
		res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
		res.Body.Close()
	}
	if got := gauge.Limit(); got != 3 {
		t.Errorf("limit with the refusing instance ejected: %d, want 3 (the instance in the rotation)", got)
	}
}

// TestMovedGETChargedOnceServed: a GET moves from an instance that read
// it and dropped the connection to one whose connects are refused (and
// back, up to three attempts, in either order). It was served, so its
// charge stays whatever its last instance did: answered 502, and the
// limit refuses once it is spent. A GET no instance took a connection
// for costs nothing: answered 503, and never refused by the limit.
func TestMovedGETChargedOnceServed(t *testing.T) {
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.Close()
		}
	}))
	t.Cleanup(drop.Close)
	const limit = 10
	cases := []struct {
		name      string
		instances []config.URL
		status    int
		charged   bool
	}{
		{"one read it, the other refused", []config.URL{config.MustURL(drop.URL), config.MustURL("http://" + unreachable.Refused(t))},
			http.StatusBadGateway, true},
		{"both refused", []config.URL{config.MustURL("http://" + unreachable.Refused(t)), config.MustURL("http://" + unreachable.Refused(t))},
			http.StatusServiceUnavailable, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startLimited(t, nil, func(c *config.Config) {
				c.Upstream.URLs = tc.instances
				c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep every instance in the rotation
				c.Upstream.Outlier.Consecutive5xx = 0
				c.Route("list_matches").Limits[0].Rate = config.Rate{N: limit, Period: time.Hour}
				c.Route("list_matches").Limits[0].Burst = 0
			})
			for i := range 2 * limit {
				res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
				res.Body.Close()
				want := tc.status
				if tc.charged && i >= limit {
					want = http.StatusTooManyRequests
				}
				if res.StatusCode != want {
					t.Fatalf("GET %d: %d, want %d", i, res.StatusCode, want)
				}
			}
			if e.gw.fleet.Service("").Counts().Retries == 0 {
				t.Error("no GET moved: the test proves nothing")
			}
		})
	}
}

// TestEarlyShedDecidedWhereItGoes: a client holds the one slot of some
// instances, whose queues shed its class; another instance is free. Its
// requests are shed on arrival (before anything is charged) by the
// instance the balancer chose, or let in by it — and then sent there,
// never to an instance (or a split's service) that did not decide them:
// some are served, each by the free instance, and at most one waits in
// a full instance's queue to be shed there. That one is the queue's own
// probe: a class shed at every arrival is still let in at about 7 in
// 65,536 (overload.Controller.Admit's probability saturates there, so
// that a queue that frees up is seen again), about 1 run in 100 of 60
// requests; two in one run, about 1 in 10^5, is a decision made
// elsewhere.
func TestEarlyShedDecidedWhereItGoes(t *testing.T) {
	cases := []struct {
		name string
		set  func(c *config.Config, urls []config.URL) // points the services at urls
		held map[string]int                            // by service, how many of its first instances the client holds
	}{
		{"one service of three instances", func(c *config.Config, urls []config.URL) {
			c.Upstream.URLs = urls
		}, map[string]int{"": 2}},
		{"a route split between two services", func(c *config.Config, urls []config.URL) {
			c.Upstream.URLs = urls[:1]
			c.Upstream.Services = map[string]config.Service{"canary": {URLs: urls[1:2]}}
			c.Route("list_markets").Split = []config.SplitTarget{{Service: config.DefaultService, Weight: 1}, {Service: "canary", Weight: 1}}
		}, map[string]int{"": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, urls := startBackends(t, 3)
			e := startEnv(t, func(c *config.Config) {
				tc.set(c, urls)
				c.Overload.FixedLimit = 1
				c.Overload.MaxWait.MarketData = time.Millisecond
				c.Overload.ShedDelay = 0
				c.Log.Access = true
			})
			who := overload.Client(clientKey("", netip.MustParseAddr("127.0.0.1"), e.gw.plan.Load()))
			busy := map[string]bool{}
			for svc, n := range tc.held {
				for _, inst := range e.gw.fleet.Service(svc).Instances()[:n] {
					busy[inst.Addr] = true
					holdAndShed(t, inst.Controller, who)
				}
			}
			const n = 60
			served := 0
			for range n {
				res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					served++
				case http.StatusServiceUnavailable:
				default:
					t.Fatalf("GET: %d, want 200 or 503 overloaded", res.StatusCode)
				}
			}
			probes := 0
			for _, l := range e.logs.FilterMessage("request").All() {
				f := l.ContextMap()
				if inst, _ := f["upstream_instance"].(string); busy[inst] {
					if probes++; probes > 1 || f["code"] != "overloaded" {
						t.Fatalf("a request went to %s, whose queue sheds: %v", inst, f)
					}
				}
			}
			byFree := 0
			for i, u := range urls {
				if !busy[strings.TrimPrefix(u.String(), "http://")] {
					byFree += bes[i].count()
				}
			}
			if served == 0 || served == n || byFree != served {
				t.Errorf("%d of %d served, %d by the free instance; want some of them served, each by the free one", served, n, byFree)
			}
		})
	}
}

// holdAndShed has who hold ctl's one slot, and its queue shed market
// data: a hundred such requests waited there in vain.
func holdAndShed(t *testing.T, ctl *overload.Controller, who overload.Client) {
	t.Helper()
	ctx := context.Background()
	if ok, _ := ctl.Acquire(ctx, overload.Cancel, who); !ok {
		t.Fatal("the first slot was not free")
	}
	for range 100 {
		if ok, _ := ctl.Acquire(ctx, overload.MarketData, who); ok {
			t.Fatal("a second slot over the fixed limit of one")
		}
	}
}

// orderFleet is three instances on loopback behind a gateway, the second
// of which answers every order 503 while its link is down (its reads
// 200), and every one of which answers 500 to a poison order (one of
// poisonAmount: a shape its matching engine chokes on, as a backend bug
// would), each recording the order identifiers that reached it. Its
// orders are placed by two traders, from two loopback addresses: two
// clients, as the limits and outlier detection tell them apart.
type orderFleet struct {
	e         *env
	badAddr   string
	traders   [2]*http.Client // from 127.0.0.2 and 127.0.0.3
	linkDown  atomic.Bool
	halfDown  atomic.Bool // the bad instance fails every other order it is sent instead
	badOrders atomic.Int64
	orders    [3]atomic.Int64 // the orders each instance was sent
	good      [3]atomic.Int64 // of which placed (answered 201)
	mu        sync.Mutex
	reached   map[string]int  // order identifier → the times it reached an instance
	badSeen   strings.Builder // what the bad instance answered, in order: r a read, w a failed order
	badFrom   map[string]int  // client address → the orders of it the bad instance failed
	sent      int             // orders placed
}

// poisonAmount is the base amount of a poison order.
const poisonAmount = "0.0066"

// startOrderFleet starts the fleet with consecutive_5xx 3, a failure
// percentage of 50 over 10 requests, and ejections of 2s, the link down
// when linkDown.
func startOrderFleet(t *testing.T, linkDown bool) *orderFleet {
	f := &orderFleet{reached: map[string]int{}, badFrom: map[string]int{}}
	f.linkDown.Store(linkDown)
	for i := range f.traders {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}}
		f.traders[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		t.Cleanup(f.traders[i].CloseIdleConnections)
	}
	var urls []config.URL
	for i, bad := range []bool{false, true, false} {
		s := httptest.NewServer(f.instance(i, bad))
		t.Cleanup(s.Close)
		urls = append(urls, config.MustURL(s.URL))
	}
	f.badAddr = strings.TrimPrefix(urls[1].URL.String(), "http://")
	f.e = startOrdersConfig(t, placed, nil, func(c *config.Config) {
		c.Upstream.URLs = urls
		c.Upstream.Outlier.Consecutive5xx = 3
		c.Upstream.Outlier.BaseEjectionTime = 2 * time.Second
		c.Upstream.Outlier.MaxEjectionTime = 4 * time.Second
		c.Upstream.Outlier.FailurePercentageThreshold = 50
		c.Upstream.Outlier.FailurePercentageRequestVolume = 10
	})
	return f
}

// instance is the i-th instance's handler.
func (f *orderFleet) instance(i int, bad bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		order := r.Method == http.MethodPost
		var o struct {
			Identifier string
			BaseAmount string `json:"base_amount"`
		}
		_ = json.Unmarshal(body, &o)
		failing := bad && order && f.linkDown.Load()
		if bad && order && f.halfDown.Load() {
			failing = f.badOrders.Load()%2 == 0 // the first, third, … it is sent
		}
		f.mu.Lock()
		if bad && (!order || failing) {
			f.badSeen.WriteString(map[bool]string{true: "w", false: "r"}[order])
		}
		if failing {
			f.badFrom[r.Header.Get("X-Real-IP")]++
		}
		if order {
			f.reached[o.Identifier]++
			f.orders[i].Add(1)
		}
		f.mu.Unlock()
		if bad && order {
			f.badOrders.Add(1)
		}
		switch {
		case order && o.BaseAmount == poisonAmount:
			http.Error(w, `{"detail":"internal error"}`, http.StatusInternalServerError)
		case failing:
			http.Error(w, `{"detail":"matching engine unreachable"}`, http.StatusServiceUnavailable)
		default:
			if order {
				f.good[i].Add(1)
			}
			placed(w, r)
		}
	}
}

// status is the bad instance's.
func (f *orderFleet) status(t *testing.T) upstream.InstanceStatus {
	t.Helper()
	for _, st := range f.e.gw.fleet.Service("").Status() {
		if st.Addr == f.badAddr {
			return st
		}
	}
	t.Fatalf("no instance %s", f.badAddr)
	return upstream.InstanceStatus{}
}

// place places an order of a new identifier, for each trader in turn,
// and returns its status.
func (f *orderFleet) place(t *testing.T) int {
	t.Helper()
	return f.placeAs(t, f.sent%len(f.traders), "0.001")
}

// placeAs places an order of a new identifier and the base amount for
// the trader who and returns its status.
func (f *orderFleet) placeAs(t *testing.T, who int, amount string) int {
	t.Helper()
	f.sent++
	body := fmt.Sprintf(`{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":%q,"identifier":"o-%d"}`, amount, f.sent)
	req, err := http.NewRequest("POST", f.e.url+"/api/v1/odr/orders/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	res, err := f.traders[who].Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// read sends a GET, which must not fail.
func (f *orderFleet) read(t *testing.T) {
	t.Helper()
	res := do(t, "GET", f.e.url+"/api/v1/mkt/markets/", nil)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode >= 500 {
		t.Fatalf("a read answered %d", res.StatusCode)
	}
}

// ejectedForOrders sends reads and orders, of each trader in turn,
// until the bad instance is ejected, and checks why and when: once its
// run of failed orders holds two of each trader's (a run of one client's
// failures alone ejects nothing, nor one with a single failure of
// another's), for the run of its writes when its reads' successes came
// between them (a read is drawn to it about once in three), else for
// the run over both kinds.
func (f *orderFleet) ejectedForOrders(t *testing.T) {
	deadline := time.Now().Add(time.Minute) // only bounds a hang
	for f.status(t).State != "ejected" {
		if time.Now().After(deadline) {
			t.Fatalf("never ejected: %+v", f.status(t))
		}
		for range 3 {
			f.read(t)
		}
		f.place(t)
	}
	st := f.status(t)
	f.mu.Lock()
	seen, from := f.badSeen.String(), maps.Clone(f.badFrom)
	f.mu.Unlock()
	want := "consecutive_5xx_writes"
	if !strings.Contains(strings.Trim(seen, "r"), "r") {
		want = "consecutive_5xx"
	}
	failed, least := 0, -1
	for _, n := range from {
		failed += n
		if least < 0 || n < least {
			least = n
		}
	}
	if st.Reason != want || st.Ejections[want] != 1 || st.Requests["server_error"] != uint64(failed) || len(from) != 2 || least != 2 {
		t.Fatalf("ejected: %+v after %q, the traders' failed orders there %v; want for %s once each trader had two",
			st, seen, from, want)
	}
	for _, ss := range (fleetStatus{f.e.gw.fleet}).FleetStatus() {
		for _, in := range ss.Instances {
			if in.Addr == f.badAddr && in.Ejections[want] != 1 {
				t.Errorf("the metrics' ejections of %s: %v", f.badAddr, in.Ejections)
			}
		}
	}
}

// placedOnce checks that every order placed reached the instances once: a
// 5xx is an answer, and an order answered is never sent again.
func (f *orderFleet) placedOnce(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, k := range f.reached {
		if k != 1 {
			t.Errorf("order %s reached the instances %d times", id, k)
		}
	}
	if len(f.reached) != f.sent {
		t.Errorf("%d orders sent, %d reached an instance", f.sent, len(f.reached))
	}
}

// TestInstanceFailingOnlyOrdersEjected runs the default service over three
// real instances on loopback, one of which answers every order 503 (its
// link to the matching engine down) and every read 200, reads and two
// traders' orders interleaved so that its reads' successes come between
// its orders' failures: it is ejected for its writes
// (consecutive_5xx_writes) while its reads succeed, once its run of
// failed orders is not one trader's alone, no order goes to it while it
// is ejected, it comes back once its ejection ends and places orders
// again once its link is back, and no order reaches the instances twice
// (a 5xx answer is an answer: the order is never sent to another
// instance).
func TestInstanceFailingOnlyOrdersEjected(t *testing.T) {
	f := startOrderFleet(t, true)
	t.Run("ejected for its orders while its reads succeed", f.ejectedForOrders)

	t.Run("no order while ejected", func(t *testing.T) {
		before, sent := f.badOrders.Load(), 0
		for range 30 {
			until := f.status(t).EjectedUntil
			if code := f.place(t); code/100 != 2 {
				t.Fatalf("an order while the bad instance is ejected answered %d", code)
			}
			if st := f.status(t); st.State != "ejected" || !st.EjectedUntil.Equal(until) {
				break // the ejection ended meanwhile: the orders before it prove it
			}
			sent++
		}
		if got := f.badOrders.Load(); got != before || sent == 0 {
			t.Errorf("the ejected instance got %d orders of %d sent while it was ejected", got-before, sent)
		}
	})

	t.Run("back after its ejection, placing orders again", func(t *testing.T) {
		f.linkDown.Store(false)
		deadline := time.Now().Add(time.Minute)
		for f.status(t).State != "healthy" {
			if time.Now().After(deadline) {
				t.Fatalf("never back: %+v", f.status(t))
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := f.badOrders.Load()
		for i := 0; f.badOrders.Load() == before; i++ {
			if i == 300 {
				t.Fatal("300 orders and none reached the instance back in the rotation")
			}
			if code := f.place(t); code/100 != 2 {
				t.Fatalf("an order answered %d with every instance well", code)
			}
		}
	})
	f.placedOnce(t)
}

// TestOneClientsPoisonOrdersEjectNothing runs the default service over
// three real instances on loopback, every one of which answers 500 to a
// poison order (a shape its matching engine chokes on): one trader sends
// 60 of them in a row, which before ejected an instance after every
// third failure there (up to max_ejection_percent of the fleet, again
// after each ejection ended). None is ejected now: the run of an
// instance's failures is that one client's alone. The other trader's
// orders, sent between more of them, are placed at every instance; no
// order reaches the instances twice.
func TestOneClientsPoisonOrdersEjectNothing(t *testing.T) {
	f := startOrderFleet(t, false)
	for i := range 60 {
		if code := f.placeAs(t, 0, poisonAmount); code != http.StatusInternalServerError {
			t.Fatalf("poison order %d answered %d, want the backend's 500", i, code)
		}
	}
	for i := range f.orders {
		if n := f.orders[i].Load(); n < 3 {
			t.Fatalf("instance %d was sent %d poison orders of 60, fewer than consecutive_5xx", i, n)
		}
	}
	for i := 0; f.good[0].Load() == 0 || f.good[1].Load() == 0 || f.good[2].Load() == 0; i++ {
		if i == 300 {
			t.Fatalf("300 orders of the other trader, placed at the instances %d, %d, %d", f.good[0].Load(), f.good[1].Load(), f.good[2].Load())
		}
		if code := f.placeAs(t, 0, poisonAmount); code != http.StatusInternalServerError {
			t.Fatalf("a poison order answered %d", code)
		}
		if code := f.placeAs(t, 1, "0.001"); code/100 != 2 {
			t.Fatalf("the other trader's order answered %d", code)
		}
	}
	svc := f.e.gw.fleet.Service("")
	if st := svc.State(); st.Ejected != 0 || st.Healthy != 3 {
		t.Errorf("the service after one trader's poison orders: %+v, want every instance healthy", st)
	}
	for _, ss := range (fleetStatus{f.e.gw.fleet}).FleetStatus() {
		for _, in := range ss.Instances {
			for why, n := range in.Ejections {
				if n != 0 {
					t.Errorf("%s ejected %d times for %s", in.Addr, n, why)
				}
			}
			if in.Requests["server_error"] == 0 {
				t.Errorf("%s answered no poison order: %v", in.Addr, in.Requests)
			}
		}
	}
	f.placedOnce(t)
}

// TestInstanceFailingHalfItsOrdersEjected runs the default service over
// three real instances on loopback, one of which fails every other order
// it is sent (503), two traders placing orders in turn: its successes end
// every run of failures, so consecutive_5xx never ejects it, and it is
// ejected for its failure percentage (50 over its last 10 orders) once
// its failures are not mostly one trader's; its answers (503 or 201)
// reach the traders, and no order reaches the instances twice.
func TestInstanceFailingHalfItsOrdersEjected(t *testing.T) {
	f := startOrderFleet(t, false)
	f.halfDown.Store(true)
	deadline := time.Now().Add(time.Minute) // only bounds a hang
	for f.status(t).State != "ejected" {
		if time.Now().After(deadline) {
			t.Fatalf("never ejected: %+v", f.status(t))
		}
		if code := f.place(t); code != http.StatusCreated && code != http.StatusServiceUnavailable {
			t.Fatalf("an order answered %d", code)
		}
	}
	st := f.status(t)
	f.mu.Lock()
	from := maps.Clone(f.badFrom)
	f.mu.Unlock()
	failed := st.Requests["server_error"]
	if st.Reason != "failure_percentage" || st.Ejections["failure_percentage"] != 1 || failed == 0 ||
		st.Requests["success"] < failed-1 || len(from) != 2 {
		t.Fatalf("ejected: %+v, the traders' failed orders there %v; want for its failure percentage, half its orders failed, of both traders", st, from)
	}
	for why, n := range st.Ejections {
		if why != "failure_percentage" && n != 0 {
			t.Errorf("also ejected %d times for %s", n, why)
		}
	}
	f.placedOnce(t)
}

// TestQueuedOrderLeavesInstanceOutOfRotation fills two instances' limits
// of one with reads they hold, queues an order at one of them, and takes
// that one out of the rotation (ejected, or gone from the list as from
// DNS): the order, which never left exgate, is picked again and waits at
// the other, and once that one has room it is placed there, once; the
// instance that left never sees it.
func TestQueuedOrderLeavesInstanceOutOfRotation(t *testing.T) {
	tests := []struct {
		name  string
		leave func(t *testing.T, svc *upstream.Service, left *upstream.Instance, stays upstream.Endpoint)
	}{
		{"ejected", func(t *testing.T, svc *upstream.Service, left *upstream.Instance, _ upstream.Endpoint) {
			for who := range upstream.Client(2) { // requests of two other clients fail there
				failed, err := svc.PickPeeked(left)
				if err != nil || failed != left {
					t.Fatal("the instance is not in the rotation")
				}
				failed.Done(upstream.ServerError, upstream.Write, who+1)
			}
		}},
		{"gone from the list", func(_ *testing.T, svc *upstream.Service, _ *upstream.Instance, stays upstream.Endpoint) {
			svc.Update([]upstream.Endpoint{stays})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var orders [2]atomic.Int64
			release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
			held := make(chan int, 2)
			var urls []config.URL
			for i := range 2 {
				s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet {
						held <- i
						<-release[i]
						return
					}
					orders[i].Add(1)
					placed(w, r)
				}))
				t.Cleanup(s.Close)
				urls = append(urls, config.MustURL(s.URL))
			}
			e := startOrdersConfig(t, placed, nil, func(c *config.Config) {
				c.Upstream.URLs = urls
				c.Upstream.Outlier.Consecutive5xx = 1
				c.Overload.FixedLimit = 1
				c.Overload.MaxWait.Place = time.Minute // only the instance's leaving ends it
			})
			t.Cleanup(func() { close(release[0]); close(release[1]) }) // before the gateway's shutdown waits for them
			for range 2 {
				go func() {
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
					res.Body.Close()
				}()
				<-held
			}
			answered := make(chan int, 1)
			go func() {
				res := postOrder(t, e, fleetOrder)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				answered <- res.StatusCode
			}()
			svc := e.gw.fleet.Service("")
			insts := svc.Instances()
			at := waitQueued(t, insts)
			stays := 1 - at
			tt.leave(t, svc, insts[at], upstream.Endpoint{URL: urls[stays].URL})
			if got := waitQueued(t, insts); got != stays {
				t.Fatalf("the order waits at instance %d, want it picked again for %d", got, stays)
			}
			release[stays] <- struct{}{} // its held read ends: the order takes its slot
			if code := <-answered; code/100 != 2 {
				t.Fatalf("the order answered %d", code)
			}
			if orders[at].Load() != 0 || orders[stays].Load() != 1 {
				t.Errorf("orders: %d at the instance that left, %d at the other; want 0 and 1", orders[at].Load(), orders[stays].Load())
			}
		})
	}
}

// waitQueued returns the index of the instance a request waits at.
func waitQueued(t *testing.T, insts []*upstream.Instance) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // only bounds a hang
	for time.Now().Before(deadline) {
		for i, inst := range insts {
			if inst.Controller.Waiting() == 1 {
				return i
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no request waits at an instance")
	return -1
}

// TestCancelGoesWhereThereIsRoom: the balancer compares requests under
// way per unit of weight, not limits, so it may choose an instance whose
// limit, the cancels' headroom included, is full while another has room.
// A cancel chosen for it waited there for a slot, its class's wait, and
// was shed 503 with the other instance's slots free; it goes to the
// instance with room. Instance a (weight 10) holds its fixed limit of 4
// and its headroom with requests of five clients the backend keeps;
// b (weight 1) holds one: a has fewer per unit of weight, and is chosen.
func TestCancelGoesWhereThereIsRoom(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"one order", "/api/v1/odr/orders/2/"},
		{"two orders", "/api/v1/odr/orders/2,3/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			held := make(chan string, 8)
			var cancels [2]atomic.Int64
			var urls []config.URL
			for i, name := range []string{"a", "b"} {
				s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet || r.URL.Path == "/api/v1/odr/orders/1/" {
						held <- name
						<-release
						return
					}
					cancels[i].Add(1)
					w.WriteHeader(http.StatusOK)
				}))
				t.Cleanup(s.Close)
				urls = append(urls, config.MustURL(s.URL))
			}
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = urls
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Overload.FixedLimit = 4 // and a headroom of 1 for cancels
				c.Overload.MaxWait.MarketData = 0
				c.Overload.MaxWait.Cancel = 300 * time.Millisecond // what a cancel waits at a full instance
			})
			t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for them
			svc := e.gw.fleet.Service("")
			send := func(method, path, from string) {
				go func() {
					res := do(t, method, e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", from)
					res.Body.Close()
				}()
			}
			svc.Update([]upstream.Endpoint{{URL: urls[1].URL, Weight: 1}})
			send("GET", "/api/v1/mkt/markets/", "10.0.0.10")
			if got := <-held; got != "b" {
				t.Fatalf("the first request went to %s", got)
			}
			svc.Update([]upstream.Endpoint{{URL: urls[0].URL, Weight: 10}, {URL: urls[1].URL, Weight: 1}})
			for i := range 5 { // four reads and a cancel fill a's limit and headroom
				method, path := "GET", "/api/v1/mkt/markets/"
				if i == 4 {
					method, path = "DELETE", "/api/v1/odr/orders/1/"
				}
				send(method, path, fmt.Sprintf("10.0.0.%d", i+1))
				if got := <-held; got != "a" {
					t.Fatalf("request %d went to %s, want a (fewer under way per unit of weight)", i, got)
				}
			}
			res := do(t, "DELETE", e.url+tc.path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", "10.0.0.99")
			answer, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("cancel answered %d %s with instance a full and b holding 1 of its 4 slots, want 200", res.StatusCode, answer)
			}
			if got := cancels[1].Load(); got != 1 {
				t.Errorf("instance b received %d cancels, want 1", got)
			}
			for i, inst := range svc.Instances() {
				if i == 0 && inst.Controller.InFlight() != 5 {
					t.Errorf("instance a holds %d slots, want its limit and headroom, 5", inst.Controller.InFlight())
				}
			}
		})
	}
}

// TestCancelRetriesPastReads: a cancel whose connect an instance refused
// reached no instance and moves to another, within the retry budget; the
// reads of other clients moved off that instance, held by a slow backend,
// had spent the budget, and the cancel was refused. Cancels may go over
// the budget by an eighth of it (at least one); a read past it is still
// refused. Budget: one retry at once (min_retries 1, percent 0), spent by
// a read the live instance holds.
func TestCancelRetriesPastReads(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		moved              bool // it goes to the live instance
	}{
		{"cancel", "DELETE", "/api/v1/odr/orders/2/", true},
		{"read", "GET", "/api/v1/mkt/currencies/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			held := make(chan struct{}, 4)
			live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/mkt/markets/" {
					held <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(live.Close)
			refused := config.MustURL("http://" + unreachable.Refused(t))
			liveURL := config.MustURL(live.URL)
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = []config.URL{liveURL, refused}
				c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep the refusing instance in the rotation
				c.Upstream.RetryBudget.Percent, c.Upstream.RetryBudget.MinRetries = 0, 1
			})
			t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for them
			svc := e.gw.fleet.Service("")
			read := func() {
				go func() {
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
					res.Body.Close()
				}()
				<-held
			}
			svc.Update([]upstream.Endpoint{{URL: liveURL.URL}})
			read() // held at the live instance: the refusing one has fewer under way
			svc.Update([]upstream.Endpoint{{URL: liveURL.URL}, {URL: refused.URL}})
			read() // refused, moved to the live instance, held: the budget's one retry
			if got := svc.Counts().Retries; got != 1 {
				t.Fatalf("%d retries, want the read's 1", got)
			}
			res := do(t, tc.method, e.url+tc.path, nil, "Authorization", "Bearer t0ken")
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got := res.StatusCode == http.StatusOK; got != tc.moved {
				t.Errorf("answered %d %s with the retry budget spent by a read; moved to the live instance: %v, want %v",
					res.StatusCode, body, got, tc.moved)
			}
		})
	}
}

// TestRetriedCancelGoesWhereThereIsRoom: a cancel whose connect an
// instance refused is moved to the instance the balancer draws among the
// others, by requests under way per unit of weight, not by limit; one
// moved to an instance whose limit and headroom were full waited there
// its class's wait and was refused while a third had room. It goes to
// the instance with room. r refuses connections (weight 1000: the cancel
// is drawn there), f (weight 10) holds its fixed limit of 4 and its
// headroom, l (weight 1) one request: f has fewer per unit of weight.
func TestRetriedCancelGoesWhereThereIsRoom(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"one order", "/api/v1/odr/orders/2/"},
		{"two orders", "/api/v1/odr/orders/2,3/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			held := make(chan string, 8)
			var cancels atomic.Int64
			var urls []config.URL
			for _, name := range []string{"f", "l"} {
				s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet || r.URL.Path == "/api/v1/odr/orders/1/" {
						held <- name
						<-release
						return
					}
					if name == "l" {
						cancels.Add(1)
					}
					w.WriteHeader(http.StatusOK)
				}))
				t.Cleanup(s.Close)
				urls = append(urls, config.MustURL(s.URL))
			}
			refused := config.MustURL("http://" + unreachable.Refused(t))
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = append(urls, refused)
				c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep the refusing instance in the rotation
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Overload.FixedLimit = 4                          // and a headroom of 1 for cancels
				c.Overload.MaxWait.Cancel = 300 * time.Millisecond // what a cancel waits at a full instance
			})
			t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for them
			svc := e.gw.fleet.Service("")
			send := func(method, path, from, at string) {
				go func() {
					res := do(t, method, e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", from)
					res.Body.Close()
				}()
				if got := <-held; got != at {
					t.Fatalf("%s %s went to %s, want %s", method, path, got, at)
				}
			}
			svc.Update([]upstream.Endpoint{{URL: urls[1].URL}})
			send("GET", "/api/v1/mkt/markets/", "10.0.0.10", "l")
			svc.Update([]upstream.Endpoint{{URL: urls[0].URL}})
			for i := range 4 {
				send("GET", "/api/v1/mkt/markets/", fmt.Sprintf("10.0.0.%d", i+1), "f")
			}
			send("DELETE", "/api/v1/odr/orders/1/", "10.0.0.5", "f") // the headroom
			svc.Update([]upstream.Endpoint{{URL: refused.URL, Weight: 1000}, {URL: urls[0].URL, Weight: 10}, {URL: urls[1].URL, Weight: 1}})
			res := do(t, "DELETE", e.url+tc.path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", "10.0.0.99")
			answer, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("cancel answered %d %s with f full and l holding 1 of its 4 slots, want 200", res.StatusCode, answer)
			}
			if got := cancels.Load(); got != 1 {
				t.Errorf("instance l received %d cancels, want 1", got)
			}
			if got := svc.Counts().Retries; got != 1 {
				t.Errorf("%d retries, want 1: the cancel did not meet the refusing instance", got)
			}
		})
	}
}

// fullPair is two backend instances, a and b, that keep every read and
// every cancel of order 1 until the test lets it go, and count the other
// cancels they answer: the set-up of the tests of a cancel waiting at a
// full instance while a slot is freed at the other.
type fullPair struct {
	t       *testing.T
	urls    []config.URL
	held    chan heldAt
	holds   []heldAt
	cancels [2]atomic.Int64 // the cancels a and b answered
}

// heldAt is a request an instance of a fullPair keeps: the instance, the
// method, and the channel whose close lets it go (nil once let go).
type heldAt struct {
	at, method string
	release    chan struct{}
}

// newFullPair starts a fullPair's instances.
func newFullPair(t *testing.T) *fullPair {
	p := &fullPair{t: t, held: make(chan heldAt, 16)}
	for i, name := range []string{"a", "b"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet || r.URL.Path == "/api/v1/odr/orders/1/" {
				h := heldAt{name, r.Method, make(chan struct{})}
				p.held <- h
				<-h.release
				return
			}
			p.cancels[i].Add(1)
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(s.Close)
		p.urls = append(p.urls, config.MustURL(s.URL))
	}
	return p
}

// fill fills each instance through e, the gateway at a fixed limit of 4
// and a headroom of 1, with four reads and a cancel of other clients,
// svc's rotation set to each instance alone in turn; the requests are
// let go when the test ends, before the gateway's shutdown waits for
// them.
func (p *fullPair) fill(e *env, svc *upstream.Service) {
	t := p.t
	t.Cleanup(func() {
		for _, h := range p.holds {
			if h.release != nil {
				close(h.release)
			}
		}
	})
	for i := range p.urls {
		svc.Update([]upstream.Endpoint{{URL: p.urls[i].URL}})
		for j := range 5 {
			method, path := "GET", "/api/v1/mkt/markets/"
			if j == 4 {
				method, path = "DELETE", "/api/v1/odr/orders/1/"
			}
			from := fmt.Sprintf("10.0.%d.%d", i, j+1)
			go func() {
				res := do(t, method, e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", from)
				res.Body.Close()
			}()
			p.holds = append(p.holds, <-p.held)
		}
	}
}

// cancel sends the trader's cancel of path through e and returns the
// channel its status arrives on.
func (p *fullPair) cancel(e *env, path string) <-chan int {
	answered := make(chan int, 1)
	go func() {
		res := do(p.t, "DELETE", e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", "10.0.9.9")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		answered <- res.StatusCode
	}()
	return answered
}

// letGo lets go one request of method that instance at keeps.
func (p *fullPair) letGo(at, method string) {
	for k, h := range p.holds {
		if h.at == at && h.method == method && h.release != nil {
			close(h.release)
			p.holds[k].release = nil
			return
		}
	}
}

// TestQueuedCancelTakesASlotFreedElsewhere: with every instance's limit
// and cancels' headroom full, a cancel waits at the instance chosen for
// it; a slot another instance freed first went to nobody, and the
// cancel waited on, its class's wait, and was shed 503 overloaded while
// that slot stood free. It takes the first slot freed for it anywhere in
// the rotation. Instances a and b (fixed limit 4, headroom 1) each hold
// four reads and a cancel of other clients the backend keeps; the cancel
// waits at one, and a request held at the other is let go.
func TestQueuedCancelTakesASlotFreedElsewhere(t *testing.T) {
	for _, tc := range []struct{ name, path, freed string }{
		{"one order, a read freed", "/api/v1/odr/orders/2/", "GET"},
		{"two orders, a cancel freed", "/api/v1/odr/orders/2,3/", "DELETE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFullPair(t)
			urls := p.urls
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = urls
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Overload.FixedLimit = 4 // and a headroom of 1 for cancels
				c.Overload.MaxWait.MarketData = 0
				c.Overload.MaxWait.Cancel = 2 * time.Second // what a cancel waits at a full instance
			})
			svc := e.gw.fleet.Service("")
			p.fill(e, svc)
			svc.Update([]upstream.Endpoint{{URL: urls[0].URL}, {URL: urls[1].URL}})
			insts := svc.Instances()
			answered := p.cancel(e, tc.path)
			at := waitQueued(t, insts)
			other := []string{"a", "b"}[1-at]
			p.letGo(other, tc.freed) // one request of the other instance
			if code := <-answered; code != http.StatusOK {
				t.Errorf("the cancel waiting at %s answered %d with a slot freed at %s, want 200", []string{"a", "b"}[at], code, other)
			}
			if got := p.cancels[1-at].Load(); got != 1 {
				t.Errorf("instance %s received %d cancels, want 1", other, got)
			}
		})
	}
}

// TestRetryBudgetClientShare: the retry budget is shared between clients,
// each with its share (docs/pools.md): one client's reads whose connect
// an instance refused, moved to a slow one that holds them, took every
// retry of the budget, and another client's read refused there was
// answered 503 upstream_unavailable. The client holds fewer retries than
// are left free; past that its own request is answered as with the
// budget spent, and another client's still moves. Budget: four retries at
// once (min_retries 4, percent 0): the attacker holds two.
func TestRetryBudgetClientShare(t *testing.T) {
	for _, tc := range []struct {
		name, from string
		moved      bool // the read goes to the live instance
	}{
		{"another client's read", "10.0.0.2", true},
		{"the client's own read past its share", "10.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			held := make(chan struct{}, 8)
			live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/mkt/markets/" {
					held <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(live.Close)
			refused := config.MustURL("http://" + unreachable.Refused(t))
			liveURL := config.MustURL(live.URL)
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = []config.URL{liveURL, refused}
				c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep the refusing instance in the rotation
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Upstream.RetryBudget.Percent, c.Upstream.RetryBudget.MinRetries = 0, 4
			})
			t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for them
			svc := e.gw.fleet.Service("")
			read := func(path, from string) (int, string) {
				res := do(t, "GET", e.url+path, nil, "X-Forwarded-For", from)
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				return res.StatusCode, string(body)
			}
			attack := func() {
				go read("/api/v1/mkt/markets/", "10.0.0.1")
				<-held
			}
			svc.Update([]upstream.Endpoint{{URL: liveURL.URL}})
			attack() // held at the live instance: the refusing one has fewer under way
			svc.Update([]upstream.Endpoint{{URL: liveURL.URL}, {URL: refused.URL}})
			attack() // refused, moved to the live instance, held: the client's first retry
			attack() // and its second
			if status, body := read("/api/v1/mkt/markets/", "10.0.0.1"); status != http.StatusServiceUnavailable {
				t.Fatalf("the attacker's third read moved: answered %d %s, want 503 (its share of the budget: 2 of 4)", status, body)
			}
			if got := svc.Counts(); got.Retries != 2 || got.RetriesOverShare != 1 {
				t.Fatalf("%d retries, %d refused over the client's share; want 2 and 1", got.Retries, got.RetriesOverShare)
			}
			status, body := read("/api/v1/mkt/currencies/", tc.from)
			if got := status == http.StatusOK; got != tc.moved {
				t.Errorf("answered %d %s with 2 of the 4 retries held by 10.0.0.1; moved to the live instance: %v, want %v",
					status, body, got, tc.moved)
			}
			if got, want := svc.Counts().Retries, map[bool]uint64{true: 3, false: 2}[tc.moved]; got != want {
				t.Errorf("%d retries, want %d", got, want)
			}
		})
	}
}

// TestRetriedCancelTakesASlotFreedElsewhere: a cancel whose connect an
// instance refused is moved to another; with every other instance's
// limit and headroom full it waits at the one drawn, and a slot another
// freed first went to nobody while it waited its class's wait and was
// shed 503. It takes the first slot freed for it anywhere in the
// rotation but the instance it left. r refuses connections (weight
// 1000: the cancel is drawn there), a and b (fixed limit 4, headroom 1)
// each hold four reads and a cancel of other clients.
func TestRetriedCancelTakesASlotFreedElsewhere(t *testing.T) {
	for _, tc := range []struct{ name, path, freed string }{
		{"one order, a read freed", "/api/v1/odr/orders/2/", "GET"},
		{"two orders, a cancel freed", "/api/v1/odr/orders/2,3/", "DELETE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFullPair(t)
			urls := p.urls
			refused := config.MustURL("http://" + unreachable.Refused(t))
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.URLs = append(slices.Clone(urls), refused)
				c.Upstream.Outlier.ConsecutiveConnectFailures = 0 // keep the refusing instance in the rotation
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Overload.FixedLimit = 4 // and a headroom of 1 for cancels
				c.Overload.MaxWait.MarketData = 0
				c.Overload.MaxWait.Cancel = 2 * time.Second // what a cancel waits at a full instance
			})
			svc := e.gw.fleet.Service("")
			p.fill(e, svc)
			svc.Update([]upstream.Endpoint{{URL: refused.URL, Weight: 1000}, {URL: urls[0].URL}, {URL: urls[1].URL}})
			var insts []*upstream.Instance // a and b
			for _, inst := range svc.Instances() {
				if inst.URL.String() != refused.URL.String() {
					insts = append(insts, inst)
				}
			}
			answered := p.cancel(e, tc.path)
			at := waitQueued(t, insts)
			other := []string{"a", "b"}[1-at]
			p.letGo(other, tc.freed) // one request of the other instance
			if code := <-answered; code != http.StatusOK {
				t.Errorf("the retried cancel waiting at %s answered %d with a slot freed at %s, want 200", []string{"a", "b"}[at], code, other)
			}
			if got := p.cancels[1-at].Load(); got != 1 {
				t.Errorf("instance %s received %d cancels, want 1", other, got)
			}
			if got := svc.Counts().Retries; got != 1 {
				t.Errorf("%d retries, want 1: the cancel did not meet the refusing instance", got)
			}
		})
	}
}
