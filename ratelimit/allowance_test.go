package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/clusterslot"
	"github.com/exgate/exgate/internal/redistest"
)

// allowanceStore is a store whose keys can be read.
type allowanceStore interface {
	Store
	Inspector
}

// allowanceStores are the limiters the allowance table runs against:
// memory and Redis (standalone and Cluster), each also behind a deny
// cache.
func allowanceStores(t *testing.T) map[string]allowanceStore {
	mem := NewMemory(MemoryOptions{})
	out := map[string]allowanceStore{"memory": mem, "memory+denycache": NewDenyCache(mem, 100, nil)}
	if testing.Short() {
		return out
	}
	rl := NewRedis(redistest.Start(t).Client(), RedisOptions{Timeout: testStoreTimeout})
	t.Cleanup(func() { _ = rl.Close() })
	cl := redistest.StartCluster(t, 3)
	crl := NewRedis(cl.Client(t), RedisOptions{Timeout: testStoreTimeout})
	t.Cleanup(func() { _ = crl.Close() })
	out["redis"], out["redis+denycache"], out["redis-cluster"] = rl, NewDenyCache(rl, 100, nil), crl
	return out
}

// TestAllowanceTable: a check marked Allowance is decided with the
// request's other checks and refuses the request once it cannot take its
// cost, charging nothing, but it is never charged with them; Refund
// charges it while it gives the others back. Memory and Redis, standalone
// and Cluster, behind a deny cache or not, agree.
func TestAllowanceTable(t *testing.T) {
	ctx := context.Background()
	own := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	answers := Limit{Rate: 2, Period: time.Hour, Burst: 2}
	for name, lim := range allowanceStores(t) {
		t.Run(name, func(t *testing.T) {
			q := &Request{Checks: []Check{{Key: name + ":own", Limit: own}, {Key: name + ":answers", Limit: answers, Allowance: true}}}
			left := func(step string, wantOwn, wantAnswers int64) {
				t.Helper()
				for _, k := range []struct {
					c    Check
					want int64
				}{{q.Checks[0], wantOwn}, {q.Checks[1], wantAnswers}} {
					if res, err := lim.Peek(ctx, k.c.Key, k.c.Limit); err != nil || res.Remaining != k.want {
						t.Errorf("%s: %s has %d left (%v), want %d", step, k.c.Key, res.Remaining, err, k.want)
					}
				}
			}
			var ans Answer
			if err := lim.AllowAll(ctx, q, &ans); err != nil || !ans.Allowed || !ans.Results[1].Applied || !ans.Results[1].Result.Allowed {
				t.Fatalf("first request: %v, %+v; want allowed, its allowance decided", err, ans)
			}
			left("allowed", 9, 2)
			if err := lim.Refund(ctx, q); err != nil {
				t.Fatal(err)
			}
			left("its charge moved to its allowance", 10, 1)
			if err := lim.Refund(ctx, q); err != nil {
				t.Fatal(err)
			}
			left("a second answer", 10, 0)
			for i := range 2 { // the second from the deny cache, where there is one
				ans = Answer{}
				if err := lim.AllowAll(ctx, q, &ans); err != nil || ans.Allowed {
					t.Fatalf("request %d past the allowance: %v, allowed %v; want refused", i, err, ans.Allowed)
				}
				if r := ans.Results[1].Result; !ans.Results[1].Applied || r.Allowed || r.RetryAfter < 29*time.Minute || r.RetryAfter > 30*time.Minute {
					t.Errorf("request %d: the allowance's answer %+v, want refused for about 30 minutes", i, ans.Results[1])
				}
			}
			left("refused", 10, 0)
			// A request of cost 2 takes two answers of the allowance: a
			// Refund of it, past the allowance, charges it all the same
			// (the caller decided it first).
			bulk := &Request{Checks: q.Checks, Cost: 2}
			if err := lim.Refund(ctx, bulk); err != nil {
				t.Fatal(err)
			}
			if res, err := lim.Peek(ctx, q.Checks[1].Key, answers); err != nil || res.Allowed || res.RetryAfter < 89*time.Minute {
				t.Errorf("an allowance charged 2 past its burst: %+v %v, want refused for 90 minutes", res, err)
			}
		})
	}
}

// TestClaimAnswerChargesTheAllowance: a request whose claim ran and did
// not take what it claims is charged in its allowance checks only, in
// the same script run (in a Cluster, in the round trip that gives back
// its other parts); one whose claim took them in its other checks only;
// and one past its allowance is refused, without its claim running when
// the allowance is in the claim's run (outside a Cluster, or in its
// slot: elsewhere the claim runs on its own, as it does beside any part
// in another slot, and the deny cache answers the next requests) — a
// request refused elsewhere giving back what the claim's run charged.
func TestClaimAnswerChargesTheAllowance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-servers")
	}
	ctx := context.Background()
	own := Limit{Rate: 10, Period: time.Hour, Burst: 10}
	answers := Limit{Rate: 2, Period: time.Hour, Burst: 2}
	one := Limit{Rate: 1, Period: time.Hour, Burst: 1}
	srv := redistest.Start(t)
	var runs int64
	r := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout, ClaimFunc: testClaimFunc,
		Observe: func(time.Duration, int, error) { runs++ }})
	t.Cleanup(func() { _ = r.Close() })
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	cr := NewRedis(client, RedisOptions{Timeout: testStoreTimeout, ClaimFunc: testClaimFunc})
	t.Cleanup(func() { _ = cr.Close() })

	cs := clusterslot.Of(claimTag)
	same := func(name string) string { return claimTag + name }
	other := func(name string) string { return keyOn(t, cl, "other:"+name+":", cs, false) }
	setups := []struct {
		name         string
		lim          *Redis
		own, answers string
		apart        bool // the allowance is not in the claim's run
	}{
		{"standalone", r, "s:own", "s:answers", false},
		{"cluster, both with the claim", cr, same("c1:own"), same("c1:answers"), false},
		{"cluster, the allowance with the claim", cr, other("c2:own"), same("c2:answers"), false},
		{"cluster, the allowance on another master", cr, same("c3:own"), other("c3:answers"), true},
		{"cluster, neither with the claim", cr, other("c4:own"), other("c4:answers"), true},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			claimKey := claimTag + s.name
			q := func() *Request {
				return &Request{
					Checks: []Check{{Key: s.own, Limit: own}, {Key: s.answers, Limit: answers, Allowance: true}},
					Claim:  &ClaimPart{Keys: []string{claimKey}, Args: []any{"v"}, Timeout: time.Second},
				}
			}
			left := func(step string, wantOwn, wantAnswers int64) {
				t.Helper()
				for _, k := range []struct {
					key  string
					l    Limit
					want int64
				}{{s.own, own, wantOwn}, {s.answers, answers, wantAnswers}} {
					if res, err := s.lim.Peek(ctx, k.key, k.l); err != nil || res.Remaining != k.want {
						t.Errorf("%s: %s has %d left (%v), want %d", step, k.key, res.Remaining, err, k.want)
					}
				}
			}
			steps := []struct {
				name                  string
				allowed, run, charged bool
				own, answers          int64
			}{
				{"claimed", true, true, true, 9, 2},
				{"taken: the allowance charged", true, true, false, 9, 1},
				{"taken again", true, true, false, 9, 0},
				{"past the allowance: refused", false, s.apart, false, 9, 0},
			}
			for _, st := range steps {
				before := runs
				var ans Answer
				if err := s.lim.AllowAll(ctx, q(), &ans); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if ans.Allowed != st.allowed || ans.Claim.Run != st.run || ans.Uncharged != (st.allowed && !st.charged) {
					t.Fatalf("%s: allowed %v, claim run %v, uncharged %v; want %v, %v, %v", st.name, ans.Allowed, ans.Claim.Run, ans.Uncharged,
						st.allowed, st.run, st.allowed && !st.charged)
				}
				left(st.name, st.own, st.answers)
				if s.lim == r && runs-before != 1 {
					t.Errorf("%s: %d round trips, want 1", st.name, runs-before)
				}
			}
		})
	}

	t.Run("cluster, refused on another master: the claim's run gives its allowance back", func(t *testing.T) {
		checkRefusedElsewhere(t, client, cr, claimTag+"refused-elsewhere", other("spent"), same("re:answers"), one, answers)
	})
}

// checkRefusedElsewhere sends cr a request whose claim at claimKey is
// already taken and whose key spent, on another master than the claim,
// has nothing left (its limit is one), and checks that the refused request
// leaves its allowance at answersKey whole.
func checkRefusedElsewhere(t *testing.T, client *redis.ClusterClient, cr *Redis, claimKey, spent, answersKey string, one, answers Limit) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.Set(ctx, claimKey, "held", 0).Result(); err != nil {
		t.Fatal(err)
	}
	if res, err := cr.Allow(ctx, spent, one); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	q := &Request{
		Checks: []Check{{Key: spent, Limit: one}, {Key: answersKey, Limit: answers, Allowance: true}},
		Claim:  &ClaimPart{Keys: []string{claimKey}, Args: []any{"v"}, Timeout: time.Second},
	}
	var ans Answer
	if err := cr.AllowAll(ctx, q, &ans); err != nil || ans.Allowed || !ans.Claim.Run || ans.Claim.Reply[0] != "taken" {
		t.Fatalf("%v, allowed %v, claim %+v; want refused, the claim run and not taken", err, ans.Allowed, ans.Claim)
	}
	if res, err := cr.Peek(ctx, q.Checks[1].Key, answers); err != nil || res.Remaining != 2 {
		t.Errorf("the allowance of a refused request: %d left (%v), want 2", res.Remaining, err)
	}
}
