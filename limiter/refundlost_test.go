package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/exgate/exgate/ratelimit"
)

// lostReplies is a store whose armed AllowAll is decided, and charged,
// by the store beneath and then fails: a round trip whose reply was lost.
type lostReplies struct {
	ratelimit.Store
	armed atomic.Bool
}

func (s *lostReplies) AllowAll(ctx context.Context, q *ratelimit.Request, ans *ratelimit.Answer) error {
	err := s.Store.AllowAll(ctx, q, ans)
	if s.armed.CompareAndSwap(true, false) {
		return errors.New("i/o timeout")
	}
	return err
}

// TestRefundLost: RefundLost gives back what a run whose reply was lost
// charged a request — every limit that applies to it, at its cost — but
// never more: not a shadow limit's charge (it may have refused), and
// nothing when the run carried the spray guard, whose answer, and so the
// limits it charged, was lost too.
func TestRefundLost(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { on_store_error: closed, token_spray: { max_tokens: 1, window: 1h } }
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { name: token, key: token, rate: 4/1h }
      - { name: watch, key: address, rate: 1/1h, shadow: true }
`)
	rr := Compile(cfg, nil).Route("r")
	for _, tc := range []struct {
		name string
		warm bool // a request decided before: the guard's answer cached
		left int  // of the token's 4, once the lost request is given back (or not)
	}{
		{"the guard answered before", true, 3},  // 4 - warm; the lost one given back (else 2)
		{"the guard in the lost run", false, 3}, // 4 - the lost one, not given back (else 4)
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			store := &lostReplies{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})}
			e := newTestEnforcer(t, store, clock)
			ctx := context.Background()
			owner := Request{Token: "tok-a", Addr: addr("192.0.2.1"), Cost: 1}
			var d Decision
			if tc.warm {
				if e.Decide(ctx, rr, owner, &d); !d.Allowed {
					t.Fatalf("first request refused: %+v", d)
				}
			}
			store.armed.Store(true)
			if e.Decide(ctx, rr, owner, &d); d.Allowed || !d.Unavailable {
				t.Fatalf("the request whose reply was lost: %+v, want refused, the store unavailable", d)
			}
			if err := e.RefundLost(ctx, rr, owner, &d); err != nil {
				t.Fatal(err)
			}
			if got := count(e, rr, owner, 4); got != tc.left {
				t.Errorf("the token made %d of 4 after, want %d", got, tc.left)
			}
		})
	}
}
