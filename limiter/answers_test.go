package limiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

// outcomeNamed returns d's outcome of the limit named name, or nil.
func outcomeNamed(d *Decision, name string) *Outcome {
	for k := 0; k < d.N; k++ {
		if d.Outcomes[k].Limit == name {
			return &d.Outcomes[k]
		}
	}
	return nil
}

// TestDuplicateAnswersAllowance: an order route's allowance of duplicate
// answers is decided with its limits for a request duplicate protection
// may answer (Claims, a claim, a deny-cache lookup) and left out of any
// other; it charges nothing when the request is placed; Uncharge moves a
// request's charge to it and Refund does not; once spent the client's
// orders are refused by it, from the deny cache after the first refusal,
// and only that client's. Memory and Redis stores behind a deny cache.
func TestDuplicateAnswersAllowance(t *testing.T) {
	clock := newFakeClock()
	stores := map[string]ratelimit.Store{"memory": ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})}
	if !testing.Short() {
		rl := ratelimit.NewRedis(redistest.Start(t).Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		stores["redis"] = rl
	}
	cfg := config.Default()
	cfg.Route("place_order").Limits[0].Rate = config.Rate{N: 10, Period: time.Hour}
	cfg.Route("place_order").Limits[0].Burst = 10
	cfg.Idempotency.DuplicateAnswers = config.DuplicateAnswers{Rate: config.Rate{N: 3, Period: time.Hour}, Burst: 3}
	rr := Compile(cfg, nil).Route("place_order")
	ctx := context.Background()
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			e := newTestEnforcer(t, ratelimit.NewDenyCache(store, 100, clock.Now), clock)
			tok := "tok-" + name
			order := Request{Token: tok, Addr: addr("198.51.100.8"), Claims: true}
			plain := Request{Token: tok, Addr: addr("198.51.100.8")}
			left := func(step string, d *Decision, own, answers int64) {
				t.Helper()
				o, a := outcomeNamed(d, "token"), outcomeNamed(d, config.DuplicateAnswersLimit)
				if o == nil || a == nil || o.Result.Remaining != own || a.Result.Remaining != answers {
					t.Errorf("%s: outcomes %+v; want token with %d left, %s with %d", step, d.Outcomes[:d.N], own, config.DuplicateAnswersLimit, answers)
				}
			}
			var d Decision
			e.Decide(ctx, rr, order, &d)
			if !d.Allowed || d.N != 2 {
				t.Fatalf("an order that may be answered: %+v, want allowed, two limits", d)
			}
			left("placed", &d, 9, 3)
			if err := e.Uncharge(ctx, rr, order, &d); err != nil {
				t.Fatal(err)
			}
			left("answered as a duplicate", &d, 10, 2)

			e.Decide(ctx, rr, plain, &d)
			if !d.Allowed || d.N != 1 || outcomeNamed(&d, config.DuplicateAnswersLimit) != nil {
				t.Errorf("an order nothing can answer: %+v, want its own limit only", d)
			}
			if err := e.Refund(ctx, rr, plain, &d); err != nil {
				t.Fatal(err)
			}
			e.Decide(ctx, rr, order, &d)
			if err := e.Refund(ctx, rr, order, &d); err != nil { // shed by overload: not an answer
				t.Fatal(err)
			}
			left("refunded", &d, 10, 2)
			for range 2 {
				e.Decide(ctx, rr, order, &d)
				if err := e.Uncharge(ctx, rr, order, &d); err != nil {
					t.Fatal(err)
				}
			}
			left("three answers", &d, 10, 0)

			e.Decide(ctx, rr, order, &d)
			a := outcomeNamed(&d, config.DuplicateAnswersLimit)
			if d.Allowed || a == nil || a.Decision != Limited || d.RetryAfter < 19*time.Minute || d.RetryAfter > 20*time.Minute {
				t.Fatalf("past the allowance: %+v, want refused by %s for 20 minutes", d, config.DuplicateAnswersLimit)
			}
			// The next order of that client is refused before its body
			// is read, from the deny cache; another client's is not.
			look := plain
			look.CacheOnly = true
			e.Decide(ctx, rr, look, &d)
			if d.Undecided || d.Allowed {
				t.Errorf("a deny-cache lookup past the allowance: %+v, want refused", d)
			}
			other := look
			other.Token = "another-" + tok
			e.Decide(ctx, rr, other, &d)
			if !d.Undecided {
				t.Errorf("another client's lookup: %+v, want undecided", d)
			}
		})
	}
}

// TestDuplicateAnswersKeys: the allowance counts as the route limit it
// is derived from counts — per verified account, per token, and for a
// token its address presented past token_spray.max_tokens in the
// address's one bucket — under the caller's tier.
func TestDuplicateAnswersKeys(t *testing.T) {
	clock := newFakeClock()
	ctx := context.Background()
	keys := func(cfg *config.Config, tokens map[string]string, req Request) []string {
		store := &keysSeen{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})}
		e := newTestEnforcer(t, store, clock)
		var d Decision
		req.Claims = true
		e.Decide(ctx, Compile(cfg, tokens).Route("place_order"), req, &d)
		if len(store.seen) == 0 {
			t.Fatalf("nothing decided: %+v", d)
		}
		var out []string
		for _, k := range store.seen[len(store.seen)-1] {
			if strings.Contains(k, ":"+config.DuplicateAnswersLimit+":") {
				out = append(out, k)
			}
		}
		return out
	}
	k, _ := NewKeyer(testSecret)
	cfg := config.Default()
	// An opaque token's first request carries the spray guard: the
	// token's key if the guard admits it, its address's bucket if not.
	if got := keys(cfg, nil, Request{Token: "tok", Addr: addr("198.51.100.9")}); len(got) != 2 ||
		got[0] != "exgate:place_order:duplicate_answers:5400/3600:t:"+k.ID("tok") ||
		got[1] != "exgate:place_order:duplicate_answers:5400/3600:s:198.51.100.9" {
		t.Errorf("an opaque token: %q", got)
	}
	tiered := config.Default()
	tiered.Tiers = map[string]map[string]config.TierLimit{"mm": {"place_order": {Rate: config.Rate{N: 54000, Period: time.Hour}, Burst: 54000}}}
	if got := keys(tiered, map[string]string{k.ID("tok-mm"): "mm"}, Request{Token: "tok-mm", Addr: addr("198.51.100.9")}); len(got) != 1 ||
		!strings.HasPrefix(got[0], "exgate:place_order:duplicate_answers:54000/3600:t:") {
		t.Errorf("a token of a faster tier: %q", got)
	}
	verified := config.Default()
	verified.Identity.Verify = true
	verified.Route("place_order").Limits[0].Key = config.KeyAccount
	if got := keys(verified, nil, Request{Account: "acct", Addr: addr("198.51.100.9")}); len(got) != 1 ||
		got[0] != "exgate:place_order:duplicate_answers:5400/3600:u:acct" {
		t.Errorf("a verified account: %q", got)
	}
	// Past the address's max_tokens a new token counts in the address's
	// bucket: the spray guard's answer is known from an earlier request.
	spray := config.Default()
	spray.Limiter.TokenSpray.MaxTokens = 1
	store := &keysSeen{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})}
	e := newTestEnforcer(t, store, clock)
	rr := Compile(spray, nil).Route("place_order")
	var d Decision
	for _, tok := range []string{"first", "second", "second"} {
		e.Decide(ctx, rr, Request{Token: tok, Addr: addr("198.51.100.10"), Claims: true}, &d)
	}
	last := store.seen[len(store.seen)-1]
	if !d.Demoted || outcomeNamed(&d, config.DuplicateAnswersLimit) == nil || len(last) != 2 ||
		last[1] != "exgate:place_order:duplicate_answers:5400/3600:s:198.51.100.10" {
		t.Fatalf("a token past max_tokens: %+v, keys %q; want demoted, its allowance the address's", d, last)
	}
}
