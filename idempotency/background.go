package idempotency

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/share"
)

// What the Redis store does in the background, each by its claim's holder
// token, so that it writes only the claim its request made and nothing of
// another request's: the free of a claim whose reply was lost (freeLost),
// and a settlement whose run failed, retried (settleLater). Wait waits
// for both before the store's client is closed.

// RequestContext is a context that names the request a store call is made
// for (ID, its request id): the Redis store names it in the report of
// what it does in the background for the call (Options.Report), so that
// an operator can tell which order's claim stayed held. A caller keeps one
// per request and sets Context before each call: no allocation.
type RequestContext struct {
	context.Context
	ID string
	// Ran, when set, is called, in the background, once the free of a
	// claim whose reply was lost (freeLost) proves that its script run
	// ran: it found the claim its holder took. Outside a Cluster that run
	// decided the request's rate limits, and let it pass, before the
	// claim, so it charged them: Ran gives the charge back
	// (limiter.Enforcer.RefundLost) for a request that was refused.
	Ran func()
}

// requestIDKey and ranKey are the keys RequestContext answers its ID and
// its Ran for.
type (
	requestIDKey struct{}
	ranKey       struct{}
)

// Value returns the request id for requestIDKey, Ran for ranKey, else
// Context's value.
func (c *RequestContext) Value(k any) any {
	switch k {
	case requestIDKey{}:
		return c.ID
	case ranKey{}:
		return c.Ran
	}
	return c.Context.Value(k)
}

// ranOf returns the Ran of the request ctx names (RequestContext), or nil.
func ranOf(ctx context.Context) func() {
	ran, _ := ctx.Value(ranKey{}).(func())
	return ran
}

// requestIDOf returns the id of the request ctx names (RequestContext),
// or "".
func requestIDOf(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// Work is a kind of work the Redis store does in the background.
type Work uint8

// Works of the Redis store in the background.
const (
	// WorkFree: the free of a claim whose reply was lost (freeLost).
	WorkFree Work = iota
	// WorkComplete: a completion retried (settleLater).
	WorkComplete
	// WorkRelease: a release retried (settleLater).
	WorkRelease
)

// String names the work.
func (w Work) String() string {
	switch w {
	case WorkFree:
		return "free"
	case WorkComplete:
		return "complete"
	}
	return "release"
}

// Background is the report of one work the Redis store did in the
// background (Options.Report), once it has ended.
type Background struct {
	Work Work
	// RequestID is the id of the request the work was for (RequestContext),
	// or "".
	RequestID string
	// Err is nil when the work was done. ErrClaimLost: the claim was not
	// held by its holder any more — for a retried settlement, recorded
	// or released already (by a run whose reply was lost) or expired;
	// for a free, the claim never ran, or has yet to reach Redis (the
	// free fenced it: should it land, it takes nothing). ErrRetryBudget: the settlement was not retried, for
	// want of room in its owner's share (settleRetryBytes). Else the last attempt's failure:
	// the claim stays held, in flight and then unknown.
	Err error
}

// ErrRetryBudget is the Background.Err of a settlement not retried
// because its claim's owner holds its share of what the settlements
// retried may hold (settleRetryBytes).
var ErrRetryBudget = errors.New("idempotency: settlements being retried hold their bound; not retried")

// report reports the end of work w for request id (Options.Report).
func (s *Redis) report(w Work, id string, err error) {
	if s.o.Report != nil {
		s.o.Report(Background{Work: w, RequestID: id, Err: err})
	}
}

// freeLost frees the claim p, whose call failed with err, when Redis may
// have run it all the same (mayHaveRun): its order is refused and never
// sent, and a claim left in Redis would answer the client's retry — the
// one the refusal asks for, with the same identifier — 409 in progress
// and then outcome unknown for the whole retention, for an order never
// placed. The free is the holder's (p's own token): it frees the claim p
// made and nothing else, never another request's. It runs in the
// background, within Options.Timeout, so that the refusal keeps its one
// deadline. Should it reach Redis before the claim (the two go on
// different connections), it fences the claim, which takes nothing when
// it lands (free); should it fail, the claim stays, as before: in
// progress, then unknown, never placed twice.
//
// joined says that the claim rode in the run that decided its request's
// limits: a free that finds it proves that run ran, and the request's
// RequestContext.Ran is called (not in a Cluster, where the limits ran
// beside the claim, on other masters).
func (s *Redis) freeLost(ctx context.Context, p *Prepared, err error, joined bool) {
	if !mayHaveRun(err) {
		return
	}
	id, ran := requestIDOf(ctx), ranOf(ctx)
	if !joined || s.cluster {
		ran = nil
	}
	// What free reads of p, copied: the proxy's Prepared is reused by
	// the next request.
	q := &Prepared{ClaimPart: ratelimit.ClaimPart{Keys: p.Keys}, id: p.id, slot: p.slot, charge: p.charge}
	s.inBackground(func() {
		n, err := s.free(context.Background(), q)
		if err == nil && n == 0 {
			err = ErrClaimLost
		}
		if err == nil && ran != nil {
			ran()
		}
		s.report(WorkFree, id, err)
	})
}

// settleRetryBytes bounds what the settlements retried in the background
// hold at once (settleLater): their responses, their claims' keys, and
// settleRetryCost each.
// It is a pool shared between clients (share.Pool, Redis.settling): each
// settlement is charged to its claim's owner — the account, or the client
// address of opaque tokens (Store.ClaimAll's client) — before it is
// taken, so that one client's orders during a Redis outage hold at most
// its share and the others' settlements are still retried. A settlement
// past its owner's share is not retried, as before retries were.
const (
	settleRetryBytes = 32 << 20
	settleRetryCost  = 512
)

// settleRetryMaxWait is the longest wait between two attempts of a
// settlement retried in the background; the first waits
// Options.Timeout, and each wait doubles.
const settleRetryMaxWait = 2 * time.Second

// settleLater retries in the background the settlement of claim c whose
// run failed with err: its completion (state "d", with rec, the backend's
// answer) or its release ("free": the order was not placed). Without it
// a completion lost to a Redis failure left the claim in flight although
// exgate had the answer in hand: every retry of the order got 409 in
// progress, then outcome unknown for the whole retention; a release
// lost, the identifier of an order never placed refused alike. The
// retries are the holder's (the finish script writes only a claim held
// by c's token, in flight or turned unknown by its deadline), each
// within Options.Timeout, waiting Options.Timeout and then twice as long
// each time (at most settleRetryMaxWait) for Options.InFlightTimeout:
// the time in which a retry of the order is told it is in progress and
// to retry later for its answer. They stop at the first run Redis
// answers: done, or the claim no longer held (recorded by a run whose
// reply was lost, released, or expired). A failure that is not the
// store's (ErrNotClaimed, ErrClaimLost), and a marking as unknown, which
// the claim's deadline makes by itself, are not retried.
func (s *Redis) settleLater(ctx context.Context, c Claim, state string, rec *Record, err error) {
	if err == nil || errors.Is(err, ErrNotClaimed) || errors.Is(err, ErrClaimLost) {
		return
	}
	w, id := WorkRelease, requestIDOf(ctx)
	if state == "d" {
		w = WorkComplete
	}
	// What the retries hold: the answer, copied, and the claim's keys (a
	// bulk's, one for each identifier), each as long as it is and its
	// place in the slice; its identifiers are not kept (end reads the
	// keys alone).
	cost := int64(settleRetryCost)
	for _, k := range c.keys {
		cost += int64(len(k)) + 16
	}
	if rec != nil {
		cost += int64(len(rec.Body) + rec.HeaderBytes() + len(rec.ContentType))
	}
	who := share.AccountKey(owner(c.Key.Account, c.client))
	if !s.settling.Take(who, cost) {
		s.report(w, id, ErrRetryBudget)
		return
	}
	if rec != nil {
		r := *rec // the caller's buffers are its own again once it returns
		r.Body, r.Header = slices.Clone(r.Body), slices.Clone(r.Header)
		rec = &r
	}
	c.keys, c.more = slices.Clone(c.keys), nil
	s.inBackground(func() {
		defer s.settling.Give(who, cost)
		s.report(w, id, s.retrySettle(c, state, rec))
	})
}

// inBackground runs f on a goroutine of its own, counted in what Wait
// waits for.
func (s *Redis) inBackground(f func()) {
	s.backgroundMu.RLock()
	s.background.Add(1)
	s.backgroundMu.RUnlock()
	go func() {
		defer s.background.Done()
		f()
	}()
}

// retrySettle makes settleLater's attempts, and returns the last one's
// error.
func (s *Redis) retrySettle(c Claim, state string, rec *Record) error {
	wait, until := s.o.Timeout, time.Now().Add(s.o.InFlightTimeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		last := false
		select {
		case <-t.C:
		case <-s.quit: // Wait: one attempt more, at once
			last = true
		}
		err := s.end(context.Background(), c, state, rec)
		if err == nil || errors.Is(err, ErrClaimLost) || last || !time.Now().Before(until) {
			return err
		}
		wait = min(2*wait, settleRetryMaxWait)
		t.Reset(wait)
	}
}

// Wait waits for what the store does in the background: the frees of
// lost claims under way (freeLost), each within Options.Timeout, and the
// settlements retried (settleLater), which make one attempt more at
// once, then end. Call it before closing the store's client: work the
// closed client cut would leave the claim of an order never sent held, or
// one placed without its answer, its retry refused 409 and then outcome
// unknown, as if it had failed. Work that starts while it waits (a
// request still under way) starts once it returns, and retries nothing.
func (s *Redis) Wait() {
	s.quitOnce.Do(func() { close(s.quit) })
	s.backgroundMu.Lock()
	defer s.backgroundMu.Unlock()
	s.background.Wait()
}
