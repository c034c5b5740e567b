package proxy

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/exgate/exgate/apierror"
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
// (bulkClaims, limitWithClaim), in the same round trip as the limits when
// claims ride with them. The backend then receives the canonical encoding of the
// bulk.
func (g *Gateway) checkBulk(st *requestState, r *http.Request, pl *requestPlan) *apierror.Error {
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
	canonical := bulk.AppendCanonical(make([]byte, 0, len(body)+64))
	st.order.canonical = forwardEncoded(st, r, bytes.NewReader(canonical), canonical)
	claims := !bulk.Cancel() && g.bulkClaims(st, &bulk)
	return g.limitWithClaim(st, r, pl, target, int64(bulk.Len()), claims, nil)
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
