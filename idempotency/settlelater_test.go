package idempotency

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/redistest"
)

// TestFailedSettlementRetried: a claim's settlement whose run failed —
// Redis unreachable after the backend answered, or its reply lost after
// it ran — is made again in the background by its holder, so that the
// retry of the order gets the answer exgate had in hand (a completion),
// or is placed (a release: the order was not). Before, a completion or a
// release that never reached Redis left the claim in flight: every retry
// got 409 request_in_progress, then outcome_unknown for the whole
// retention. The retries end on their own, or at once when the store is
// shut down (Wait); a run that did reach Redis is not made twice.
func TestFailedSettlementRetried(t *testing.T) {
	srv := redistest.Start(t)
	rec := Record{Status: 201, ContentType: "application/json", Header: []string{"Location", "/orders/7"}, Body: []byte(`{"id":7}`)}
	for _, settle := range []struct {
		name string
		run  func(s *Redis, c Claim) error
		want Outcome // the retry's
	}{
		{"complete", func(s *Redis, c Claim) error { return s.Complete(context.Background(), c, rec) }, Replay},
		{"release", func(s *Redis, c Claim) error { return s.Release(context.Background(), c) }, Claimed},
	} {
		for _, lost := range []struct {
			name string
			hook *redistest.LostReply
		}{
			{"redis unreachable", &redistest.LostReply{Unsent: true,
				Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}},
			{"reply lost after it ran", &redistest.LostReply{}},
		} {
			for _, end := range []struct {
				name string
				wait func(s *Redis)
			}{
				{"in the background", func(s *Redis) { s.background.Wait() }},
				{"at shutdown", func(s *Redis) { s.Wait() }},
			} {
				t.Run(settle.name+"/"+lost.name+"/"+end.name, func(t *testing.T) {
					o := testOptions(newClock())
					o.KeyPrefix = uniquePrefix()
					o.Timeout = time.Second // the first retry's wait; a round trip never takes it
					c := newClient(t, srv.Addr)
					c.AddHook(lost.hook)
					s := NewRedis(c, o)
					// The scripts are loaded: the run that fails is the
					// settlement's, not a NOSCRIPT.
					must(t, s.Complete(context.Background(), mustClaim(t, s, k("warm"), fpA, Claimed), rec))
					held := mustClaim(t, s, k("a"), fpA, Claimed)
					lost.hook.Arm()
					if err := settle.run(s, held); err == nil {
						t.Fatal("the settlement whose run failed reported no failure")
					}
					end.wait(s)
					got := mustClaim(t, s, k("a"), fpA, settle.want) // the order's retry
					if settle.want == Replay && (got.Record.Status != rec.Status || string(got.Record.Body) != string(rec.Body) ||
						len(got.Record.Header) != 2 || got.Record.Header[1] != "/orders/7") {
						t.Errorf("replayed %+v, want %+v", got.Record, rec)
					}
					// warm and a, each counted once: a release run twice would
					// give back what the retry's claim charged.
					if v, err := c.HGetAll(context.Background(), s.keyOf(k("a"))[1]).Result(); err != nil || countOf(strMap(v)) != 2 {
						t.Errorf("account share: %v %v, want 2 identifiers", v, err)
					}
				})
			}
		}
	}
}

// TestSettlementRetriesShared: the room the settlements retried in the
// background may hold (settleRetryBytes) is a pool shared between
// clients, and each client has its share of it, charged to its claim's
// owner: one account, or one address with the opaque tokens it invents,
// whose orders' settlements fail during a Redis outage holds at most its
// share and is refused the rest (ErrRetryBudget) for itself alone, while
// another account's settlement that fails then is still retried. Before,
// the first client to fail took all the room, and every other client's
// placed orders were left unrecorded: their retries got 409 in progress,
// then outcome unknown.
func TestSettlementRetriesShared(t *testing.T) {
	srv := redistest.Start(t)
	const body = 1 << 20 // each settlement holds its response: a bound's 32nd
	rec := Record{Status: 201, ContentType: "application/json", Body: make([]byte, body)}
	victim := Key{Account: "victim", Identifier: "v"}
	for _, tc := range []struct {
		name string
		// account and client of the attacker's i-th order (ClaimAll's).
		claimOf func(i int) (account, client string)
	}{
		{"one account", func(int) (string, string) { return "attacker", "" }},
		{"one address, invented tokens", func(i int) (string, string) {
			return "token" + strconv.Itoa(i), AddressClient(netip.MustParseAddr("192.0.2.7"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			ended := map[string]error{} // by request id
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			o.MaxResponseBytes = body
			o.Timeout = time.Minute // the retries wait for Wait
			o.Report = func(b Background) {
				mu.Lock()
				defer mu.Unlock()
				ended[b.RequestID] = b.Err
			}
			c := newClient(t, srv.Addr)
			fail := &failedFinishes{}
			c.AddHook(fail)
			s := NewRedis(c, o)
			const orders = settleRetryBytes/body + 8 // more than the whole bound
			var held []Claim
			for i := range orders {
				account, client := tc.claimOf(i)
				h, err := s.ClaimAll(context.Background(), account, client, []string{"a" + strconv.Itoa(i)}, fpA)
				if err != nil || h.Outcome != Claimed {
					t.Fatalf("the attacker's claim %d: %v %v", i, h.Outcome, err)
				}
				held = append(held, h)
			}
			v := mustClaim(t, s, victim, fpA, Claimed)
			fail.on.Store(true) // Redis goes away: every settlement fails
			for i, h := range held {
				ctx := &RequestContext{Context: context.Background(), ID: "attacker-" + strconv.Itoa(i)}
				if err := s.Complete(ctx, h, rec); err == nil {
					t.Fatal("a completion whose run failed reported no failure")
				}
			}
			if err := s.Complete(&RequestContext{Context: context.Background(), ID: "victim"}, v, rec); err == nil {
				t.Fatal("the victim's completion whose run failed reported no failure")
			}
			mu.Lock()
			victimErr, victimEnded := ended["victim"]
			refused := 0
			for _, err := range ended {
				if errors.Is(err, ErrRetryBudget) {
					refused++
				}
			}
			mu.Unlock()
			if victimEnded {
				t.Errorf("the victim's settlement was not retried: %v", victimErr)
			}
			if refused == 0 {
				t.Error("the attacker's settlements past its share were retried")
			}
			fail.on.Store(false) // Redis is back: Wait's attempt records
			s.Wait()
			mustClaim(t, s, victim, fpA, Replay)
		})
	}
}

// TestSettlementRetryCharged: a settlement retried in the background is
// charged what it holds (settleRetryBytes): its answer, and its claim's
// keys, one for each identifier of a bulk. Before, a release was charged
// settleRetryCost alone, although a bulk of 1,000 orders holds some 50 KB
// of keys: the bound on what the retries hold was a bound on their count.
func TestSettlementRetryCharged(t *testing.T) {
	srv := redistest.Start(t)
	rec := Record{Status: 201, ContentType: "application/json", Body: make([]byte, 900)}
	for _, tc := range []struct {
		name   string
		orders int
		settle func(s *Redis, c Claim) error
	}{
		{"release of an order", 1, func(s *Redis, c Claim) error { return s.Release(context.Background(), c) }},
		{"release of a bulk of 1,000", 1000, func(s *Redis, c Claim) error { return s.Release(context.Background(), c) }},
		{"completion of a bulk of 1,000", 1000, func(s *Redis, c Claim) error { return s.Complete(context.Background(), c, rec) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			o.Timeout = time.Minute // the retry waits for Wait
			c := newClient(t, srv.Addr)
			fail := &failedFinishes{}
			c.AddHook(fail)
			s := NewRedis(c, o)
			ids := make([]string, tc.orders)
			for i := range ids {
				ids[i] = "order-" + strconv.Itoa(i)
			}
			held := mustClaimAll(t, s, "acct", ids, fpA, Claimed)
			keys := 0
			for _, k := range held.keys {
				keys += len(k)
			}
			fail.on.Store(true)
			if err := tc.settle(s, held); err == nil {
				t.Fatal("the settlement whose run failed reported no failure")
			}
			if got := s.settling.Buffered(); got < int64(keys) {
				t.Errorf("the retried settlement is charged %d bytes, less than its claim's %d bytes of keys", got, keys)
			}
			fail.on.Store(false)
			s.Wait()
			if got := s.settling.Buffered(); got != 0 {
				t.Errorf("%d bytes still charged once the retry ended", got)
			}
		})
	}
}
