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
// nothing — and every order identifier is claimed. The backend then
// receives the canonical encoding of the bulk. It returns false when it
// has answered the request itself.
func (g *Gateway) checkBulk(ex *exchange, r *http.Request, pl *plan) bool {
	v := pl.validator
	if v == nil {
		g.refuse(ex, r, errBulkUnchecked)
		return false
	}
	ct := r.Header["Content-Type"]
	limit := min(v.MaxBulkBodyBytes(), g.maxBody)
	if p := v.PreCheckBulk(ct, r.ContentLength); p != nil {
		g.metrics.ValidationRejected(p.Code)
		g.refuse(ex, r, p)
		return false
	}
	if r.ContentLength > limit {
		g.refuse(ex, r, g.errBody)
		return false
	}
	if !g.reserveBody(ex, r, limit) {
		return false
	}
	bp := bodyPool.Get().(*[]byte)
	ex.order.body = bp
	body, tooBig, err := readBody((*bp)[:0], r.Body, limit)
	*bp = body[:0]
	if tooBig {
		ex.rw.Header()["Connection"] = connClose // the rest of the body stays unread
		g.reject(ex, g.errBody)
		return false
	}
	if err != nil {
		g.reject(ex, errBodyUnreadable)
		return false
	}
	bulk, p := v.CheckBulk(ct, body)
	if p != nil {
		g.metrics.ValidationRejected(p.Code)
		g.reject(ex, p)
		return false
	}
	target := ex.route.bulk.orders
	if bulk.Cancel() {
		target, ex.bulkCancel = ex.route.bulk.cancels, true
	}
	if target != nil && !g.enforceLimits(ex, r, pl, target, int64(bulk.Len())) {
		return false
	}
	body = forwardEncoded(ex, r, bulk.AppendCanonical(make([]byte, 0, len(body)+64)))
	if bulk.Cancel() || g.idem == nil {
		return true
	}
	key := g.identityKey(ex)
	if key == "" {
		return true
	}
	return g.claimBulk(ex, r, &bulk, key, idempotency.FingerprintOf(body))
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
// Claims taken before a refusal are released. It returns false when it
// has answered the request itself.
func (g *Gateway) claimBulk(ex *exchange, r *http.Request, bulk *validate.Bulk, account string, fp idempotency.Fingerprint) bool {
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
			g.releaseTaken(ex, claims)
			g.refuseClaim(ex, err)
			return false
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
		g.releaseTaken(ex, claims)
		g.metrics.Idempotency(idemMetric(refusal))
		g.reject(ex, bulkClaimRefusal(refusal, refuseAt))
		return false
	case replays > 0 && replays == withID:
		g.metrics.Idempotency(metrics.IdempotencyReplayed)
		g.replay(ex, replay)
		return false
	case replays > 0:
		// Part of this very bulk was placed before and part was not: it
		// cannot be answered from the record, nor placed again.
		g.releaseTaken(ex, claims)
		g.metrics.Idempotency(metrics.IdempotencyConflict)
		g.reject(ex, errIdemConflict)
		return false
	case len(claims) > 0:
		ex.order.claimed, ex.order.claim, ex.order.more = true, claims[0], claims[1:]
	}
	return true
}

// releaseTaken releases claims a refused bulk had taken.
func (g *Gateway) releaseTaken(ex *exchange, claims []idempotency.Claim) {
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	for _, c := range claims {
		if err := g.idem.Release(ctx, c); err != nil {
			g.log.Warn("duplicate protection: releasing a refused bulk's claim failed", zap.String("request_id", ex.id), zap.Error(err))
		}
	}
}

// idemMetric is the metric outcome of a refused claim.
func idemMetric(o idempotency.Outcome) metrics.IdempotencyOutcome {
	switch o {
	case idempotency.InProgress:
		return metrics.IdempotencyInProgress
	case idempotency.Conflict:
		return metrics.IdempotencyConflict
	}
	return metrics.IdempotencyUnknown
}

// bulkClaimRefusal is the 409 answer to a bulk whose i-th order's
// identifier could not be claimed, naming that element.
func bulkClaimRefusal(o idempotency.Outcome, i int) *apierror.Error {
	field := "orders[" + strconv.Itoa(i) + "].identifier"
	a := idempotency.Refusal(o)
	var msg string
	switch o {
	case idempotency.InProgress:
		msg = "is in an order that is still being placed; retry later to receive its response"
	case idempotency.Conflict:
		msg = "was already used for a different order"
	default:
		msg = "was already sent to the exchange and its outcome is unknown; check your orders before placing it again with a new identifier"
	}
	return &apierror.Error{Status: a.Status, Code: a.Code, Detail: "Bulk not placed: " + field + " " + msg + ".",
		Fields: map[string][]string{field: {msg}}}
}

// releaseClaims releases every claim ex holds (one for an order, one per
// identifier for a bulk) and returns the first error.
func (g *Gateway) releaseClaims(ctx context.Context, ex *exchange) error {
	err := g.idem.Release(ctx, ex.order.claim)
	for _, c := range ex.order.more {
		if e := g.idem.Release(ctx, c); err == nil {
			err = e
		}
	}
	return err
}

// completeClaims records rec under every claim ex holds.
func (g *Gateway) completeClaims(ctx context.Context, ex *exchange, rec idempotency.Record) error {
	err := g.idem.Complete(ctx, ex.order.claim, rec)
	for _, c := range ex.order.more {
		if e := g.idem.Complete(ctx, c, rec); err == nil {
			err = e
		}
	}
	return err
}

// unknownClaims marks every claim ex holds as of unknown outcome.
func (g *Gateway) unknownClaims(ctx context.Context, ex *exchange) error {
	err := g.idem.MarkUnknown(ctx, ex.order.claim)
	for _, c := range ex.order.more {
		if e := g.idem.MarkUnknown(ctx, c); err == nil {
			err = e
		}
	}
	return err
}
