package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/upstream"
)

// TestOverloadShedsByPriority fills a fixed limit of one slot with a
// request the backend holds, then checks that market data is shed without
// waiting for a slot, with 503 overloaded and Retry-After, answered no
// sooner than overload.shed_delay after it arrived, never reaching the
// backend, that a
// cancel takes the cancels' headroom of one slot over the limit, and that
// a second cancel waits for a slot and gets it when the first requests
// end.
func TestOverloadShedsByPriority(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	e := startEnv(t, func(c *config.Config) {
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.MarketData = 0
		c.Overload.MaxWait.Cancel = 5 * time.Second
		c.Overload.RetryAfter = 2 * time.Second
		c.Overload.ShedDelay = 300 * time.Millisecond
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.URL.Path == "/api/v1/mkt/currencies/" || r.URL.Path == "/api/v1/odr/orders/41/" {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // holds the one slot until released
		defer wg.Done()
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
		res.Body.Close()
	}()
	<-started
	go func() { // holds the cancels' headroom until released
		defer wg.Done()
		res := do(t, "DELETE", e.url+"/api/v1/odr/orders/41/", nil, "Authorization", "Bearer t0ken")
		res.Body.Close()
	}()
	<-started

	sent := time.Now()
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	if d := time.Since(sent); d < 300*time.Millisecond {
		t.Errorf("shed answered %v after it was sent, before overload.shed_delay (300ms)", d)
	}
	assertError(t, res, http.StatusServiceUnavailable, "overloaded")
	if got := res.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
	if got := e.backend.count(); got != 2 {
		t.Fatalf("backend received %d requests, want only the two holding the slot and the headroom", got)
	}

	cancelDone := make(chan int, 1)
	go func() {
		res := do(t, "DELETE", e.url+"/api/v1/odr/orders/42/", nil, "Authorization", "Bearer t0ken")
		res.Body.Close()
		cancelDone <- res.StatusCode
	}()
	for e.gw.controller().Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if code := <-cancelDone; code != http.StatusOK {
		t.Fatalf("cancel answered %d, want 200 once the slot freed", code)
	}
	wg.Wait()
	if got := e.gw.controller().InFlight(); got != 0 {
		t.Errorf("in flight after every request ended = %d, want 0", got)
	}
}

// TestOverloadRouteCap checks a route's own max_in_flight.
func TestOverloadRouteCap(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	e := startEnv(t, func(c *config.Config) {
		c.Route("list_tickers").MaxInFlight = 1
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}
	done := make(chan struct{})
	go func() {
		res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
		res.Body.Close()
		close(done)
	}()
	<-started
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	assertError(t, res, http.StatusServiceUnavailable, "overloaded")
	close(release) // the other routes are not capped
	res = do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("another route answered %d", res.StatusCode)
	}
	<-done
}

// TestOverloadDisabled checks that enabled: false bounds nothing.
func TestOverloadDisabled(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	e := startEnv(t, func(c *config.Config) {
		c.Overload.Enabled = false
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.MarketData = 0
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.URL.Path == "/api/v1/mkt/currencies/" || r.URL.Path == "/api/v1/odr/orders/41/" {
			<-release
		}
	}
	done := make(chan struct{})
	go func() {
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
		res.Body.Close()
		close(done)
	}()
	<-started
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("with overload disabled, a second request answered %d", res.StatusCode)
	}
	close(release)
	<-done
}

// TestShedOrderReleasesItsIdentifier: an order shed after its identifier
// was claimed never reached the backend, so its claim is released and the
// client's retry is placed, not refused as a duplicate.
func TestShedOrderReleasesItsIdentifier(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/mkt/currencies/" || r.URL.Path == "/api/v1/odr/orders/41/" {
			started <- struct{}{}
			<-release
			return
		}
		placed(w, r)
	}, nil, func(c *config.Config) {
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.Place = 0
	})
	done := make(chan struct{})
	go func() { // holds the one slot until released
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
		res.Body.Close()
		close(done)
	}()
	<-started
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"shed-once"}`
	res := postOrder(t, e, body)
	assertError(t, res, http.StatusServiceUnavailable, "overloaded")
	if n := e.backend.orders.Load(); n != 0 {
		t.Fatalf("a shed order reached the backend (%d)", n)
	}
	close(release)
	<-done
	res = postOrder(t, e, body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of a shed order answered %d (replayed %q), want 201 placed", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
	}
}

// TestShedRequestsCostNothing: a client whose allowance is 3 requests
// sends six while the backend is full; they wait for a slot and are shed
// (or are shed on arrival once the queue sheds). Each was charged when its
// limits allowed it, before its wait, and given the charge back when it
// was shed: once the backend has room the client still makes its 3
// requests, and the 4th is refused. On the memory store and on Redis.
func TestShedRequestsCostNothing(t *testing.T) {
	stores := map[string]func(t *testing.T) ratelimit.Store{
		"memory": func(*testing.T) ratelimit.Store { return ratelimit.NewMemory(ratelimit.MemoryOptions{}) },
	}
	if !testing.Short() {
		stores["redis"] = func(t *testing.T) ratelimit.Store {
			rl := newTestRedisLimits(t)
			t.Cleanup(func() { _ = rl.Close() })
			return ratelimit.NewDenyCache(rl, 100, nil)
		}
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			free := sync.OnceFunc(func() { close(release) })
			defer free() // on failure too, so that the held request ends
			e := startLimited(t, store(t), func(c *config.Config) {
				smallMatches(c)
				c.Overload.FixedLimit = 1
				c.Overload.MaxWait.MarketData = 20 * time.Millisecond
			})
			held := make(chan struct{})
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/mkt/currencies/" {
					close(held)
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}
			done := make(chan struct{})
			go func() { // holds the one slot until released
				defer close(done)
				res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
				res.Body.Close()
			}()
			<-held
			for i := 0; i < 6; i++ {
				res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
				assertError(t, res, http.StatusServiceUnavailable, "overloaded")
			}
			if got := e.gw.controller().Waiting(); got != 0 {
				t.Fatalf("%d requests still wait after they were shed", got)
			}
			free()
			<-done
			for i := 0; i < 3; i++ {
				res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Fatalf("request %d after the shed ones: %d, want 200 (the shed requests must cost nothing)", i, res.StatusCode)
				}
			}
			res := do(t, "GET", e.url+"/api/v1/mth/matches/BTC_USDT/", nil)
			assertError(t, res, http.StatusTooManyRequests, "throttled")
		})
	}
}

// TestShedBulkIsRefundedItsSize: a bulk of orders is charged its size
// against the order limits before it waits for a slot; shed, it is given
// the whole size back.
func TestShedBulkIsRefundedItsSize(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	defer free()
	e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/mkt/currencies/" {
			close(held)
			<-release
			w.WriteHeader(http.StatusOK)
			return
		}
		placedBulk(w, r)
	}, nil, func(c *config.Config) {
		c.Route("place_order").Limits[0].Rate = config.Rate{N: 10, Period: time.Hour}
		c.Route("place_order").Limits[0].Burst = 10
		c.Overload.FixedLimit = 1
		c.Overload.MaxWait.Place = 20 * time.Millisecond
	})
	done := make(chan struct{})
	go func() { // holds the one slot until released
		defer close(done)
		res := do(t, "GET", e.url+"/api/v1/mkt/currencies/", nil)
		res.Body.Close()
	}()
	<-held
	for i := 0; i < 2; i++ {
		assertError(t, postBulk(t, e, bulkOf(4, "")), http.StatusServiceUnavailable, "overloaded")
	}
	free()
	<-done
	res := postBulk(t, e, bulkOf(10, ""))
	res.Body.Close()
	if res.StatusCode != 201 || remaining(t, res) != "0" {
		t.Fatalf("bulk of the whole allowance after two shed bulks of 4: %d, remaining %s; want 201 and 0", res.StatusCode, remaining(t, res))
	}
}

// TestRouteCapNeedsOverload: a route's max_in_flight is part of the
// overload step, so with overload.enabled false it caps nothing — which
// is why the configuration check refuses the two together
// (config.checkEffective).
func TestRouteCapNeedsOverload(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int32
	held := make(chan struct{})
	e := startEnv(t, func(c *config.Config) {
		c.Overload.Enabled = false
		c.Route("list_tickers").MaxInFlight = 1
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 { // the first request holds the route's one slot
			close(held)
			<-release
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
		res.Body.Close()
	}()
	<-held
	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
	res.Body.Close()
	close(release)
	<-done
	if res.StatusCode != http.StatusOK {
		t.Fatalf("second request over max_in_flight 1 with overload disabled: %d, want 200 (the cap is not applied)", res.StatusCode)
	}
}

// TestCancelHeadroomHasAConnection: with upstream.max_conns_per_host
// capping the backend's connections below the overload limit, market
// data the backend holds filled every connection and queued for one in
// the Transport, first come first served; a cancel took its headroom's
// slot at once and then waited in that queue behind the market data
// until its route timed out (504). The limit is kept within the
// connections, the headroom included: the market data past them is shed,
// and the cancel finds a connection of its own and is answered.
func TestCancelHeadroomHasAConnection(t *testing.T) {
	const reads, conns = 4, 2
	for _, tc := range []struct {
		name string
		set  func(*config.Overload)
	}{
		{"fixed limit over the connections", func(o *config.Overload) { o.FixedLimit = 4 }},
		{"adaptive limit over the connections", func(o *config.Overload) { o.MinLimit, o.InitialLimit = 4, 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var arrived atomic.Int64
			e := startEnv(t, func(c *config.Config) {
				c.Upstream.MaxConnsPerHost = conns
				tc.set(&c.Overload)
				c.Overload.MaxWait.MarketData = 0
				c.Overload.ShedDelay = 0
				c.Route("cancel_order").Timeout = 2 * time.Second // bounds the wait in the Transport's queue
			})
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					arrived.Add(1)
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}
			var wg sync.WaitGroup
			var shed atomic.Int64
			for range reads {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil)
					res.Body.Close()
					if res.StatusCode == http.StatusServiceUnavailable {
						shed.Add(1)
					}
				}()
			}
			// Every read holds a slot or was shed, and the backend holds
			// as many as have a connection.
			ctl := e.gw.controller()
			for {
				held := int64(ctl.InFlight())
				if held+shed.Load() == reads && arrived.Load() == min(held, conns) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			res := do(t, "DELETE", e.url+"/api/v1/odr/orders/7/", nil, "Authorization", "Bearer t0ken")
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("cancel answered %d with %d reads holding slots over %d connections, want 200",
					res.StatusCode, ctl.InFlight(), conns)
			}
			if got := ctl.Limit(); got+(got+7)/8 > conns {
				t.Errorf("limit %d and its cancels' headroom, over %d connections", got, conns)
			}
			close(release)
			wg.Wait()
		})
	}
}

// TestBulkCancelPastPlacementRouteCap: a bulk cancel sent to the bulk
// placement route (ids POSTed to bulk_orders) is a cancel; the route's
// own cap (max_in_flight), held by another client's bulk placement the
// backend keeps, shed it at once, 503. The cap bounds the route's
// placements; a bulk cancel takes none of it, and a second placement
// past the cap is still shed.
func TestBulkCancelPastPlacementRouteCap(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"bulk cancel", `{"ids": ["7", "8"]}`, http.StatusOK},
		{"bulk placement", bulkOf(1, ""), http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			held := make(chan struct{}, 2)
			e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
				if r.ContentLength > 40 { // a placement (the ids' canonical form is shorter): held
					held <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusOK)
			}, nil, func(c *config.Config) {
				c.Route("bulk_orders").MaxInFlight = 1
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
			})
			t.Cleanup(func() { close(release) }) // before the gateway's shutdown waits for it
			first := make(chan string, 1)
			go func() {
				res := postBulk(t, e, bulkOf(1, ""), "X-Forwarded-For", "10.0.0.1")
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				first <- fmt.Sprintf("%d %s", res.StatusCode, body)
			}()
			select {
			case <-held:
			case a := <-first:
				t.Fatalf("the placement holding the cap was answered %s", a)
			}
			res := postBulk(t, e, tc.body, "X-Forwarded-For", "10.0.0.2")
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("answered %d %s with another client's placement holding the route's cap, want %d", res.StatusCode, body, tc.want)
			}
		})
	}
}

// TestCancelWithRoomNotShedOnArrival: once cancels have waited in vain
// (a burst past the limit and the cancels' headroom), the early shed on
// arrival refused a cancel of a client that holds a slot with a
// probability that falls only by 1/512 a cancel served, whenever any
// request waited, where the backend had a slot for that cancel at once:
// the headroom, which the reads waiting cannot take. A request that
// would take a slot at once is not shed on arrival. Fixed limit 4 and a
// headroom of 1: the trader's read and three others hold the limit,
// another client's cancel the headroom, eight cancels of eight clients
// wait in vain; that cancel ends, a read waits, and the trader cancels.
func TestCancelWithRoomNotShedOnArrival(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"one order", "/api/v1/odr/orders/2/"},
		{"two orders", "/api/v1/odr/orders/2,3/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readsGo, cancelGo := make(chan struct{}), make(chan struct{})
			held := make(chan struct{}, 16)
			e := startEnv(t, func(c *config.Config) {
				c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
				c.Overload.FixedLimit = 4 // and a headroom of 1 for cancels
				c.Overload.MaxWait.Cancel = 20 * time.Millisecond
				c.Overload.MaxWait.MarketData = time.Minute // the read waits until the test ends
				c.Overload.ShedDelay = 0
			})
			e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/api/v1/mkt/markets/":
					held <- struct{}{}
					<-readsGo
				case "/api/v1/odr/orders/1/":
					held <- struct{}{}
					<-cancelGo
				}
				w.WriteHeader(http.StatusOK)
			}
			t.Cleanup(func() { close(readsGo) }) // before the gateway's shutdown waits for them
			send := func(method, path, from string) <-chan int {
				code := make(chan int, 1)
				go func() {
					res := do(t, method, e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", from)
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					code <- res.StatusCode
				}()
				return code
			}
			for i := range 4 { // the trader's read (10.0.0.50) and three others hold the limit
				send("GET", "/api/v1/mkt/markets/", fmt.Sprintf("10.0.0.%d", 50+i))
				<-held
			}
			cancelled := send("DELETE", "/api/v1/odr/orders/1/", "10.0.1.1") // the headroom
			<-held
			for i := range 8 { // the burst: each waits its 20ms in vain
				if code := <-send("DELETE", "/api/v1/odr/orders/1/", fmt.Sprintf("10.0.2.%d", i)); code != http.StatusServiceUnavailable {
					t.Fatalf("cancel %d of the burst answered %d, want 503", i, code)
				}
			}
			close(cancelGo) // the burst is over: the headroom is free
			if code := <-cancelled; code != http.StatusOK {
				t.Fatalf("the held cancel answered %d", code)
			}
			inst := e.gw.fleet.Service("").Instances()[0]
			// Once its slot is given back, after its answer was relayed.
			for deadline := time.Now().Add(time.Minute); inst.Controller.InFlight() != 4; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) { // only bounds a hang
					t.Fatalf("%d requests under way, want the four reads", inst.Controller.InFlight())
				}
			}
			send("GET", "/api/v1/mkt/markets/", "10.0.3.1") // a read waits for the limit
			for deadline := time.Now().Add(time.Minute); inst.Controller.Waiting() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) { // only bounds a hang
					t.Fatal("the read does not wait")
				}
			}
			shed := 0
			for range 16 {
				switch code := <-send("DELETE", tc.path, "10.0.0.50"); code {
				case http.StatusOK:
				case http.StatusServiceUnavailable:
					shed++
				default:
					t.Fatalf("the trader's cancel answered %d", code)
				}
			}
			if shed != 0 {
				t.Errorf("%d of the trader's 16 cancels shed 503 with the headroom free, want none", shed)
			}
		})
	}
}

// heldCancels is a gateway at a fixed limit of 4 and a cancels'
// headroom of 1, whose backend keeps each read of the market list and
// each cancel of order 1 until the test lets it go: the set-up of the
// tests of cancels shed on arrival.
type heldCancels struct {
	t     *testing.T
	e     *env
	inst  *upstream.Instance
	held  chan chan struct{}
	holds []chan struct{} // each held request's release, nil once let go
	n     int             // the clients hold made up
}

// newHeldCancels starts a heldCancels whose cancels wait at most
// cancelWait for a slot.
func newHeldCancels(t *testing.T, cancelWait time.Duration) *heldCancels {
	h := &heldCancels{t: t, held: make(chan chan struct{}, 16)}
	h.e = startEnv(t, func(c *config.Config) {
		c.ClientIP.TrustedProxies = []config.Prefix{{Prefix: mustPrefix("127.0.0.0/8")}}
		c.Overload.FixedLimit = 4 // and a headroom of 1 for cancels
		c.Overload.MaxWait.Cancel = cancelWait
		c.Overload.ShedDelay = 0
	})
	h.e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/mkt/markets/" || r.URL.Path == "/api/v1/odr/orders/1/" {
			release := make(chan struct{})
			h.held <- release
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}
	t.Cleanup(func() { // before the gateway's shutdown waits for them
		for _, r := range h.holds {
			if r != nil {
				close(r)
			}
		}
	})
	h.inst = h.e.gw.fleet.Service("").Instances()[0]
	return h
}

// send sends a request of the client at address from, and returns the
// channel its status arrives on.
func (h *heldCancels) send(method, path, from string) <-chan int {
	code := make(chan int, 1)
	go func() {
		res := do(h.t, method, h.e.url+path, nil, "Authorization", "Bearer t0ken", "X-Forwarded-For", from)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		code <- res.StatusCode
	}()
	return code
}

// hold sends a request the backend keeps, of the client at from or, ""
// a new client, and returns once the backend holds it.
func (h *heldCancels) hold(method, path, from string) {
	if from == "" {
		h.n++
		from = fmt.Sprintf("10.0.1.%d", h.n)
	}
	h.send(method, path, from)
	h.holds = append(h.holds, <-h.held)
}

// letGo lets the k-th held request go.
func (h *heldCancels) letGo(k int) {
	close(h.holds[k])
	h.holds[k] = nil
}

// TestCancelNotShedAfterTheSurge: the shed probability a burst of
// cancels waiting in vain raised (+1/8 of what is left each) fell by
// 1/512 a cancel served: 1729 cancels after one wasted wait, 2564 after
// eight, before it was 0. Long after the burst, whenever the backend
// was full again for a moment, a cancel of a client holding a slot was
// shed on arrival where it would have waited a moment for a slot. A
// request taking a slot at once while none waits ends the shedding. Fixed
// limit 4, headroom 1; eight cancels wait in vain; the backend empties
// and serves at once; then, its limit and headroom held again, the
// trader (holding a read) cancels, each time a slot being let go once
// its cancel waits.
func TestCancelNotShedAfterTheSurge(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"one order", "/api/v1/odr/orders/2/"},
		{"two orders", "/api/v1/odr/orders/2,3/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldCancels(t, time.Second)
			h.hold("GET", "/api/v1/mkt/markets/", "10.0.0.50") // the trader's read, holds[0]
			for range 3 {
				h.hold("GET", "/api/v1/mkt/markets/", "")
			}
			h.hold("DELETE", "/api/v1/odr/orders/1/", "") // the headroom
			var burst []<-chan int
			for i := range 8 { // the burst: each waits its second in vain
				burst = append(burst, h.send("DELETE", "/api/v1/odr/orders/1/", fmt.Sprintf("10.0.2.%d", i)))
			}
			for i, code := range burst {
				if c := <-code; c != http.StatusServiceUnavailable {
					t.Fatalf("cancel %d of the burst answered %d, want 503", i, c)
				}
			}
			for k := 1; k < len(h.holds); k++ { // the surge is over: only the trader's read is under way
				h.letGo(k)
			}
			// Once their slots are given back: a request let go still holds
			// its slot until its answer has been relayed.
			for deadline := time.Now().Add(time.Minute); h.inst.Controller.InFlight() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) { // only bounds a hang
					t.Fatalf("%d requests under way after the surge, want the trader's read alone", h.inst.Controller.InFlight())
				}
			}
			for i := range 4 { // served at once
				if c := <-h.send("GET", "/api/v1/mkt/currencies/", fmt.Sprintf("10.0.3.%d", i)); c != http.StatusOK {
					t.Fatalf("a read after the surge answered %d", c)
				}
			}
			for range 3 { // the limit and the headroom held again
				h.hold("GET", "/api/v1/mkt/markets/", "")
			}
			h.hold("DELETE", "/api/v1/odr/orders/1/", "")
			shed := 0
			for range 16 {
				code := h.send("DELETE", tc.path, "10.0.0.50")
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
					if h.inst.Controller.Waiting() == 1 { // it waits: a held cancel goes, the trader's takes its slot
						h.letGo(len(h.holds) - 1)
						break
					}
					if len(code) == 1 || time.Now().After(deadline) {
						break
					}
				}
				switch c := <-code; c {
				case http.StatusOK:
					if h.holds[len(h.holds)-1] == nil {
						h.hold("DELETE", "/api/v1/odr/orders/1/", "")
					}
				case http.StatusServiceUnavailable:
					shed++
				default:
					t.Fatalf("the trader's cancel answered %d", c)
				}
			}
			if shed != 0 {
				t.Errorf("%d of the trader's 16 cancels shed 503 after the surge, want none", shed)
			}
		})
	}
}

// TestOtherClientsCancelsDoNotShedATradersOnArrival: one client's
// cancels past its share of the cancels' slots wait in vain and raise
// the cancels' shed probability; the early shed on arrival then refused
// the cancels of a trader that held a read of its own, where each would
// have taken the next freed slot ahead of that client's (a client's
// cancels are counted apart from its other requests, and the trader
// held none). A cancel of a client that holds no cancel and waits for
// none is not shed on arrival. Fixed limit 4, headroom 1: the trader's
// read, the spammer's cancel and two reads hold the limit, another
// client's cancel the headroom; eight more of the spammer's cancels wait
// in vain, two more wait while the trader cancels, and the cancel in
// the headroom is let go once the trader's waits, and another takes it
// after.
func TestOtherClientsCancelsDoNotShedATradersOnArrival(t *testing.T) {
	for _, tc := range []struct{ name, path string }{
		{"one order", "/api/v1/odr/orders/2/"},
		{"two orders", "/api/v1/odr/orders/2,3/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldCancels(t, 2*time.Second)
			h.hold("GET", "/api/v1/mkt/markets/", "10.0.0.50")    // the trader's read
			h.hold("DELETE", "/api/v1/odr/orders/1/", "10.0.9.9") // the spammer's
			for range 2 {
				h.hold("GET", "/api/v1/mkt/markets/", "")
			}
			h.hold("DELETE", "/api/v1/odr/orders/1/", "") // the headroom
			waitFor := func(waiting int) {
				for deadline := time.Now().Add(time.Minute); h.inst.Controller.Waiting() != waiting; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) { // only bounds a hang
						t.Fatalf("%d waiting, want %d", h.inst.Controller.Waiting(), waiting)
					}
				}
			}
			var burst []<-chan int
			for range 8 { // the spammer's cancels wait in vain: the probability is up
				burst = append(burst, h.send("DELETE", "/api/v1/odr/orders/7/", "10.0.9.9"))
				waitFor(len(burst))
			}
			for _, code := range burst {
				if c := <-code; c != http.StatusServiceUnavailable {
					t.Fatalf("a cancel of the burst answered %d", c)
				}
			}
			var spam []<-chan int // the spammer's cancels sent after the burst
			unanswered := func() (n int) {
				for _, code := range spam {
					n += 1 - len(code)
				}
				return n
			}
			spamWaits := func() { // two of them wait while the trader cancels (each waits its 2s, then another is sent)
				for deadline := time.Now().Add(time.Minute); h.inst.Controller.Waiting() < 2; {
					code := h.send("DELETE", "/api/v1/odr/orders/7/", "10.0.9.9") // or is shed on arrival
					spam = append(spam, code)
					for w := h.inst.Controller.Waiting(); len(code) == 0 && h.inst.Controller.Waiting() == w; time.Sleep(time.Millisecond) {
					}
					if time.Now().After(deadline) { // only bounds a hang
						t.Fatal("the spammer's cancels do not wait")
					}
				}
			}
			shed := 0
			for range 8 {
				spamWaits()
				code := h.send("DELETE", tc.path, "10.0.0.50")
				for deadline := time.Now().Add(time.Minute); len(code) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					// It waits beside the spammer's unanswered ones (those sent
					// and not yet waiting, or no longer, count too: never more
					// than the trader's waits): the last held request goes, its
					// slot the trader's.
					if h.inst.Controller.Waiting() == unanswered()+1 {
						h.letGo(len(h.holds) - 1)
						break
					}
				}
				switch c := <-code; c {
				case http.StatusOK:
					h.hold("DELETE", "/api/v1/odr/orders/1/", "") // the headroom held again
				case http.StatusServiceUnavailable:
					shed++
				default:
					t.Fatalf("the trader's cancel answered %d", c)
				}
			}
			if shed != 0 {
				t.Errorf("%d of the trader's 8 cancels shed 503 beside the spammer's waiting ones, want none", shed)
			}
		})
	}
}
