package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeepAliveIdleTimeout sends orders on keep-alive connections that
// sit idle for about server.idle_timeout (200ms here) between requests,
// the moment exgate closes an idle connection:
//
//   - from a client whose own idle timeout is longer (none, here), an
//     order can be written into a connection exgate has just closed; Go's
//     client does not resend a POST, so its caller gets a bare EOF. Every
//     such order must be one exgate never read: no access log line names
//     its X-Request-ID and the backend never received it (not placed, so
//     a retry with the same identifier is placed once);
//   - from a client that closes idle connections first (IdleConnTimeout
//     below exgate's idle_timeout, the rule docs/operations.md gives for
//     clients and load balancers), no order fails at all.
func TestKeepAliveIdleTimeout(t *testing.T) {
	const (
		idle    = 200 * time.Millisecond
		workers = 16
		rounds  = 8 // orders per worker and client
	)
	cb := startCountingBackend(t)
	token := accessToken(t, cb.url)
	g := startGateway(t, configHeaderAccessLog(cb.url)+fmt.Sprintf(`server:
  idle_timeout: %s
limiter:
  store: memory
`, idle))
	var seq int
	var seqMu sync.Mutex
	run := func(c *http.Client, name string) (sent int, failed []answer) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					// Idle gaps spread over idle±1ms: some connections are
					// reused just before exgate closes them, some just after.
					time.Sleep(idle - time.Millisecond + rand.N(2*time.Millisecond))
					seqMu.Lock()
					seq++
					id := fmt.Sprintf("%s-%d", name, seq)
					seqMu.Unlock()
					req := orderWithID(g.url, token, fmt.Sprintf("%s-w%d-%d", name, w, i))
					req.Header.Set("X-Request-Id", id)
					a := do(c, req)
					mu.Lock()
					sent++
					if a.err != nil || a.status != http.StatusCreated {
						failed = append(failed, a)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return sent, failed
	}
	client := func(idleConnTimeout time.Duration) *http.Client {
		tr := &http.Transport{MaxIdleConnsPerHost: workers, IdleConnTimeout: idleConnTimeout}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}

	// The client keeps idle connections longer than exgate.
	sent, failed := run(client(0), "longer")
	time.Sleep(logFlush) // the gateway's access log written out
	out := g.out.String()
	eofs, kinds := 0, map[string]int{}
	for _, a := range failed {
		if a.err == nil {
			t.Errorf("order %s answered %d %s, want 201", a.id, a.status, a.code)
			continue
		}
		if errors.Is(a.err, io.EOF) {
			eofs++
		}
		_, kind, _ := strings.Cut(a.err.Error(), ": ") // past `Post "url"`
		kinds[kind]++
		if len(kinds) == 1 && kinds[kind] == 1 {
			t.Logf("the first: %v, on a %s", a.err, a.conn)
		}
		if strings.Contains(out, `"request_id":"`+a.id+`"`) || cb.view(a.id) != "never received" {
			t.Errorf("order %s failed with %v on a %s, and exgate read it: access log %v, backend: %s",
				a.id, a.err, a.conn, strings.Contains(out, `"request_id":"`+a.id+`"`), cb.view(a.id))
		}
	}
	t.Logf("client idle timeout longer than exgate's %v: %d of %d orders failed without an answer (%d bare EOF: %v), none read by exgate",
		idle, len(failed), sent, eofs, kinds)

	// The client closes idle connections before exgate does: at a quarter
	// of exgate's idle_timeout, so that a loaded machine's late timers
	// do not let it reuse one at exgate's moment anyway.
	sent, failed = run(client(idle/4), "shorter")
	for _, a := range failed {
		t.Errorf("client idle timeout %v below exgate's %v: order %s failed: status %d %s, %v", idle/4, idle, a.id, a.status, a.code, a.err)
	}
	t.Logf("client idle timeout %v below exgate's %v: %d orders, %d failed", idle/4, idle, sent, len(failed))
}

// TestKeepAliveUnusedConnection sends orders on pooled connections that
// have carried no request, about server.read_header_timeout (500ms here)
// after they were opened: exgate's bound on a connection that sends no
// header closes them then, however long idle_timeout (2m here). Go's
// transport pools such connections: one it dialed for a request that
// another connection, freed meanwhile, carried. Here every dial but a
// client's first waits until a burst of orders has been answered on the
// first connection, and the burst's other connections go to the pool
// unused (unusedPool).
//
//   - exgate closes them (the premise);
//   - from a client whose idle timeout is longer (none here), an order
//     written into one as exgate closes it gets a bare EOF, as one on a
//     connection idle for idle_timeout does (TestKeepAliveIdleTimeout),
//     and exgate never read it;
//   - from a client whose idle timeout is below read_header_timeout
//     (newClient's rule: clientIdleTimeout), no order fails.
func TestKeepAliveUnusedConnection(t *testing.T) {
	const (
		header = 500 * time.Millisecond
		rounds = 4
	)
	cb := startCountingBackend(t)
	token := accessToken(t, cb.url)
	g := startGateway(t, configHeaderAccessLog(cb.url)+fmt.Sprintf(`server:
  read_header_timeout: %s
  idle_timeout: 2m
limiter:
  store: memory
`, header))
	var seq atomic.Int64
	send := func(c *http.Client, name string) answer {
		id := fmt.Sprintf("unused-%s-%d", name, seq.Add(1))
		req := orderWithID(g.url, token, id)
		req.Header.Set("X-Request-Id", id)
		return do(c, req)
	}

	// The premise: exgate closes the unused connections (a read of each
	// meets its end) long before idle_timeout.
	p := newUnusedPool(t, 0)
	p.fill(t, func(c *http.Client) answer { return send(c, "premise") })
	if !eventually(20*time.Second, func() bool { return len(p.unusedOpen()) == 0 }) {
		t.Errorf("%d of %d unused connections still open 20s after they were opened (read_header_timeout %v, idle_timeout 2m)",
			len(p.unusedOpen()), len(p.unused()), header)
	}

	var longer []answer
	sent := 0
	for range rounds {
		p := newUnusedPool(t, 0)
		longer = append(longer, p.round(t, header, func(c *http.Client) answer { return send(c, "longer") })...)
		sent += unusedBurst
	}
	time.Sleep(logFlush) // the gateway's access log written out
	out := g.out.String()
	eofs := 0
	for _, a := range longer {
		switch {
		case a.err == nil:
			t.Errorf("order %s answered %d %s, want 201", a.id, a.status, a.code)
		case strings.Contains(out, `"request_id":"`+a.id+`"`) || cb.view(a.id) != "never received":
			t.Errorf("order %s failed with %v on a %s, and exgate read it: backend: %s", a.id, a.err, a.conn, cb.view(a.id))
		case errors.Is(a.err, io.EOF):
			eofs++
		}
	}
	if len(longer) > 0 {
		t.Logf("the first: %v, on a %s", longer[0].err, longer[0].conn)
	}
	t.Logf("client idle timeout longer than exgate's read_header_timeout %v: %d of %d orders failed without an answer (%d bare EOF), none read by exgate",
		header, len(longer), sent, eofs)

	for range rounds {
		p := newUnusedPool(t, header/4)
		for _, a := range p.round(t, header, func(c *http.Client) answer { return send(c, "shorter") }) {
			t.Errorf("client idle timeout %v below exgate's read_header_timeout %v: order %s failed: status %d %s, %v on a %s",
				header/4, header, a.id, a.status, a.code, a.err, a.conn)
		}
	}
}

// unusedBurst is how many orders an unusedPool sends at once.
const unusedBurst = 16

// unusedPool is a client whose first burst of orders leaves connections
// in its pool that carried no request, opened at one moment (opened):
// every dial but the first waits until the burst has been answered, on
// the first connection one after the other. Each order that found no
// idle connection dialed one, so up to unusedBurst-1 are left unused.
type unusedPool struct {
	c      *http.Client
	gate   chan struct{}
	dials  atomic.Int64
	mu     sync.Mutex
	conns  []*tracedConn
	opened time.Time
}

// newUnusedPool returns an unusedPool whose client closes connections
// idle for idle (0: never).
func newUnusedPool(t *testing.T, idle time.Duration) *unusedPool {
	p := &unusedPool{gate: make(chan struct{})}
	d := &net.Dialer{}
	tr := &http.Transport{MaxIdleConnsPerHost: unusedBurst, IdleConnTimeout: idle,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p.dials.Add(1) > 1 {
				<-p.gate
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := &tracedConn{Conn: c, dialed: time.Now()}
			p.mu.Lock()
			p.conns = append(p.conns, tc)
			p.mu.Unlock()
			return tc, nil
		}}
	t.Cleanup(tr.CloseIdleConnections)
	p.c = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return p
}

// burst sends unusedBurst orders at once, each after its delay, and
// returns those that were not answered 201.
func (p *unusedPool) burst(send func(*http.Client) answer, delay func() time.Duration) []answer {
	var mu sync.Mutex
	var failed []answer
	var wg sync.WaitGroup
	for range unusedBurst {
		wg.Go(func() {
			time.Sleep(delay())
			if a := send(p.c); a.err != nil || a.status != http.StatusCreated {
				mu.Lock()
				failed = append(failed, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// fill sends the first burst, which must be answered, and lets the
// waiting dials go.
func (p *unusedPool) fill(t *testing.T, send func(*http.Client) answer) {
	t.Helper()
	for _, a := range p.burst(send, func() time.Duration { return 0 }) {
		t.Fatalf("order %s of the first burst: %d %s %v", a.id, a.status, a.code, a.err)
	}
	p.opened = time.Now()
	close(p.gate)
	done := func() bool { p.mu.Lock(); defer p.mu.Unlock(); return int64(len(p.conns)) == p.dials.Load() }
	if !eventually(10*time.Second, done) {
		t.Fatalf("%d dials, %d done 10s after they could go", p.dials.Load(), len(p.conns))
	}
	if len(p.unused()) == 0 {
		t.Fatalf("no connection of %d went to the pool unused", p.dials.Load())
	}
}

// round fills the pool, then sends a burst again about at (±1ms) after
// the unused connections were opened, and returns the orders of that
// burst that were not answered 201.
func (p *unusedPool) round(t *testing.T, at time.Duration, send func(*http.Client) answer) []answer {
	t.Helper()
	p.fill(t, send)
	return p.burst(send, func() time.Duration {
		return time.Until(p.opened.Add(at - time.Millisecond + rand.N(2*time.Millisecond)))
	})
}

// unused returns the pool's connections that have carried no request.
func (p *unusedPool) unused() []*tracedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*tracedConn
	for _, c := range p.conns {
		c.mu.Lock()
		if c.sent == 0 {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
}

// unusedOpen returns the unused connections of the pool whose end no
// read has met yet.
func (p *unusedPool) unusedOpen() []*tracedConn {
	var out []*tracedConn
	for _, c := range p.unused() {
		c.mu.Lock()
		if c.eofAt.IsZero() {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
}
