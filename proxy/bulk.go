package proxy

import (
	"context"
	"net/http"
	"strconv"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/validate"
)

// bulkTargets are the routes whose limits a bulk route's requests are
// charged against: a placement against orders', a cancel against
// cancels', one unit per order or order id.
type bulkTargets struct {
	orders, cancels *Route
}

// errBulkUnchecked answers a bulk when no validator is configured: its
// orders cannot be counted or checked, so it is not forwarded.
var errBulkUnchecked = apierror.Static(http.StatusServiceUnavailable, "bulk_unavailable",
	"Bulk requests cannot be checked because order validation is not configured; send orders one at a time.")

// checkBulk runs a bulk request through the guards of its single
// counterparts: the body is read and validated whole (every order by the
// single-order rules, CheckBulk), the request is charged as many units as
// it carries orders or ids against the target route's limits — all or
// nothing — and the identifiers of its orders are claimed together
// (bulkClaims), in the same round trip as the limits when claims ride
// with them. The backend then receives the canonical encoding of the
// bulk.
func (g *Gateway) checkBulk(st *requestState, r *http.Request, pl *plan) *apierror.Error {
	v := pl.validator
	if v == nil {
		return errBulkUnchecked
	}
	ct := r.Header["Content-Type"]
	limit := min(v.MaxBulkBodyBytes(), g.maxBody)
	if e := v.PreCheckBulk(ct, r.ContentLength); e != nil {
		g.metrics.ValidationRejected(e.Code)
		return e
	}
	if r.ContentLength > limit {
		return g.errBody
	}
	if e := g.bulkRefusedFromCache(st, r, pl); e != nil {
		return e
	}
	body, e := g.readWhole(st, r, limit, g.errBody)
	if e != nil {
		return e
	}
	check := v.CheckBulk
	if st.route.bulk.orders == nil {
		check = v.CheckBulkCancel // a route that only cancels
	}
	bulk, e := check(ct, body)
	if e != nil {
		g.metrics.ValidationRejected(e.Code)
		return e
	}
	target := st.route.bulk.orders
	if bulk.Cancel() {
		target, st.bulkCancel = st.route.bulk.cancels, true
	}
	st.order.canonical = forwardEncoded(st, r, bulk.AppendCanonical(make([]byte, 0, len(body)+64)))
	claims := !bulk.Cancel() && g.bulkClaims(st, &bulk)
	joined := claims && g.joiner != nil && target != nil && g.limits != nil && target.limits.Limited()
	var part *ratelimit.ClaimPart
	if joined {
		part = g.prepareClaim(st)
	}
	st.order.answerable = claims && !joined
	if target != nil {
		if e := g.enforceLimits(st, r, pl, target, int64(bulk.Len()), part); e != nil {
			if joined {
				g.abandonClaim(st, r)
			}
			return e
		}
	}
	switch {
	case joined:
		return g.joinedClaim(st, r, pl)
	case claims:
		return g.claimOwn(st, r, pl)
	}
	return nil
}

// bulkClaims reports whether a placement has identifiers to claim, and
// sets them (with the element each names): every order's that has one,
// in order, all claimed at once under the fingerprint of the whole
// canonical bulk, so that:
//
//   - a bulk whose identifiers are all new is placed, and its response is
//     recorded once, for all of them;
//   - the same bulk sent again is answered with that recorded response
//     (Idempotent-Replayed), never placed twice;
//   - a bulk that repeats an identifier of another order or bulk is
//     refused whole (409, naming the element), and nothing of it is
//     placed or claimed.
func (g *Gateway) bulkClaims(st *requestState, bulk *validate.Bulk) bool {
	if g.idem == nil {
		return false
	}
	if st.order.account = g.identityKey(st); st.order.account == "" {
		return false
	}
	for i := range bulk.Orders {
		if id := bulk.Orders[i].Identifier; id != "" {
			st.order.ids = append(st.order.ids, id)
			st.order.elems = append(st.order.elems, i)
		}
	}
	return len(st.order.ids) > 0
}

// CodeBulkExceedsLimit is the code of the answer to a bulk that carries
// more orders (or order ids) than a rate limit it is charged against
// allows at once: its burst.
const CodeBulkExceedsLimit = "bulk_exceeds_limit"

// exceedsBurst is the answer to a bulk of k orders (or order ids, for a
// cancel) above the burst of a limit it is charged against. Charged all
// or nothing, such a bulk could never pass however long the client
// waited, so it is not a 429 (whose Retry-After clients honour and retry
// on) but a 413: the request is larger than the server will process, and
// it says the size that can pass, maxCost, so that the client splits it.
// It carries no Retry-After; nothing was charged.
func exceedsBurst(k, maxCost int64, cancel bool) *apierror.Error {
	what := " orders"
	if cancel {
		what = " order ids"
	}
	n := strconv.FormatInt(maxCost, 10)
	msg := "carries " + strconv.FormatInt(k, 10) + what + ", more than your rate limit lets pass at once (" + n +
		"), so it can never be accepted at this size; send it as bulks of at most " + n + what
	e := apierror.New(http.StatusRequestEntityTooLarge, CodeBulkExceedsLimit, "Bulk refused whole: it "+msg+".")
	e.Fields = map[string][]string{apierror.NonFieldErrors: {msg}}
	return e
}

// bulkClaimRefusal is the 409 answer to a bulk whose i-th order's
// identifier could not be claimed, naming that element.
func bulkClaimRefusal(o idempotency.Outcome, i int) *apierror.Error {
	field := "orders[" + strconv.Itoa(i) + "].identifier"
	a := idempotency.Refusal(o) // its status and code, with a detail naming the element
	var msg string
	switch o {
	case idempotency.InProgress:
		msg = "is in an order that is still being placed; retry later to receive its response"
	case idempotency.Conflict:
		msg = "was already used for a different order"
	default:
		msg = "was already sent to the exchange and its outcome is unknown; check your orders before placing it again with a new identifier"
	}
	e := apierror.New(a.Status, a.Code, "Bulk not placed: "+field+" "+msg+".")
	e.Fields = map[string][]string{field: {msg}}
	return e
}

// releaseClaims releases the claim st holds (an order's identifier, or
// a bulk's).
func (g *Gateway) releaseClaims(ctx context.Context, st *requestState) error {
	return g.idem.Release(ctx, st.order.claim)
}

// completeClaims records rec for the claim st holds.
func (g *Gateway) completeClaims(ctx context.Context, st *requestState, rec idempotency.Record) error {
	return g.idem.Complete(ctx, st.order.claim, rec)
}

// unknownClaims marks the claim st holds as of unknown outcome.
func (g *Gateway) unknownClaims(ctx context.Context, st *requestState) error {
	return g.idem.MarkUnknown(ctx, st.order.claim)
}
