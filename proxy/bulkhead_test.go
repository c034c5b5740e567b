package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// holdBulk opens a connection that sends the head of a chunked bulk and
// the first byte of its body, then holds; it is closed when the test
// ends. (A refusal of a request whose body is chunked and unread closes
// the connection after it, at once: refuse.)
func holdBulk(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, "POST /api/v1/odr/orders/bulk/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n[\r\n")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBulkHeadRefusedFromCache: a bulk's kind and cost are in its body,
// so it is charged once the body is read; but a client the deny caches of
// both its targets (placements and cancels) know to be over its limits is
// refused at the bulk's head, before any of its body is read or held.
// While either kind could still pass, the body is read.
func TestBulkHeadRefusedFromCache(t *testing.T) {
	rl := newTestRedisLimits(t)
	t.Cleanup(func() { _ = rl.Close() })
	e := startOrdersStore(t, placedBulk, nil, func(c *config.Config) {
		c.Validation.Bulk.MaxOrders = 1
		for _, name := range []string{"place_order", "cancel_order"} {
			c.Route(name).Limits[0].Rate = config.Rate{N: 1, Period: time.Hour}
			c.Route(name).Limits[0].Burst = 1
		}
	}, ratelimit.NewDenyCache(rl, denyCacheKeys, nil), nil)
	answer := func(c net.Conn) int {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0 // no answer: the body is awaited
		}
		res.Body.Close()
		return res.StatusCode
	}
	// Single requests spend the allowances; their refusals are cached
	// (a refused bulk never is: a smaller one may fit).
	spend := func(method, path string, want int) {
		t.Helper()
		body := bulkOrder(0, "")
		if method == "DELETE" {
			body = ""
		}
		res := do(t, method, e.url+path, strings.NewReader(body), "Authorization", "Bearer tok", "Content-Type", "application/json")
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d", method, path, res.StatusCode, want)
		}
	}
	spend("POST", "/api/v1/odr/orders/", http.StatusCreated)
	spend("POST", "/api/v1/odr/orders/", http.StatusTooManyRequests) // placements known refused

	// Cancels can still pass: the bulk's body is read.
	held := holdBulk(t, e.addr)
	waitBuffered(t, e, reading(1, 1))
	held.Close()
	waitBuffered(t, e, 0)

	spend("DELETE", "/api/v1/odr/orders/1/", http.StatusCreated)
	spend("DELETE", "/api/v1/odr/orders/1/", http.StatusTooManyRequests) // cancels known refused too
	if code := answer(holdBulk(t, e.addr)); code != http.StatusTooManyRequests {
		t.Fatalf("a bulk head from a client refused both kinds: %d, want 429 before its body", code)
	}
	if n := e.gw.budget.Buffered(); n != 0 {
		t.Errorf("a bulk refused at its head holds %d bytes", n)
	}
}

// denyCacheKeys is the size of the deny cache of a test that needs it to
// hold a few refusals at once: the cache is 64 shards of maxKeys/64
// entries each (expiring.Map), so one of 100 keys holds one a shard, and
// two refusals whose keys hash to one shard (by a seed drawn per cache:
// 1 run in 64) evict each other.
const denyCacheKeys = 1000

// newTestRedisLimits is a Redis limit store on a Redis of its own whose
// deadline only a hang reaches: on a loaded machine a round trip slower
// than a second would otherwise be decided by the route's store-error
// fallback, whose refusals the deny cache never learns, and the tests
// that count on Redis's answers would fail for the machine's load.
func newTestRedisLimits(t *testing.T) *ratelimit.Redis {
	return ratelimit.NewRedis(redistest.Start(t).Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
}

// testStoreTimeout is the Redis deadline of tests that do not test a
// deadline: only a hang reaches it, where a round trip over a second
// under a loaded suite would be decided by the store-error path.
const testStoreTimeout = time.Minute
