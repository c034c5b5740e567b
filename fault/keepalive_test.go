package fault

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
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
