package idempotency

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/fakeclock"
)

// newClock returns a clock a test moves by hand, shared by the replicas
// of a test.
func newClock() *fakeclock.Clock { return fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// harness builds stores of one implementation. replicas returns n stores
// sharing one state, as n exgate replicas would (for the memory store,
// the same store n times).
type harness struct {
	name     string
	replicas func(t *testing.T, n int, o Options) []Store
	// accountShares: the store charges every claim to its account's
	// share, whatever its client (a Redis Cluster: Redis.keys).
	accountShares bool
}

func (h harness) store(t *testing.T, o Options) Store { return h.replicas(t, 1, o)[0] }

var (
	fpA = FingerprintOf([]byte(`{"symbol":"BTC_USDT","identifier":"a"}`))
	fpB = FingerprintOf([]byte(`{"symbol":"ETH_USDT","identifier":"a"}`))
)

const (
	inFlight  = 30 * time.Second
	retention = 24 * time.Hour
)

// testStoreTimeout is the Redis deadline of tests that do not test a
// deadline: only a hang reaches it, where a round trip over a second or two
// under a loaded suite would be decided by the store-error path. A test of
// a deadline sets its own.
const testStoreTimeout = time.Minute

// testOptions are the store options of the shared table: a Redis deadline
// only a hang reaches, the clock c.
func testOptions(c *fakeclock.Clock) Options {
	return Options{InFlightTimeout: inFlight, Retention: retention, MaxResponseBytes: 1024, Timeout: testStoreTimeout, Now: c.Now}
}

// k is identifier id of the account most tests use.
func k(id string) Key { return Key{Account: "acct", Identifier: id} }

func mustClaim(t *testing.T, s Store, key Key, fp Fingerprint, want Outcome) Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), key, fp)
	if err != nil {
		t.Fatalf("Claim(%s): %v", key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim(%s) = %s, want %s", key, c.Outcome, want)
	}
	if c.Key != key || c.Fingerprint != fp || (c.Record != nil) != (want == Replay) {
		t.Fatalf("Claim(%s) = %+v", key, c)
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// storeCases is the one table every Store passes.
var storeCases = []struct {
	name string
	run  func(t *testing.T, h harness, c *fakeclock.Clock)
}{
	{"first claims, same body waits, other body conflicts", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		mustClaim(t, s, k("k"), fpA, Claimed)
		mustClaim(t, s, k("k"), fpA, InProgress)
		mustClaim(t, s, k("k"), fpB, Conflict)
		c.Advance(inFlight - time.Millisecond)
		mustClaim(t, s, k("k"), fpA, InProgress)
	}},
	{"completed request replays its response", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaim(t, s, k("k"), fpA, Claimed)
		body := []byte("{\"id\":1}\x00\xff binary-safe")
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, ContentType: "application/json; charset=utf-8", Body: body}))
		for range 2 {
			r := mustClaim(t, s, k("k"), fpA, Replay).Record
			if r.Status != 201 || r.ContentType != "application/json; charset=utf-8" || !bytes.Equal(r.Body, body) {
				t.Fatalf("replayed %+v", r)
			}
			r.Body[0] = 'X' // the caller's copy
		}
		mustClaim(t, s, k("k"), fpB, Conflict)
		c.Advance(inFlight * 2)
		mustClaim(t, s, k("k"), fpA, Replay)
	}},
	{"error responses replay too", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		for i, rec := range []Record{{Status: 500}, {Status: 400, ContentType: "application/json", Body: []byte(`{"price":["bad"]}`)}, {Status: 503, Body: []byte{}}} {
			key := k(string(rune('a' + i)))
			cl := mustClaim(t, s, key, fpA, Claimed)
			must(t, s.Complete(context.Background(), cl, rec))
			got := mustClaim(t, s, key, fpA, Replay).Record
			if got.Status != rec.Status || got.ContentType != rec.ContentType || !bytes.Equal(got.Body, rec.Body) {
				t.Errorf("replayed %+v, want %+v", got, rec)
			}
		}
	}},
	{"release frees the identifier", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		first := mustClaim(t, s, k("k"), fpA, Claimed)
		must(t, s.Release(context.Background(), first))
		second := mustClaim(t, s, k("k"), fpB, Claimed) // even with another body
		if err := s.Complete(context.Background(), first, Record{Status: 201}); !errors.Is(err, ErrClaimLost) {
			t.Errorf("Complete of a released claim: %v", err)
		}
		mustClaim(t, s, k("k"), fpB, InProgress)
		must(t, s.Complete(context.Background(), second, Record{Status: 201}))
		mustClaim(t, s, k("k"), fpB, Replay)
	}},
	{"unknown outcome blocks repeats", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaim(t, s, k("k"), fpA, Claimed)
		must(t, s.MarkUnknown(context.Background(), cl))
		mustClaim(t, s, k("k"), fpA, Unknown)
		mustClaim(t, s, k("k"), fpB, Conflict)
		c.Advance(retention - time.Minute)
		mustClaim(t, s, k("k"), fpA, Unknown)
	}},
	{"expired in-flight claim is unknown, not free", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaim(t, s, k("k"), fpA, Claimed)
		c.Advance(inFlight)
		mustClaim(t, s, k("k"), fpA, Unknown)
		mustClaim(t, s, k("k"), fpB, Conflict)
		mustClaim(t, s, k("k"), fpA, Unknown)
		// The holder still gets to record the real response.
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("late")}))
		if r := mustClaim(t, s, k("k"), fpA, Replay).Record; string(r.Body) != "late" {
			t.Errorf("replayed %q", r.Body)
		}
	}},
	{"expired in-flight claim unseen by anyone is unknown", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		mustClaim(t, s, k("k"), fpA, Claimed)
		c.Advance(time.Hour)
		mustClaim(t, s, k("k"), fpA, Unknown)
	}},
	{"holder may release after expiry", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaim(t, s, k("k"), fpA, Claimed)
		c.Advance(inFlight + time.Second)
		mustClaim(t, s, k("k"), fpA, Unknown)
		must(t, s.Release(context.Background(), cl))
		mustClaim(t, s, k("k"), fpA, Claimed)
	}},
	{"a claim finishes once", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaim(t, s, k("k"), fpA, Claimed)
		must(t, s.Complete(context.Background(), cl, Record{Status: 201}))
		for name, err := range map[string]error{
			"Complete":    s.Complete(context.Background(), cl, Record{Status: 500}),
			"Release":     s.Release(context.Background(), cl),
			"MarkUnknown": s.MarkUnknown(context.Background(), cl),
		} {
			if !errors.Is(err, ErrClaimLost) {
				t.Errorf("%s after Complete: %v, want ErrClaimLost", name, err)
			}
		}
		if r := mustClaim(t, s, k("k"), fpA, Replay).Record; r.Status != 201 {
			t.Errorf("the first response was overwritten: %+v", r)
		}
	}},
	{"only a Claimed claim can finish", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		mustClaim(t, s, k("k"), fpA, Claimed)
		waiting := mustClaim(t, s, k("k"), fpA, InProgress)
		for _, cl := range []Claim{waiting, {}, {Outcome: Claimed, Key: k("k"), Fingerprint: fpA}} {
			if err := s.Complete(context.Background(), cl, Record{Status: 201}); !errors.Is(err, ErrNotClaimed) {
				t.Errorf("Complete(%+v) = %v", cl, err)
			}
			if err := s.Release(context.Background(), cl); !errors.Is(err, ErrNotClaimed) {
				t.Errorf("Release(%+v) = %v", cl, err)
			}
		}
		mustClaim(t, s, k("k"), fpA, InProgress)
	}},
	{"another replica's claim cannot be finished", func(t *testing.T, h harness, c *fakeclock.Clock) {
		rs := h.replicas(t, 2, testOptions(c))
		mine := mustClaim(t, rs[0], k("k"), fpA, Claimed)
		must(t, rs[0].Release(context.Background(), mine))
		theirs := mustClaim(t, rs[1], k("k"), fpA, Claimed)
		if err := rs[0].MarkUnknown(context.Background(), mine); !errors.Is(err, ErrClaimLost) {
			t.Errorf("MarkUnknown with a stale claim: %v", err)
		}
		mustClaim(t, rs[0], k("k"), fpA, InProgress)
		must(t, rs[1].Complete(context.Background(), theirs, Record{Status: 201}))
		mustClaim(t, rs[0], k("k"), fpA, Replay)
	}},
	{"responses over the cap are not kept", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		big := mustClaim(t, s, k("big"), fpA, Claimed)
		must(t, s.Complete(context.Background(), big, Record{Status: 201, Body: bytes.Repeat([]byte("x"), 1025)}))
		mustClaim(t, s, k("big"), fpA, Unknown)
		exact := mustClaim(t, s, k("exact"), fpA, Claimed)
		must(t, s.Complete(context.Background(), exact, Record{Status: 201, Body: bytes.Repeat([]byte("x"), 1024)}))
		if r := mustClaim(t, s, k("exact"), fpA, Replay).Record; len(r.Body) != 1024 {
			t.Errorf("replayed %d bytes", len(r.Body))
		}
	}},
	{"keys are per token and identifier", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		mustClaim(t, s, Key{"tok1", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"tok2", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"tok1", "b"}, fpA, Claimed)
		mustClaim(t, s, Key{"tok1:a", ""}, fpA, Claimed)
		mustClaim(t, s, Key{"tok1}", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"tok1", "}a"}, fpA, Claimed)
		mustClaim(t, s, Key{"tok1", "a"}, fpA, InProgress)
	}},
	{"100 concurrent identical requests across replicas claim once", func(t *testing.T, h harness, c *fakeclock.Clock) {
		rs := h.replicas(t, 4, testOptions(c))
		var wg sync.WaitGroup
		var mu sync.Mutex
		counts := map[Outcome]int{}
		var claims []Claim
		start := make(chan struct{})
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				cl, err := rs[i%len(rs)].Claim(context.Background(), Key{"tok", "same"}, fpA)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				counts[cl.Outcome]++
				if cl.Outcome == Claimed {
					claims = append(claims, cl)
				}
			}()
		}
		close(start)
		wg.Wait()
		if counts[Claimed] != 1 || counts[InProgress] != 99 {
			t.Fatalf("outcomes %v, want 1 claimed and 99 in progress", counts)
		}
		must(t, rs[0].Complete(context.Background(), claims[0], Record{Status: 201}))
		for _, r := range rs {
			mustClaim(t, r, Key{"tok", "same"}, fpA, Replay)
		}
	}},
	{"an account past its share is refused, others are not", func(t *testing.T, h harness, c *fakeclock.Clock) {
		o := testOptions(c)
		o.MaxPerAccount = 3
		rs := h.replicas(t, 2, o)
		var held []Claim
		for i := range 3 {
			held = append(held, mustClaim(t, rs[i%2], Key{"greedy", strconv.Itoa(i)}, fpA, Claimed))
		}
		must(t, rs[0].Complete(context.Background(), held[0], Record{Status: 201}))
		must(t, rs[1].MarkUnknown(context.Background(), held[1]))
		for _, s := range rs {
			if c, err := s.Claim(context.Background(), Key{"greedy", "new"}, fpA); !errors.Is(err, ErrAccountFull) {
				t.Fatalf("claim past the share = %+v, %v; want ErrAccountFull", c, err)
			}
		}
		// What the account holds still answers, and others claim.
		mustClaim(t, rs[0], Key{"greedy", "0"}, fpA, Replay)
		mustClaim(t, rs[1], Key{"greedy", "1"}, fpA, Unknown)
		mustClaim(t, rs[1], Key{"greedy", "2"}, fpA, InProgress)
		for i := range 3 {
			mustClaim(t, rs[i%2], Key{"other", strconv.Itoa(i)}, fpA, Claimed)
		}
		// A release gives the place back, once.
		must(t, rs[1].Release(context.Background(), held[2]))
		if err := rs[1].Release(context.Background(), held[2]); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("second release: %v", err)
		}
		mustClaim(t, rs[0], Key{"greedy", "new"}, fpA, Claimed)
		if _, err := rs[0].Claim(context.Background(), Key{"greedy", "newer"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("claim past the share after one release: %v", err)
		}
	}},
	{"the tokens of one address share its share, each keeping its own identifiers", func(t *testing.T, h harness, c *fakeclock.Clock) {
		if h.accountShares {
			t.Skip("a Cluster charges a claim to its account's share (Redis.keys)")
		}
		o := testOptions(c)
		o.MaxPerAccount = 3
		rs := h.replicas(t, 2, o)
		ctx := context.Background()
		const attacker, victim = "addr 198.51.100.7", "addr 203.0.113.9"
		claim := func(s Store, account, client, id string, fp Fingerprint) (Claim, error) {
			return s.ClaimAll(ctx, account, client, []string{id}, fp)
		}
		// Three invented tokens, each with "a1": three orders, one share.
		var held []Claim
		for i := range 3 {
			cl, err := claim(rs[i%2], "tok"+strconv.Itoa(i), attacker, "a1", fpA)
			if err != nil || cl.Outcome != Claimed {
				t.Fatalf("token %d's a1: %+v, %v; want claimed", i, cl, err)
			}
			held = append(held, cl)
			must(t, rs[i%2].MarkUnknown(ctx, cl)) // the backend failed: kept for the retention
		}
		for _, tok := range []string{"tok3", "tok0"} {
			if cl, err := claim(rs[1], tok, attacker, "fresh", fpA); !errors.Is(err, ErrAccountFull) {
				t.Fatalf("%s past the address's share = %+v, %v; want ErrAccountFull", tok, cl, err)
			}
		}
		// What each token holds still answers, as its own.
		for i := range 3 {
			if cl, err := claim(rs[0], "tok"+strconv.Itoa(i), attacker, "a1", fpA); err != nil || cl.Outcome != Unknown {
				t.Fatalf("token %d's a1 again: %+v, %v; want unknown", i, cl, err)
			}
		}
		if cl, err := claim(rs[0], "tok0", attacker, "a1", fpB); err != nil || cl.Outcome != Conflict {
			t.Fatalf("token 0's a1, another body: %+v, %v; want conflict", cl, err)
		}
		// Another address's tokens and a verified account claim in full.
		for i := range 3 {
			if cl, err := claim(rs[i%2], "vtok"+strconv.Itoa(i), victim, "a1", fpA); err != nil || cl.Outcome != Claimed {
				t.Fatalf("another address's token %d: %+v, %v; want claimed", i, cl, err)
			}
			mustClaim(t, rs[i%2], Key{"account", strconv.Itoa(i)}, fpA, Claimed)
		}
		if _, err := claim(rs[0], "tok9", victim, "b", fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("the other address past its own share: %v, want ErrAccountFull", err)
		}
		// A bulk is charged to the address too, and a release gives back.
		if _, err := rs[0].ClaimAll(ctx, "tok4", attacker, []string{"x", "y"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("a bulk past the address's share: %v, want ErrAccountFull", err)
		}
		cl, err := claim(rs[1], "tok5", "addr 192.0.2.1", "x", fpA)
		if err != nil || cl.Outcome != Claimed {
			t.Fatalf("a third address: %+v, %v", cl, err)
		}
		must(t, rs[1].Release(ctx, cl))
		if _, err := rs[0].ClaimAll(ctx, "tok5", "addr 192.0.2.1", []string{"x", "y", "z"}, fpA); err != nil {
			t.Fatalf("after a release the address's share is whole again: %v", err)
		}
	}},
	{"an account's identifier is one order from every address", func(t *testing.T, h harness, c *fakeclock.Clock) {
		// A client retrying from another address (IPv6 then IPv4, a NAT's
		// pool, a new network) is charged to another share, and still
		// meets its order: an identifier is an account's, wherever a claim
		// of it comes from.
		rs := h.replicas(t, 2, testOptions(c))
		ctx := context.Background()
		for _, tc := range []struct {
			name string
			ids  []string
		}{
			{"an order", []string{"o1"}},
			{"a bulk", []string{"b1", "b2"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				first, err := rs[0].ClaimAll(ctx, "tok", "addr 2001:db8::", tc.ids, fpA)
				if err != nil || first.Outcome != Claimed {
					t.Fatalf("the first claim: %+v, %v; want claimed", first, err)
				}
				for i, client := range []string{"addr 198.51.100.7", ""} {
					if cl, err := rs[1].ClaimAll(ctx, "tok", client, tc.ids, fpA); err != nil || cl.Outcome != InProgress {
						t.Fatalf("a retry from %q while in flight: %s, %v; want in_progress", client, cl.Outcome, err)
					}
					if cl, err := rs[i].ClaimAll(ctx, "tok", client, tc.ids[len(tc.ids)-1:], fpB); err != nil || cl.Outcome != Conflict {
						t.Fatalf("another request with its identifier from %q: %s, %v; want conflict", client, cl.Outcome, err)
					}
				}
				must(t, rs[0].Complete(ctx, first, Record{Status: 201, Body: []byte("{}")}))
				if cl, err := rs[1].ClaimAll(ctx, "tok", "addr 198.51.100.7", tc.ids, fpA); err != nil || cl.Outcome != Replay {
					t.Fatalf("a retry from another address once placed: %s, %v; want replay", cl.Outcome, err)
				}
			})
		}
	}},
	{"the bytes of one address's tokens share its share", func(t *testing.T, h harness, c *fakeclock.Clock) {
		if h.accountShares {
			t.Skip("a Cluster charges a claim to its account's share (Redis.keys)")
		}
		o := testOptions(c)
		o.MaxBytesPerAccount, o.MaxResponseBytes = 3000, 4096
		s := h.store(t, o)
		ctx := context.Background()
		const addr = "addr 198.51.100.7"
		cl, err := s.ClaimAll(ctx, "tok0", addr, []string{"a"}, fpA)
		must(t, err)
		_, err = s.ClaimAll(ctx, "tok1", addr, []string{"a"}, fpA) // a few hundred bytes each: room for more
		must(t, err)
		must(t, s.Complete(ctx, cl, Record{Status: 201, Body: bytes.Repeat([]byte("x"), 2600)}))
		if _, err := s.ClaimAll(ctx, "tok2", addr, []string{"a"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("a third token past the address's bytes: %v, want ErrAccountFull", err)
		}
		if _, err := s.ClaimAll(ctx, "vtok", "addr 203.0.113.9", []string{"a"}, fpA); err != nil {
			t.Fatalf("another address: %v", err)
		}
		mustClaim(t, s, Key{"account", "a"}, fpA, Claimed)
	}},
	{"clients filling the store in an outage leave room for one that holds nothing", func(t *testing.T, h harness, c *fakeclock.Clock) {
		if h.accountShares {
			t.Skip("a Cluster's claim sees its slot only, not the store's room (Redis.keys)")
		}
		// Seven static shares fill the store (check-config's "holds 7
		// such shares", scaled down): 14 identifiers each of 100, in
		// identifiers and in bytes, every name of one length so that each
		// claim costs the same.
		o := testOptions(c)
		o.MaxPerAccount = 14
		rs := h.replicas(t, 2, o)
		one := claimBytes(rs[0], "tok00", "addr 198.51.100.10", "i00")
		o.MaxBytesPerAccount = 14 * one
		for _, s := range rs {
			setRoom(s, o, 100, 100*one)
		}
		ctx := context.Background()
		// Ten addresses invent a token each and place orders whose
		// outcome the backend leaves unknown (kept for the retention)
		// until refused: before shares were bounded by the room left,
		// the eighth filled the store.
		held := map[string]int{}
		for a := range 10 {
			addr := "addr 198.51.100." + strconv.Itoa(10+a)
			tok := "tok" + strconv.Itoa(10+a)
			for i := 10; ; i++ {
				s := rs[i%2]
				cl, err := s.ClaimAll(ctx, tok, addr, []string{"i" + strconv.Itoa(i)}, fpA)
				if errors.Is(err, ErrAccountFull) {
					break
				}
				if err != nil || cl.Outcome != Claimed {
					t.Fatalf("address %d's order %d: %+v, %v; want claimed or ErrAccountFull (its share), never the store full", a, i, cl, err)
				}
				must(t, s.MarkUnknown(ctx, cl))
				held[addr]++
			}
			if held[addr] == 0 || held[addr] > 14 {
				t.Fatalf("address %d took %d identifiers, want 1 to 14", a, held[addr])
			}
		}
		total := 0
		for _, n := range held {
			total += n
		}
		if total >= 100 {
			t.Fatalf("ten addresses hold %d identifiers of a store of 100 (%v)", total, held)
		}
		// A newcomer's identified order finds room; the attackers' own
		// still answer.
		if cl, err := rs[0].ClaimAll(ctx, "tok99", "addr 203.0.113.99", []string{"i99"}, fpA); err != nil || cl.Outcome != Claimed {
			t.Fatalf("a newcomer after ten addresses filled the store (%v): %+v, %v; want claimed", held, cl, err)
		}
		if cl, err := rs[1].ClaimAll(ctx, "tok10", "addr 198.51.100.10", []string{"i10"}, fpA); err != nil || cl.Outcome != Unknown {
			t.Fatalf("an attacker's order again: %+v, %v; want unknown", cl, err)
		}
	}},
	{"released claims never use up the share", func(t *testing.T, h harness, c *fakeclock.Clock) {
		o := testOptions(c)
		o.MaxPerAccount = 2
		s := h.store(t, o)
		for i := range 50 {
			cl := mustClaim(t, s, Key{"refused", strconv.Itoa(i)}, fpA, Claimed)
			must(t, s.Release(context.Background(), cl))
		}
		mustClaim(t, s, Key{"refused", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"refused", "b"}, fpA, Claimed)
	}},
	{"a bulk claims its identifiers together and replays its one response", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		ids := []string{"b1", "b2", "b3"}
		cl := mustClaimAll(t, s, "acct", ids, fpA, Claimed)
		if got := mustClaimAll(t, s, "acct", ids, fpA, InProgress); got.At != 0 {
			t.Errorf("in progress at %d", got.At)
		}
		for _, id := range ids {
			mustClaim(t, s, k(id), fpB, Conflict) // a single order reusing one
		}
		body := []byte(`{"orders":[1,2,3]}`)
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, ContentType: "application/json", Body: body}))
		for range 2 {
			if r := mustClaimAll(t, s, "acct", ids, fpA, Replay).Record; r.Status != 201 || !bytes.Equal(r.Body, body) {
				t.Fatalf("replayed %+v", r)
			}
		}
		mustClaimAll(t, s, "acct", ids[1:], fpA, Conflict) // not the same request
		mustClaimAll(t, s, "acct", []string{"b1", "b2"}, fpB, Conflict)
	}},
	{"a bulk meeting a used identifier is refused whole, naming it", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		mustClaim(t, s, k("x"), fpB, Claimed)
		mustClaimAll(t, s, "acct", []string{"p", "q"}, fpB, Claimed)
		for _, tc := range []struct {
			ids []string
			at  int
		}{
			{[]string{"w", "x", "y"}, 1}, // a single order's
			{[]string{"x", "w"}, 0},
			{[]string{"w", "y", "q"}, 2}, // another bulk's other identifier
			{[]string{"q", "w"}, 0},
			{[]string{"p", "w"}, 0}, // another bulk's first
		} {
			if got := mustClaimAll(t, s, "acct", tc.ids, fpA, Conflict); got.At != tc.at {
				t.Errorf("ClaimAll(%q) conflicts at %d, want %d", tc.ids, got.At, tc.at)
			}
		}
		// Nothing of the refused bulks was taken.
		mustClaim(t, s, k("w"), fpA, Claimed)
		mustClaim(t, s, k("y"), fpA, Claimed)
	}},
	{"a bulk settles as one: released, unknown", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		cl := mustClaimAll(t, s, "acct", []string{"r1", "r2"}, fpA, Claimed)
		must(t, s.Release(context.Background(), cl))
		mustClaim(t, s, k("r2"), fpB, Claimed)
		mustClaim(t, s, k("r1"), fpB, Claimed)
		cl = mustClaimAll(t, s, "acct", []string{"u1", "u2"}, fpA, Claimed)
		must(t, s.MarkUnknown(context.Background(), cl))
		mustClaimAll(t, s, "acct", []string{"u1", "u2"}, fpA, Unknown)
		mustClaim(t, s, k("u2"), fpA, Conflict)
		c.Advance(retention - time.Minute)
		mustClaimAll(t, s, "acct", []string{"u1", "u2"}, fpA, Unknown)
		cl = mustClaimAll(t, s, "acct", []string{"t1", "t2"}, fpA, Claimed)
		c.Advance(inFlight)
		mustClaimAll(t, s, "acct", []string{"t1", "t2"}, fpA, Unknown) // its holder is gone
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("late")}))
		mustClaimAll(t, s, "acct", []string{"t1", "t2"}, fpA, Replay)
	}},
	{"a bulk counts each identifier in the account's share", func(t *testing.T, h harness, c *fakeclock.Clock) {
		o := testOptions(c)
		o.MaxPerAccount = 3
		s := h.store(t, o)
		if _, err := s.ClaimAll(context.Background(), "big", "", []string{"1", "2", "3", "4"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("a bulk larger than the share: %v, want ErrAccountFull", err)
		}
		cl := mustClaimAll(t, s, "big", []string{"1", "2", "3"}, fpA, Claimed)
		if _, err := s.Claim(context.Background(), Key{"big", "4"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("past the share: %v, want ErrAccountFull", err)
		}
		mustClaimAll(t, s, "big", []string{"1", "2", "3"}, fpA, InProgress) // what it holds still answers
		must(t, s.Release(context.Background(), cl))
		mustClaim(t, s, Key{"big", "4"}, fpA, Claimed)
	}},
	{"headers and the order's Accept replay with the response", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		for i, tc := range []struct {
			rec  Record
			want Record // what replays, when not rec itself
		}{
			{rec: Record{Status: 201, ContentType: "application/json", Header: []string{"Location", "/api/v1/odr/orders/7/"}, Body: []byte(`{"id":7}`)}},
			{rec: Record{Status: 201, ContentType: "application/json", Header: []string{"Location", "/o/7", "Etag", `W/"1"`,
				"Link", "</o/7>; rel=self", "Link", "</o/>; rel=collection", "Preference-Applied", "return=minimal"}, Body: []byte{}}},
			{rec: Record{Status: 201, ContentType: "text/html; charset=utf-8", Accept: "text/html", Body: []byte("<p>placed</p>\n")}},
			{rec: Record{Status: 200, ContentType: "application/json", Accept: "application/json; version=2.0", Header: []string{"Content-Language", "fa"}, Body: []byte("{}")}},
			{rec: Record{Status: 201, Header: []string{"Location", ""}, Body: []byte("\n\nbody\n")}},
			{rec: Record{Status: 201, ContentType: "application/json", Header: []string{"Location", "/o/1\r\nSet-Cookie: a=b", "Etag", `"2"`, "Bad:Name", "x"},
				Accept: "a\nb", Body: []byte("{}")},
				want: Record{Status: 201, ContentType: "application/json", Header: []string{"Etag", `"2"`}, Body: []byte("{}")}},
		} {
			key := k("h" + strconv.Itoa(i))
			cl := mustClaim(t, s, key, fpA, Claimed)
			must(t, s.Complete(context.Background(), cl, tc.rec))
			want := tc.want
			if want.Status == 0 {
				want = tc.rec
			}
			got := mustClaim(t, s, key, fpA, Replay).Record
			if got.Status != want.Status || got.ContentType != want.ContentType || got.Accept != want.Accept ||
				!slices.Equal(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) {
				t.Errorf("case %d: replayed %+v, want %+v", i, got, want)
			}
		}
	}},
	{"headers over the cap are not kept", func(t *testing.T, h harness, c *fakeclock.Clock) {
		s := h.store(t, testOptions(c))
		link := func(n int) []string { return []string{"Link", strings.Repeat("l", n-len("Link")-2)} }
		big := mustClaim(t, s, k("big"), fpA, Claimed)
		must(t, s.Complete(context.Background(), big, Record{Status: 201, Header: link(MaxRecordHeaderBytes + 1), Body: []byte("{}")}))
		mustClaim(t, s, k("big"), fpA, Unknown)
		accept := mustClaim(t, s, k("accept"), fpA, Claimed)
		must(t, s.Complete(context.Background(), accept, Record{Status: 201, Header: link(MaxRecordHeaderBytes - 8), Accept: "text/html", Body: []byte("{}")}))
		mustClaim(t, s, k("accept"), fpA, Unknown)
		exact := mustClaim(t, s, k("exact"), fpA, Claimed)
		must(t, s.Complete(context.Background(), exact, Record{Status: 201, Header: link(MaxRecordHeaderBytes), Body: []byte("{}")}))
		if r := mustClaim(t, s, k("exact"), fpA, Replay).Record; r.HeaderBytes() != MaxRecordHeaderBytes {
			t.Errorf("replayed %d bytes of headers", r.HeaderBytes())
		}
	}},
	{"kept headers count in the account's bytes", func(t *testing.T, h harness, c *fakeclock.Clock) {
		o := testOptions(c)
		o.MaxBytesPerAccount = 3000
		s := h.store(t, o)
		cl := mustClaim(t, s, Key{"heavy", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"heavy", "b"}, fpA, Claimed) // a few hundred bytes each: room for more
		link := []string{"Link", strings.Repeat("l", 2600)}
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, Header: link, Body: []byte("{}")}))
		if r := mustClaim(t, s, Key{"heavy", "a"}, fpA, Replay).Record; !slices.Equal(r.Header, link) {
			t.Fatal("the headers that took the account past its bytes were not kept")
		}
		if _, err := s.Claim(context.Background(), Key{"heavy", "c"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("past the account's bytes: %v, want ErrAccountFull", err)
		}
		mustClaim(t, s, Key{"light", "c"}, fpA, Claimed)
	}},
	{"an account past its bytes is refused, others are not", func(t *testing.T, h harness, c *fakeclock.Clock) {
		o := testOptions(c)
		o.MaxBytesPerAccount, o.MaxResponseBytes = 3000, 4096
		s := h.store(t, o)
		cl := mustClaim(t, s, Key{"heavy", "a"}, fpA, Claimed)
		mustClaim(t, s, Key{"heavy", "b"}, fpA, Claimed) // a few hundred bytes each: room for more
		big := bytes.Repeat([]byte("x"), 2600)
		must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: big}))
		if r := mustClaim(t, s, Key{"heavy", "a"}, fpA, Replay).Record; !bytes.Equal(r.Body, big) {
			t.Fatal("the response that took the account past its bytes was not kept")
		}
		if _, err := s.Claim(context.Background(), Key{"heavy", "c"}, fpA); !errors.Is(err, ErrAccountFull) {
			t.Fatalf("past the account's bytes: %v, want ErrAccountFull", err)
		}
		mustClaim(t, s, Key{"light", "c"}, fpA, Claimed)
	}},
}

// claimBytes is what s charges a claim of account's identifier id
// charged to client's share.
func claimBytes(s Store, account, client, id string) int64 {
	switch s := s.(type) {
	case *Memory:
		return MemoryBytes(1, len(account)+len(client)+len(id), 0)
	case *Redis:
		return charge(s.keys(account, client, []string{id}))
	case *joinedStore:
		return charge(s.keys(account, client, []string{id}))
	}
	panic("claimBytes: a store of no harness")
}

// setRoom makes s's room ids identifiers and bytes bytes: the memory
// store's bounds (Options.MaxEntries, MaxBytes, o's other fields kept),
// Redis's room in bytes (Redis.room, which Health measures).
func setRoom(s Store, o Options, ids int, bytes int64) {
	switch s := s.(type) {
	case *Memory:
		s.mu.Lock()
		defer s.mu.Unlock()
		o.MaxEntries, o.MaxBytes = ids, bytes
		s.o = o.withDefaults()
	case *Redis:
		s.room.Store(bytes)
	case *joinedStore:
		s.room.Store(bytes)
	}
}

func runStoreCases(t *testing.T, h harness) {
	for _, tc := range storeCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h, newClock()) })
	}
}
