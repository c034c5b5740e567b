package idempotency

import (
	"context"
	"net"
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
