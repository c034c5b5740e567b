// Package ratelimit is the rate-limit store: it decides whether a request
// may pass a rate limit, knowing keys and limits but not routes, tokens or
// configuration. The policy that turns those into keys and limits (which
// limits apply to whom, tiers, fallbacks, headers) is package limiter.
//
// The store is one small interface, Store, with two implementations that
// share one table of tests: Redis (GCRA on Redis's own clock, shared by
// every gateway replica, with concurrent decisions batched into pipelined
// round trips) and Memory (the same GCRA arithmetic in process, with
// bounded memory). DenyCache wraps a Store so that keys known to be over
// their limit are answered in process until they reset, without a store
// round trip.
//
// GCRA (the generic cell rate algorithm) keeps one number per key, the
// theoretical arrival time (TAT) of the next request. A limit of Rate
// events per Period has an emission interval T = Period/Rate; a request at
// time now is allowed when TAT - Burst·T ≤ now - T, and then moves TAT to
// max(TAT, now) + T. Remaining is how many more requests would pass right
// now (whole), RetryAfter the wait until the next one would pass, and
// ResetAfter the wait until the key is back to a full burst.
package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Limit is a rate: Rate events per Period, of which Burst may arrive at
// once. The zero Limit denies everything.
type Limit struct {
	// Rate is how many events are allowed per Period.
	Rate int64
	// Period is the length of the window Rate is counted over.
	Period time.Duration
	// Burst is how many events may arrive at once. A Burst of 0 denies
	// everything (as in redis_rate); configuration never produces one.
	Burst int64
}

// String returns the limit as "N/period (burst B)".
func (l Limit) String() string {
	return strconv.FormatInt(l.Rate, 10) + "/" + l.Period.String() + " (burst " + strconv.FormatInt(l.Burst, 10) + ")"
}

// valid reports whether the limit can ever allow a request of cost n.
func (l Limit) valid(n int64) bool {
	return l.Rate > 0 && l.Period > 0 && l.Burst > 0 && n > 0 && n <= l.Burst
}

// RefillSeconds returns how many whole seconds a key takes to go from
// empty back to a full burst, Burst·Period/Rate, at least 1: the window a
// client is told its quota applies over.
func (l Limit) RefillSeconds() int64 {
	return max(mulSat(int64(l.Period/time.Second), l.Burst)/l.Rate, 1)
}

// emission returns the emission interval Period/Rate in nanoseconds,
// rounded up so that rounding never allows more than the rate.
func (l Limit) emission() int64 {
	p := int64(l.Period)
	e := p / l.Rate
	if p%l.Rate != 0 {
		e++
	}
	return e
}

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Remaining is how many more requests would be allowed right now,
	// after this one; a whole number, never negative.
	Remaining int64
	// RetryAfter is how long until a request would be allowed; 0 when
	// this one was. For a request that can never pass (Burst 0, or a cost
	// above the burst) it is Never.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to a full burst.
	ResetAfter time.Duration
}

// Never is the RetryAfter of a request that no wait would let pass.
const Never = time.Duration(1<<63 - 1)

// Store decides requests against limits: one limit for one key (Allow,
// AllowN), or all the limits of a request at once (AllowAll). It is safe
// for concurrent use.
type Store interface {
	// Allow reports whether one request for key may pass limit now, and
	// records it when it does. An error means the store could not decide;
	// the Result is then meaningless.
	Allow(ctx context.Context, key string, limit Limit) (Result, error)
	// AllowN decides a request of cost n (a bulk of n orders): it passes
	// only when n requests would, all or nothing, and is then recorded as
	// n requests; a cost above the burst never passes. Allow is AllowN
	// with n = 1.
	AllowN(ctx context.Context, key string, limit Limit, n int64) (Result, error)
	// AllowAll decides q against all its limits at once, all or nothing
	// (Request), and fills ans. An error means the store could not
	// decide; ans is then meaningless.
	AllowAll(ctx context.Context, q *Request, ans *Answer) error
	// Refund gives back what an allowed request was charged: q.Cost in
	// every check of q, as if that request had never been made (the
	// caller lists only the checks that charged it: a check that applied
	// and allowed). A key's TAT never moves back past now, so a refund
	// never gives a key more than a full burst; a key that holds nothing
	// is left alone. A check marked Allowance is charged q.Cost instead:
	// the request's charge moves to the allowance of its answers, for a
	// request answered without being let through (claim.go). Guard,
	// Shadow and Branch are ignored. An error means the store could not
	// be reached, and the charge stands.
	Refund(ctx context.Context, q *Request) error
}

// ErrStoreUnavailable is returned (wrapped) when the store is known to be
// down and was not asked: after a failure, calls fail fast for a short
// backoff instead of each waiting for the store deadline.
var ErrStoreUnavailable = errors.New("ratelimit: store unavailable")

// ErrNotCached is returned for a Request with CacheOnly that nothing in
// process could decide.
var ErrNotCached = errors.New("ratelimit: not decided in process")

// never is the Result of a request that can never pass.
func never() Result { return Result{RetryAfter: Never} }

// gcra applies one request of cost n at time now (nanoseconds) to a key
// whose stored TAT is tat (0 when the key is new) and returns the new TAT
// to store (0 meaning "do not store") and the result. It is the integer
// form of the Redis decision script (decideSrc), so that the memory and
// Redis stores agree: a denied request changes nothing.
func gcra(now, tat int64, l Limit, n int64) (int64, Result) {
	if !l.valid(n) {
		return 0, never()
	}
	e := l.emission()
	burstOffset := mulSat(e, l.Burst)
	if tat < now {
		tat = now
	}
	newTat := tat + mulSat(e, n)
	allowAt := newTat - burstOffset
	diff := now - allowAt
	if diff < 0 {
		return 0, Result{
			RetryAfter: time.Duration(-diff),
			ResetAfter: time.Duration(tat - now),
		}
	}
	return newTat, Result{
		Allowed:    true,
		Remaining:  diff / e,
		ResetAfter: time.Duration(newTat - now),
	}
}

// Uncharged returns r, the answer to a request of cost n under l, as the
// key stands when that request was not charged after all (another limit
// of an all-or-nothing Request refused it, or its charge was given back
// by Refund). An allowed answer gets the n requests back in Remaining and
// n emission intervals off ResetAfter. A refused answer charged nothing
// already; its Remaining is then read off ResetAfter (what passes now: a
// bulk refused for its size may leave some), rounded down, so that a
// ResetAfter rounded up by the store never reports more than there is.
// An answer no wait lifts (Never) carries no state and is returned as it
// is.
func (r Result) Uncharged(l Limit, n int64) Result {
	if r.RetryAfter == Never || !l.valid(1) {
		return r
	}
	e := l.emission()
	n = max(n, 1)
	if r.Allowed {
		r.Remaining = min(r.Remaining+n, l.Burst)
		r.ResetAfter = max(r.ResetAfter-time.Duration(mulSat(e, n)), 0)
		return r
	}
	room := mulSat(e, l.Burst) - int64(r.ResetAfter)
	r.Remaining = max(room, 0) / e
	return r
}

// Charged returns r, an allowed answer to a request of cost n under l as
// the key stands without that request's charge (Uncharged), as the key
// stands once it is charged after all: n requests fewer in Remaining and
// n emission intervals more until the key is back to a full burst.
func (r Result) Charged(l Limit, n int64) Result {
	if !r.Allowed || !l.valid(1) {
		return r
	}
	n = max(n, 1)
	r.Remaining = max(r.Remaining-n, 0)
	r.ResetAfter += time.Duration(mulSat(l.emission(), n))
	return r
}

// maxSpan bounds products of intervals, far beyond any configurable
// window (366 days is about 2^55 ns) and far from overflow.
const maxSpan = int64(1) << 61

// mulSat returns a·b for positive a and b, saturated at maxSpan.
func mulSat(a, b int64) int64 {
	if a > maxSpan/b {
		return maxSpan
	}
	if p := a * b; p < maxSpan {
		return p
	}
	return maxSpan
}
