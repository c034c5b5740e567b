package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestOverloadShedsByPriority fills a fixed limit of one slot with a
// request the backend holds, then checks that market data is shed at once
// with 503 overloaded and Retry-After, never reaching the backend, that a
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

	res := do(t, "GET", e.url+"/api/v1/mkt/tickers/", nil)
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
	for e.gw.admission.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if code := <-cancelDone; code != http.StatusOK {
		t.Fatalf("cancel answered %d, want 200 once the slot freed", code)
	}
	wg.Wait()
	if got := e.gw.admission.InFlight(); got != 0 {
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
