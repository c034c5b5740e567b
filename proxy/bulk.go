package proxy

import (
	"context"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
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
// nothing — and every order identifier is claimed (claimBulk). The
// backend then receives the canonical encoding of the bulk.
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
	if target != nil {
		if e := g.enforceLimits(st, r, pl, target, int64(bulk.Len()), nil); e != nil {
			return e
		}
	}
	body = forwardEncoded(st, r, bulk.AppendCanonical(make([]byte, 0, len(body)+64)))
	if bulk.Cancel() || g.idem == nil {
		return nil
	}
	key := g.identityKey(st)
	if key == "" {
		return nil
	}
	return g.claimBulk(st, r, &bulk, key, idempotency.FingerprintOf(body))
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

// claimBulk claims the identifier of every order of a placement, all
// under the fingerprint of the whole canonical bulk, so that:
//
//   - a bulk whose identifiers are all new is placed, and its response is
//     recorded under each of them;
//   - the same bulk sent again is answered with that recorded response
//     (Idempotent-Replayed), never placed twice;
//   - a bulk that repeats an identifier of another order or bulk is
//     refused whole (409, naming the element), and nothing of it is
//     placed.
//
// Claims taken before a refusal are released.
func (g *Gateway) claimBulk(st *requestState, r *http.Request, bulk *validate.Bulk, account string, fp idempotency.Fingerprint) *apierror.Error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.idemTimeout)
	defer cancel()
	var (
		claims   []idempotency.Claim
		replay   *idempotency.Record
		replays  int
		withID   int
		refusal  idempotency.Outcome
		refuseAt = -1
	)
	for i := range bulk.Orders {
		id := bulk.Orders[i].Identifier
		if id == "" {
			continue
		}
		withID++
		c, err := g.idem.Claim(ctx, idempotency.Key{Account: account, Identifier: id}, fp)
		if err != nil {
			g.releaseTaken(st, claims)
			return g.claimFailed(st, err)
		}
		switch c.Outcome {
		case idempotency.Claimed:
			g.metrics.Idempotency(metrics.IdempotencyClaimed)
			claims = append(claims, c)
			continue
		case idempotency.Replay:
			if replay == nil {
				replay = c.Record
			}
			replays++
			continue
		}
		refusal, refuseAt = c.Outcome, i
		break
	}
	switch {
	case refuseAt >= 0:
		g.releaseTaken(st, claims)
		g.metrics.Idempotency(idemMetric(refusal))
		return bulkClaimRefusal(refusal, refuseAt)
	case replays > 0 && replays == withID:
		g.metrics.Idempotency(metrics.IdempotencyReplayed)
		return g.replay(st, replay)
	case replays > 0:
		// Part of this very bulk was placed before and part was not: it
		// cannot be answered from the record, nor placed again.
		g.releaseTaken(st, claims)
		g.metrics.Idempotency(metrics.IdempotencyConflict)
		return idempotency.Refusal(idempotency.Conflict)
	case len(claims) > 0:
		st.order.claimed, st.order.claim, st.order.more = true, claims[0], claims[1:]
	}
	return nil
}

// releaseTaken releases claims a refused bulk had taken.
func (g *Gateway) releaseTaken(st *requestState, claims []idempotency.Claim) {
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	for _, c := range claims {
		if err := g.idem.Release(ctx, c); err != nil {
			g.log.Warn("duplicate protection: releasing a refused bulk's claim failed", zap.String("request_id", st.id), zap.Error(err))
		}
	}
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

// releaseClaims releases every claim st holds (one for an order, one per
// identifier for a bulk) and returns the first error.
func (g *Gateway) releaseClaims(ctx context.Context, st *requestState) error {
	err := g.idem.Release(ctx, st.order.claim)
	for _, c := range st.order.more {
		if e := g.idem.Release(ctx, c); err == nil {
			err = e
		}
	}
	return err
}

// completeClaims records rec under every claim st holds.
func (g *Gateway) completeClaims(ctx context.Context, st *requestState, rec idempotency.Record) error {
	err := g.idem.Complete(ctx, st.order.claim, rec)
	for _, c := range st.order.more {
		if e := g.idem.Complete(ctx, c, rec); err == nil {
			err = e
		}
	}
	return err
}

// unknownClaims marks every claim st holds as of unknown outcome.
func (g *Gateway) unknownClaims(ctx context.Context, st *requestState) error {
	err := g.idem.MarkUnknown(ctx, st.order.claim)
	for _, c := range st.order.more {
		if e := g.idem.MarkUnknown(ctx, c); err == nil {
			err = e
		}
	}
	return err
}
