package idempotency

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/exgate/exgate/ratelimit"
)

// What the Redis store does in the background, each by its claim's holder
// token, so that it writes only the claim its request made and nothing of
// another request's: the free of a claim whose reply was lost (freeLost),
// and a settlement whose run failed, retried (settleLater). Wait waits
// for both before the store's client is closed.

// freeLost frees the claim p, whose call failed with err, when Redis may
// have run it all the same (mayHaveRun): its order is refused and never
// sent, and a claim left in Redis would answer the client's retry — the
// one the refusal asks for, with the same identifier — 409 in progress
// and then outcome unknown for the whole retention, for an order never
// placed. The free is the holder's (p's own token): it frees the claim p
// made and nothing else, never another request's. It runs in the
// background, within Options.Timeout, so that the refusal keeps its one
// deadline; should it reach Redis before the claim (the two go on
// different connections) or fail, the claim stays, as before: in
// progress, then unknown, never placed twice.
func (s *Redis) freeLost(p *Prepared, err error) {
	if !mayHaveRun(err) {
		return
	}
	// What free reads of p, copied: the proxy's Prepared is reused by
	// the next request.
	q := &Prepared{ClaimPart: ratelimit.ClaimPart{Keys: p.Keys}, id: p.id, slot: p.slot, charge: p.charge}
	s.backgroundMu.RLock()
	s.background.Add(1)
	s.backgroundMu.RUnlock()
	go func() {
		defer s.background.Done()
		_ = s.free(context.Background(), q)
	}()
}

// settleRetryBytes bounds what the settlements retried in the background
// hold at once (settleLater): their responses, and settleRetryCost each.
// A settlement past it is not retried, as before retries were.
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
func (s *Redis) settleLater(c Claim, state string, rec *Record, err error) {
	if err == nil || errors.Is(err, ErrNotClaimed) || errors.Is(err, ErrClaimLost) {
		return
	}
	cost := int64(settleRetryCost)
	if rec != nil {
		r := *rec // the caller's buffers are its own again once it returns
		r.Body, r.Header = slices.Clone(r.Body), slices.Clone(r.Header)
		rec, cost = &r, cost+int64(len(r.Body)+r.HeaderBytes()+len(r.ContentType))
	}
	if s.retrying.Add(cost) > settleRetryBytes {
		s.retrying.Add(-cost)
		return
	}
	c.keys, c.more = slices.Clone(c.keys), slices.Clone(c.more)
	s.backgroundMu.RLock()
	s.background.Add(1)
	s.backgroundMu.RUnlock()
	go s.retrySettle(c, state, rec, cost)
}

// retrySettle makes settleLater's attempts.
func (s *Redis) retrySettle(c Claim, state string, rec *Record, cost int64) {
	defer s.background.Done()
	defer s.retrying.Add(-cost)
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
			return
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
