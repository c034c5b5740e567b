package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// prefixes keeps the keys of each test apart on a shared server.
var prefixCounter atomic.Int64

func uniquePrefix() string { return "t" + strconv.FormatInt(prefixCounter.Add(1), 10) + ":" }

// newClient returns a client as the proxy should build it: context
// deadlines bound socket I/O.
func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisHarness(srv *redistest.Server) harness {
	return harness{name: "redis", replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			out[i] = NewRedis(newClient(t, srv.Addr), o) // one client per replica
		}
		return out
	}}
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	runStoreCases(t, redisHarness(srv))
}

func TestRedisClusterStore(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	runStoreCases(t, harness{name: "cluster", replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			out[i] = NewRedis(c, o)
		}
		return out
	}})

	// Keys spread over the masters, and each works.
	c := cl.Client(t)
	s := NewRedis(c, testOptions(newClock()))
	for i := range 30 {
		mustClaim(t, s, Key("tok", strconv.Itoa(i)), fpA, Claimed)
	}
	used := 0
	for _, node := range cl.Servers {
		v, err := node.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if v.(int64) > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("keys landed on %d of 3 masters", used)
	}
}

func TestRedisKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := newClock()
	o := testOptions(c)
	o.KeyPrefix = "exgate:idem:"
	s := NewRedis(newClient(t, srv.Addr), o)
	key := Key("hmac-of-token", "ord-1")
	cl := mustClaim(t, s, key, fpA, Claimed)

	full := "exgate:idem:" + key
	ttl, err := srv.Do("PTTL", full)
	if err != nil {
		t.Fatal(err)
	}
	if ms := ttl.(int64); ms <= 0 || ms > retention.Milliseconds() {
		t.Errorf("PTTL after claim = %dms, want within the retention", ms)
	}
	st, _ := srv.Do("HGET", full, "st")
	dl, _ := srv.Do("HGET", full, "dl")
	if st != "p" || dl != strconv.FormatInt(c.now().Add(inFlight).UnixMilli(), 10) {
		t.Errorf("in-flight entry st=%v dl=%v", st, dl)
	}

	// Completing restarts the retention and drops the deadline.
	_, _ = srv.Do("PEXPIRE", full, 1000)
	must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("{}")}))
	ttl, _ = srv.Do("PTTL", full)
	if ms := ttl.(int64); ms < retention.Milliseconds()-60_000 {
		t.Errorf("PTTL after complete = %dms, want the retention again", ms)
	}
	if n, _ := srv.Do("HEXISTS", full, "dl"); n != int64(0) {
		t.Error("deadline kept after completion")
	}
}

// TestRedisRetention lets Redis itself expire an entry.
func TestRedisRetention(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Retention = 100 * time.Millisecond
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(newClient(t, srv.Addr), o)
	cl := mustClaim(t, s, "k", fpA, Claimed)
	must(t, s.Complete(context.Background(), cl, Record{Status: 201}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := srv.Do("EXISTS", o.KeyPrefix+"k")
		if err != nil {
			t.Fatal(err)
		}
		if v == int64(0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis never expired the entry")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustClaim(t, s, "k", fpA, Claimed)
}

func TestRedisStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Timeout = 500 * time.Millisecond
	s := NewRedis(newClient(t, srv.Addr), o)
	cl := mustClaim(t, s, "k", fpA, Claimed)

	srv.Stop()
	if c, err := s.Claim(context.Background(), "other", fpA); err == nil {
		t.Fatalf("Claim with Redis down = %+v, want an error", c)
	}
	if err := s.Complete(context.Background(), cl, Record{Status: 201}); err == nil || errors.Is(err, ErrClaimLost) {
		t.Errorf("Complete with Redis down = %v, want a store error", err)
	}
	if err := s.Release(context.Background(), cl); err == nil {
		t.Error("Release with Redis down succeeded")
	}

	// Back up (empty, as after a failover without persistence).
	srv.Restart()
	mustClaim(t, s, "k", fpA, Claimed)
}

// TestRedisDeadline: a Redis that stops answering makes calls fail at
// the per-call deadline instead of hanging.
func TestRedisDeadline(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Timeout = 100 * time.Millisecond
	s := NewRedis(newClient(t, srv.Addr), o)
	mustClaim(t, s, "warm", fpA, Claimed) // the script is loaded
	if _, err := srv.Do("CLIENT", "PAUSE", "1000", "ALL"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(context.Background(), "k", fpA)
	if err == nil {
		t.Fatal("Claim on a paused Redis succeeded")
	}
	if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	// After the pause the store works again; whatever the abandoned call
	// did, the identifier is never free twice.
	c, err := s.Claim(context.Background(), "k", fpA)
	if err != nil || (c.Outcome != Claimed && c.Outcome != InProgress) {
		t.Errorf("after the pause: %+v, %v", c, err)
	}
}

func TestRedisRejectsMalformedEntries(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = "p:"
	s := NewRedis(newClient(t, srv.Addr), o)
	if _, err := srv.Do("SET", "p:str", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), "str", fpA); err == nil {
		t.Error("Claim over a string key succeeded")
	}
	fp := fmt.Sprintf("%x", fpA[:])
	if _, err := srv.Do("HSET", "p:bad", "st", "d", "fp", fp, "status", "abc"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), "bad", fpA); err == nil {
		t.Error("Claim over a malformed stored status succeeded")
	}
}
