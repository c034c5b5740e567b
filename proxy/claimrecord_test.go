package proxy

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
)

// identifiedBackend places each order it receives, answering 201 with a
// body naming its identifier, and counts the placements of each. (The
// test backend has read the body: the identifier comes in X-Identifier
// too.)
type identifiedBackend struct {
	mu     sync.Mutex
	placed map[string]int
	// before, when set, runs before an order is answered.
	before func(identifier string)
}

func (b *identifiedBackend) serve(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Identifier")
	b.mu.Lock()
	b.placed[id]++
	b.mu.Unlock()
	if b.before != nil {
		b.before(id)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"placed":"`+id+`"}`)
}

// answer is what a client got to an order.
type answer struct {
	status   int
	replayed bool
	body     string
	err      error
}

// postOrderAsync posts an order with identifier id, from any goroutine.
func postOrderAsync(url, id string) answer {
	body := bulkOrder(0, id)
	req, _ := http.NewRequest("POST", url+"/api/v1/odr/orders/", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Identifier", id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, replayed: res.Header.Get(idempotency.ReplayedHeader) == "true", body: string(b), err: err}
}

// TestConcurrentRetriesPlacedOnce: orders sent at once, each with a retry
// racing it, the responses of some recorded in one round trip: every
// order is placed once, each retry is held (409 request_in_progress) or
// replays that order's own response, and a later retry replays it; with
// the claims in memory and riding with the limits in Redis.
func TestConcurrentRetriesPlacedOnce(t *testing.T) {
	for _, m := range claimModes(t) {
		t.Run(m.name, func(t *testing.T) {
			be := &identifiedBackend{placed: map[string]int{}}
			// A deadline a loaded machine meets: a record that misses it
			// leaves its identifier held, which the later retries would
			// tell as a failure.
			e := startOrdersWith(t, be.serve, func(c *config.Config) {
				liftOrderLimit(c)
				c.Idempotency.Timeout = 5 * time.Second
			}, m.lim, nil, m.idem)
			const n = 16
			answers := make([][2]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				for j := range 2 {
					wg.Add(1)
					go func() { defer wg.Done(); answers[i][j] = postOrderAsync(e.url, "race"+strconv.Itoa(i)) }()
				}
			}
			wg.Wait()
			for i, pair := range answers {
				id := "race" + strconv.Itoa(i)
				want := `{"placed":"` + id + `"}`
				placedNow := 0
				for _, a := range pair {
					switch {
					case a.err != nil:
						t.Errorf("%s: %v", id, a.err)
					case a.status == http.StatusCreated && a.body != want:
						t.Errorf("%s answered %s, want %s", id, a.body, want)
					case a.status == http.StatusCreated && !a.replayed:
						placedNow++
					case a.status == http.StatusConflict && strings.Contains(a.body, `"request_in_progress"`):
					case a.status != http.StatusCreated:
						t.Errorf("%s answered %d %s, want 201 or 409 request_in_progress", id, a.status, a.body)
					}
				}
				if placedNow != 1 || be.placed[id] != 1 {
					t.Errorf("%s placed %d times, answered placed %d times; want 1", id, be.placed[id], placedNow)
				}
				if a := postOrderAsync(e.url, id); a.status != http.StatusCreated || !a.replayed || a.body != want {
					t.Errorf("a later retry of %s: %d (replayed %v) %s, want its response replayed", id, a.status, a.replayed, a.body)
				}
			}
		})
	}
}

// liftOrderLimit lifts the order route's limit out of the tests' reach.
func liftOrderLimit(c *config.Config) {
	c.Route("place_order").Limits[0].Rate = config.Rate{N: 100000, Period: time.Hour}
	c.Route("place_order").Limits[0].Burst = 100000
}

// TestOrderRecordFailsRedisDown: Redis stops answering after the backend
// placed an order and before its response is recorded: the client gets
// the backend's answer all the same, and the identifier stays claimed:
// once Redis is back, a retry is held (409; or replayed, should Redis run
// the record it was sent while it stood still), never placed again.
func TestOrderRecordFailsRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	m := claimModes(t)[1]
	be := &identifiedBackend{placed: map[string]int{}}
	be.before = func(id string) {
		if id == "down" {
			m.srv.Freeze()
		}
	}
	e := startOrdersWith(t, be.serve, liftOrderLimit, m.lim, nil, func(o idempotency.Options) idempotency.Store {
		// As exgate builds it: deadlines bound socket reads.
		c := redis.NewClient(&redis.Options{Addr: m.srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return idempotency.NewRedis(c, o)
	})
	t.Cleanup(m.srv.Thaw)
	a := postOrderAsync(e.url, "down")
	m.srv.Thaw()
	if a.err != nil || a.status != http.StatusCreated || a.replayed {
		t.Fatalf("the order whose record failed: %d %s %v, want the backend's 201", a.status, a.body, a.err)
	}
	for range 2 {
		a = postOrderAsync(e.url, "down")
		held := a.status == http.StatusConflict && strings.Contains(a.body, `"request_in_progress"`)
		// Redis may yet run the record it was sent while frozen.
		replayed := a.status == http.StatusCreated && a.replayed && a.body == `{"placed":"down"}`
		if !held && !replayed {
			t.Errorf("its retry: %d %s, want 409 request_in_progress (or its response replayed)", a.status, a.body)
		}
	}
	if n := be.placed["down"]; n != 1 {
		t.Errorf("placed %d times, want once", n)
	}
}
