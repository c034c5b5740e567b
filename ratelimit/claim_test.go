package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// testClaimFunc is a claim function for the tests: it records ARGV[1]
// in KEYS[1] unless the key is taken, and raises an error for "boom".
const testClaimFunc = `
local function claim(KEYS, ARGV)
  if ARGV[1] == "boom" then
    return redis.call("INCR", "not-a-number-" .. KEYS[1], "extra")
  end
  if redis.call("SET", KEYS[1], ARGV[1], "NX") then
    return {"claimed", ARGV[1]}
  end
  return {"taken", redis.call("GET", KEYS[1])}
end
`

func claimRequest(key, claimKey, arg string, l Limit) *Request {
	return &Request{
		Checks: []Check{{Key: key, Limit: l}},
		Claim:  &ClaimPart{Keys: []string{claimKey}, Args: []any{arg}, Timeout: time.Second},
	}
}

// TestClaimRidesWithRequest: a request's claim runs in its script run
// only when its limits let it pass; a claim that fails fails alone; a
// limiter without a claim function, and the memory limiter, do not send
// it.
func TestClaimRidesWithRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	ctx := context.Background()
	r := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second, ClaimFunc: testClaimFunc})
	defer r.Close()
	one := Limit{Rate: 1, Period: time.Hour, Burst: 1}

	cases := []struct {
		name                string
		q                   *Request
		allowed, run        bool
		reply               []any
		claimErr, keyExists bool
	}{
		{"allowed: claimed", claimRequest("c:1", "claim:1", "v1", one), true, true, []any{"claimed", "v1"}, false, true},
		{"allowed: taken", claimRequest("c:2", "claim:1", "v2", one), true, true, []any{"taken", "v1"}, false, true},
		{"refused: not run", claimRequest("c:1", "claim:refused", "v3", one), false, false, nil, false, false},
		{"claim fails alone", claimRequest("c:3", "claim:boom", "boom", one), true, true, nil, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ans Answer
			if err := r.AllowAll(ctx, tc.q, &ans); err != nil {
				t.Fatal(err)
			}
			cl := ans.Claim
			if ans.Allowed != tc.allowed || !cl.Sent || cl.Run != tc.run {
				t.Fatalf("allowed %v, claim %+v; want allowed %v, sent, run %v", ans.Allowed, cl, tc.allowed, tc.run)
			}
			var ce ClaimError
			if tc.claimErr != errors.As(cl.Err, &ce) {
				t.Errorf("claim error %v, want a ClaimError: %v", cl.Err, tc.claimErr)
			}
			if len(cl.Reply) != len(tc.reply) {
				t.Fatalf("reply %v, want %v", cl.Reply, tc.reply)
			}
			for i := range tc.reply {
				if cl.Reply[i] != tc.reply[i] {
					t.Errorf("reply %v, want %v", cl.Reply, tc.reply)
				}
			}
			n, err := srv.Do("EXISTS", tc.q.Claim.Keys[0])
			if err != nil || (n == int64(1)) != tc.keyExists {
				t.Errorf("claim key exists = %v %v, want %v", n, err, tc.keyExists)
			}
		})
	}
	// The failed claim's request was charged like any that passed.
	if res, err := r.Allow(ctx, "c:3", one); err != nil || res.Allowed {
		t.Errorf("key of a request whose claim failed: %+v %v, want charged", res, err)
	}

	t.Run("concurrent claims, batched, one claimed", func(t *testing.T) {
		many := Limit{Rate: 1000, Period: time.Second, Burst: 1000}
		var wg sync.WaitGroup
		var mu sync.Mutex
		claimed := 0
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ans Answer
				if err := r.AllowAll(ctx, claimRequest("c:many", "claim:same", strconv.Itoa(i), many), &ans); err != nil {
					t.Error(err)
					return
				}
				if ans.Claim.Run && ans.Claim.Reply[0] == "claimed" {
					mu.Lock()
					claimed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if claimed != 1 {
			t.Errorf("50 concurrent claims of one key: %d claimed, want 1", claimed)
		}
	})

	t.Run("not sent", func(t *testing.T) {
		plain := NewRedis(srv.Client(), RedisOptions{Timeout: time.Second})
		defer plain.Close()
		mem := NewMemory(MemoryOptions{})
		for name, lim := range map[string]Limiter{"redis without a claim function": plain, "memory": mem} {
			var ans Answer
			q := claimRequest("c:ns:"+name, "claim:ns", "v", one)
			if err := lim.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || ans.Claim.Sent {
				t.Errorf("%s: allowed %v, claim %+v, %v; want allowed, not sent", name, ans.Allowed, ans.Claim, err)
			}
		}
		if n, err := srv.Do("EXISTS", "claim:ns"); err != nil || n != int64(0) {
			t.Errorf("a claim not sent was run: EXISTS = %v %v", n, err)
		}
	})

	t.Run("store down", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer c.Close()
		r := NewRedis(c, RedisOptions{Timeout: 50 * time.Millisecond, ClaimFunc: testClaimFunc})
		defer r.Close()
		srv.Freeze()
		defer srv.Thaw()
		var ans Answer
		q := claimRequest("c:down", "claim:down", "v", one)
		q.Claim.Timeout = 200 * time.Millisecond
		start := time.Now()
		err := r.AllowAll(ctx, q, &ans)
		d := time.Since(start)
		if err == nil || !ans.Claim.Sent || ans.Claim.Err == nil {
			t.Fatalf("with Redis stopped: %v, claim %+v; want an error, the claim sent and failed", err, ans.Claim)
		}
		if d < q.Claim.Timeout || d > q.Claim.Timeout+150*time.Millisecond {
			t.Errorf("with Redis stopped: failed after %v, want the claim's deadline %v", d, q.Claim.Timeout)
		}
		// Failing fast in the backoff: not sent, the caller claims on
		// its own.
		ans = Answer{}
		if err := r.AllowAll(ctx, claimRequest("c:down", "claim:down", "v", one), &ans); !errors.Is(err, ErrStoreUnavailable) || ans.Claim.Sent {
			t.Errorf("in the backoff: %v, claim %+v; want ErrStoreUnavailable, not sent", err, ans.Claim)
		}
	})
}
