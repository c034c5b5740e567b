package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestDeadlineQueue: a call still queued at its deadline is cancelled
// with the cause context.DeadlineExceeded, and stateContext reports it as
// context.WithTimeout's context does; a call that left before its
// deadline is never cancelled by the queue.
func TestDeadlineQueue(t *testing.T) {
	for _, tt := range []struct {
		name      string
		leaveSoon bool
	}{
		{"still queued at the deadline", false},
		{"left before the deadline", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := &deadlineQueue{d: 20 * time.Millisecond}
			if tt.leaveSoon {
				q.d = time.Hour
			}
			var e deadlineEntry
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			at := q.join(&e, cancel, time.Since(deadlineEpoch))
			sc := &stateContext{Context: ctx, deadline: at}
			if d, ok := sc.Deadline(); !ok || !d.Equal(at) {
				t.Fatalf("Deadline() = %v, %v; want %v", d, ok, at)
			}
			if tt.leaveSoon {
				e.leave()
				if sc.Err() != nil || q.head != nil || q.tail != nil {
					t.Fatalf("after leave: Err %v, queue head %p tail %p", sc.Err(), q.head, q.tail)
				}
				return
			}
			select {
			case <-sc.Done():
			case <-time.After(time.Minute): // liveness bound only
				t.Fatal("not cancelled at its deadline")
			}
			e.leave()
			if time.Now().Before(at) {
				t.Fatal("cancelled before its deadline")
			}
			if sc.Err() != context.DeadlineExceeded || context.Cause(ctx) != context.DeadlineExceeded {
				t.Fatalf("Err %v, cause %v; want context.DeadlineExceeded", sc.Err(), context.Cause(ctx))
			}
		})
	}
}

// TestDeadlineQueueOrder: calls joining out of deadline order (two
// timeouts' worth of skew cannot happen in one queue, but calls racing to
// join can be a little out of order) are kept in deadline order.
func TestDeadlineQueueOrder(t *testing.T) {
	q := &deadlineQueue{d: time.Hour}
	entries := make([]deadlineEntry, 4)
	noop := func(error) {}
	for i := range entries {
		q.join(&entries[i], noop, time.Since(deadlineEpoch))
	}
	// Move the second to the end, as if its deadline were the latest.
	entries[1].leave()
	q.mu.Lock()
	entries[1].at, entries[1].queued = q.tail.at+1, true
	p := q.tail
	for p != nil && p.at > entries[1].at {
		p = p.prev
	}
	q.insertAfter(p, &entries[1])
	q.mu.Unlock()
	want := []*deadlineEntry{&entries[0], &entries[2], &entries[3], &entries[1]}
	i := 0
	for e := q.head; e != nil; e = e.next {
		if i >= len(want) || e != want[i] {
			t.Fatalf("entry %d is not the expected one", i)
		}
		if e.next != nil && e.next.at < e.at {
			t.Fatalf("entry %d's deadline is after the next one's", i)
		}
		i++
	}
	if i != len(want) || q.tail != &entries[1] {
		t.Fatalf("%d entries, tail %p; want %d, %p", i, q.tail, len(want), &entries[1])
	}
	for i := range entries {
		entries[i].leave()
	}
	if q.head != nil || q.tail != nil {
		t.Fatal("the queue is not empty after every call left")
	}
}

// TestDeadlineQueueConcurrent runs calls that join and leave the queues
// of one timeout from many goroutines, half of them outliving the 1 ms timeout: each call's cancel
// runs at most once, never before its deadline, and the queue ends
// empty. Run it under -race.
func TestDeadlineQueueConcurrent(t *testing.T) {
	qs := &timeoutQueues{shards: make([]paddedQueue, 4)}
	for i := range qs.shards {
		qs.shards[i].d = time.Millisecond
	}
	var wg sync.WaitGroup
	var cancelled atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e deadlineEntry // reused, as a pooled request state's is
			for i := 0; i < 200; i++ {
				var calls atomic.Int32
				var at time.Time
				var mu sync.Mutex
				cancel := func(error) {
					mu.Lock()
					early := time.Now().Before(at)
					mu.Unlock()
					if calls.Add(1) > 1 || early {
						t.Error("cancelled twice, or before its deadline")
					}
					cancelled.Add(1)
				}
				mu.Lock()
				at = qs.join(&e, cancel, time.Since(deadlineEpoch))
				mu.Unlock()
				if i%2 == 0 {
					time.Sleep(2 * time.Millisecond)
				}
				e.leave()
			}
		}()
	}
	wg.Wait()
	for i := range qs.shards {
		q := &qs.shards[i].deadlineQueue
		q.mu.Lock()
		if q.head != nil || q.tail != nil {
			t.Errorf("queue %d is not empty after every call left", i)
		}
		q.mu.Unlock()
	}
	t.Logf("%d of 1600 calls cancelled at their deadline", cancelled.Load())
}

// TestBackendSlowHTTP2: a route's timeout cuts a call to a backend over
// HTTP/2 too, answered 504, though the HTTP/2 transport reports the
// context's Err rather than its cause.
func TestBackendSlowHTTP2(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var proto atomic.Value
	bs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	bs.EnableHTTP2 = true
	bs.StartTLS()
	t.Cleanup(bs.Close)
	cfg := config.Default()
	cfg.Upstream.URL = config.MustURL(bs.URL)
	cfg.Route("list_markets").Timeout = 200 * time.Millisecond
	e := serve(t, cfg, &backend{}, Options{Transport: bs.Client().Transport})
	assertError(t, do(t, "GET", e.url+"/api/v1/mkt/markets/", nil), http.StatusGatewayTimeout, "gateway_timeout")
	if got, _ := proto.Load().(string); got != "HTTP/2.0" {
		t.Fatalf("the backend was called over %q, want HTTP/2.0", got)
	}
}

// TestDeadlineQueueRequestsRacingTheirDeadline sends many concurrent
// requests to a backend that answers around the route's timeout, so that
// deadlines fire as calls end and pooled request states (whose
// deadlineEntry the queues hold) are taken by the next request: every
// answer is its own request's — the backend's echo of its probe — or a
// DRF error, never another request's. Run it under -race.
func TestDeadlineQueueRequestsRacingTheirDeadline(t *testing.T) {
	e := startEnv(t, func(c *config.Config) {
		c.Route("list_markets").Timeout = 2 * time.Millisecond
	})
	e.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(len(r.URL.RawQuery)%4) * time.Millisecond)
		_, _ = w.Write([]byte(r.URL.Query().Get("probe")))
	}
	var statuses [8]map[int]int
	for g := range statuses {
		statuses[g] = map[int]int{}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				probe := strconv.Itoa(g*1000 + i)
				res, err := http.Get(e.url + "/api/v1/mkt/markets/?probe=" + probe)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				statuses[g][res.StatusCode]++
				switch {
				case res.StatusCode == http.StatusOK && string(body) != probe:
					t.Errorf("request %s answered %q", probe, body)
				case res.StatusCode != http.StatusOK && !strings.Contains(string(body), `"code"`):
					t.Errorf("request %s answered %d %q", probe, res.StatusCode, body)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("statuses: %v", statuses)
}

// TestClaimedOrderBoundedAfterClientLeft: a claimed order goes on when
// its client hangs up (its call's parent context is never cancelled), and
// is still cut at its route's timeout by the deadline queue: the backend
// sees the call cancelled, the claim is settled as of unknown outcome,
// and a retry is answered 409 outcome_unknown without reaching the
// backend.
func TestClaimedOrderBoundedAfterClientLeft(t *testing.T) {
	var calls atomic.Int64
	entered, cut, testDone := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	e := startOrdersConfig(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			placed(w, r)
			return
		}
		entered <- struct{}{}
		select {
		case <-r.Context().Done(): // exgate gave up on the call
			cut <- struct{}{}
		case <-testDone:
		}
	}, nil, func(c *config.Config) { c.Route("place_order").Timeout = 300 * time.Millisecond })
	t.Cleanup(func() { close(testDone) }) // before the servers close
	body := `{"symbol":"BTC_USDT","type":"market","side":"buy","base_amount":"0.5","identifier":"left"}`
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	if err := hangUpOnEntered(req, cancel, entered); err == nil {
		t.Fatal("the client did not give up")
	}
	select {
	case <-cut:
	case <-time.After(time.Minute): // liveness bound only
		t.Fatal("the claimed order's backend call was never cut")
	}
	for deadline := time.Now().Add(time.Minute); len(e.logs.FilterMessage("request").All()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the order's request never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	assertError(t, postOrder(t, e, body), http.StatusConflict, "outcome_unknown")
	if n := calls.Load(); n != 1 {
		t.Errorf("backend received %d orders, want 1", n)
	}
}
