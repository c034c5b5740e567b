package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/validate"
)

// orderState is the validation and duplicate-protection state of one
// order request, kept in its requestState.
type orderState struct {
	body       *[]byte   // pooled buffer holding the client's body (its start), or nil
	more       []*[]byte // pooled buffers holding the rest of the client's body, while it is read
	identifier string    // the order's identifier, or ""
	canonical  []byte    // the canonical body forwarded, whose fingerprint a claim records
	// ids are the identifiers the request claims, all at once, for
	// account (Gateway.identityKey): an order's one (in one), a bulk's
	// orders' in order; elems, for a bulk, the element of each.
	account  string
	ids      []string
	elems    []int
	one      [1]string
	claimed  bool // a claim is held and must be settled
	settled  bool
	claim    idempotency.Claim
	rejected bool                 // checkOrder refused the body as invalid (counted once it is the answer)
	prepared idempotency.Prepared // the claim as it rides with the limits
	// answerable reports a request whose identifiers, if it has any, are
	// claimed on their own after its limits are decided: duplicate
	// protection may then answer it (limiter.Request.Claims).
	answerable bool
	// claimBy is the deadline of a claim prepared to ride with the
	// limits: of their round trip and, should the claim not be carried,
	// of the claim on its own, so that the order waits one deadline.
	claimBy time.Time
}

// bodyPool holds the buffers request bodies are read into (readChunks):
// an order's fits in one (validation.max_body_bytes, 8 KiB by default).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// errBodyUnreadable answers a body the client broke off.
var errBodyUnreadable = apierror.Static(http.StatusBadRequest, "invalid_body", "Request body could not be read.")

// checkOrder reads an order's body whole and validates it. The request's
// body becomes the order's canonical encoding (forwardCanonical), the
// only form the backend receives and the one duplicate protection
// fingerprints. A body refused as invalid is marked (orderState.rejected)
// and counted by countInvalid once its refusal is the answer: a limit's
// refusal comes first.
func (g *Gateway) checkOrder(st *requestState, r *http.Request, v *validate.Validator) *apierror.Error {
	if e := v.PreCheck(r.Header["Content-Type"], r.ContentLength); e != nil {
		st.order.rejected = true
		return e
	}
	tooLarge := v.TooLarge()
	body, e := g.readWhole(st, r, v.MaxBodyBytes(), tooLarge)
	if e != nil {
		if e == tooLarge {
			st.order.rejected = true
		}
		return e
	}
	order, e := v.Check(r.Header["Content-Type"], body)
	if e != nil {
		st.order.rejected = true
		return e
	}
	st.order.identifier = order.Identifier
	st.order.canonical = forwardCanonical(st, r, &order)
	return nil
}

// claimIdentifier claims the identifier of an order for its account
// (Gateway.identityKey), so that it is placed at most once: a repeat of
// a placed order is answered with its recorded response (replay), any
// other use of the identifier is refused. An order without an identifier,
// or of an anonymous caller, passes unclaimed; the caller's key (an HMAC
// for an opaque token) is worked out only for an order that needs it, and
// reused when the limits already did.
func (g *Gateway) claimIdentifier(st *requestState, r *http.Request, pl *plan) *apierror.Error {
	if !g.orderClaims(st) {
		return nil
	}
	return g.claimOwn(st, r, pl)
}

// orderClaims reports whether an order has an identifier to claim, and
// sets the identifiers its claim takes.
func (g *Gateway) orderClaims(st *requestState) bool {
	if st.order.identifier == "" || g.idem == nil {
		return false
	}
	if st.order.account = g.identityKey(st); st.order.account == "" {
		return false
	}
	st.order.one[0] = st.order.identifier
	st.order.ids = st.order.one[:]
	return true
}

// fingerprint returns the fingerprint a request's claim records: of the
// canonical body forwarded.
func (st *requestState) fingerprint() idempotency.Fingerprint {
	return idempotency.FingerprintOf(st.order.canonical)
}

// claimOwn claims the request's identifiers (st.order.ids) in a store
// call of its own, within what is left of the order's one deadline when
// its claim was prepared to ride with the limits, else within
// idempotency.timeout.
func (g *Gateway) claimOwn(st *requestState, r *http.Request, pl *plan) *apierror.Error {
	by := st.order.claimBy
	if by.IsZero() {
		by = g.now().Add(g.idemTimeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), by)
	defer cancel()
	claim, err := g.idem.ClaimAll(ctx, st.order.account, st.order.ids, st.fingerprint())
	return g.answerClaim(st, r, pl, claim, err)
}

// joinsClaims reports whether the request's identifier claim, if it has
// one, rides in the round trip of its limits: duplicate protection shares
// the limiter's Redis (Options.Idempotency is an idempotency.Joiner) and
// the route validates orders and has limits.
func (g *Gateway) joinsClaims(st *requestState, pl *plan) bool {
	return g.joiner != nil && pl.validator != nil && st.route.Config.Validate == config.ValidateOrd &&
		g.limits != nil && st.route.limits.Limited()
}

// prepareClaim prepares the identifier claim of a checked request (an
// order, whose st.order.ids orderClaims set, or a bulk) to ride with its
// limits.
func (g *Gateway) prepareClaim(st *requestState) *ratelimit.ClaimPart {
	p := &st.order.prepared
	st.order.claimBy = g.now().Add(g.idemTimeout)
	g.joiner.Prepare(p, st.order.account, st.order.ids, st.fingerprint())
	return &p.ClaimPart
}

// joinedClaim answers the claim of a request its limits let pass, from
// what the limits' round trip reported. A claim the round trip did not
// carry (the limits were decided without Redis: the store failing fast,
// or no limit applying; in a Cluster, a spray guard sent alone whose
// round trip failed) is made on its own, as claimIdentifier does, within
// what is left of the order's one deadline; one whose round trip failed
// is not retried (the order would wait for a second deadline) and the
// order is refused 503.
func (g *Gateway) joinedClaim(st *requestState, r *http.Request, pl *plan) *apierror.Error {
	if !st.decision.Claim.Sent {
		return g.claimOwn(st, r, pl)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.idemTimeout)
	defer cancel()
	claim, err := g.joiner.Settle(ctx, &st.order.prepared, st.decision.Claim)
	return g.answerClaim(st, r, pl, claim, err)
}

// abandonClaim frees the identifier claim of an order its limits did not
// let through (refused, or failed on a route that fails closed), when
// the claim ran all the same: in a Redis Cluster the claim's script run
// is on its account's master and the limit that refused may be on
// another, decided at once in a run of its own. It is freed here, before
// the refusal is written, so that the client's retry finds the
// identifier free, and not in the limiter, which gives back what it
// charged but leaves what a claim means, and how it is freed, to
// duplicate protection. A free that fails leaves the claim in flight: a
// retry gets 409 in progress, then the unknown outcome, never a second
// placement.
func (g *Gateway) abandonClaim(st *requestState, r *http.Request) {
	if !st.decision.Claim.Run {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.idemTimeout)
	defer cancel()
	if err := g.joiner.Abandon(ctx, &st.order.prepared, st.decision.Claim); err != nil {
		g.log.Warn("duplicate protection: freeing the claim of an order its limits refused failed; retries get 409 until it expires",
			zap.String("request_id", st.id), zap.Error(err))
	}
}

// countInvalid counts e, the answer to a request, when it refuses an
// invalid order.
func (g *Gateway) countInvalid(st *requestState, e *apierror.Error) {
	if st.order.rejected {
		g.metrics.ValidationRejected(e.Code)
	}
}

// answerClaim is the answer to a request whose claim came back as claim,
// or failed with err. A request its claim does not let through (a
// replay, a refusal, a failure) is charged nothing but its allowance of
// duplicate answers: what its limits charged moves there before the
// answer (a claim that rode with the limits charged only the allowance
// in the first place).
func (g *Gateway) answerClaim(st *requestState, r *http.Request, pl *plan, claim idempotency.Claim, err error) *apierror.Error {
	if st.rec {
		g.traceClaim(st, claim.Outcome, err)
	}
	if err != nil || claim.Outcome != idempotency.Claimed {
		g.giveBackLimits(st, r, pl, g.limits.Uncharge)
	}
	if err != nil {
		return g.claimFailed(st, err)
	}
	switch claim.Outcome {
	case idempotency.Claimed:
		g.metrics.Idempotency(metrics.IdempotencyClaimed)
		st.order.claimed, st.order.claim = true, claim
		return nil
	case idempotency.Replay:
		g.metrics.Idempotency(metrics.IdempotencyReplayed)
		return g.replay(st, claim.Record)
	}
	g.metrics.Idempotency(idemMetric(claim.Outcome))
	if st.order.elems != nil {
		return bulkClaimRefusal(claim.Outcome, st.order.elems[claim.At])
	}
	return idempotency.Refusal(claim.Outcome)
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

// claimFailed is the answer to an order whose identifier could not be
// claimed, saying why: the account's share is full (only that account is
// refused), the store is full, or the store failed.
func (g *Gateway) claimFailed(st *requestState, err error) *apierror.Error {
	switch {
	case errors.Is(err, idempotency.ErrAccountFull):
		g.metrics.Idempotency(metrics.IdempotencyAccountFull)
		return idempotency.AccountFull()
	case errors.Is(err, idempotency.ErrFull):
		g.metrics.Idempotency(metrics.IdempotencyStoreFull)
		g.log.Warn("duplicate protection store full; order refused", zap.String("request_id", st.id), zap.Error(err))
		return idempotency.Full()
	}
	g.metrics.Idempotency(metrics.IdempotencyStoreError)
	g.log.Warn("duplicate protection store failed; order refused", zap.String("request_id", st.id), zap.Error(err))
	return idempotency.Unavailable()
}

// readChunks reads r into st's pooled buffers (bodyPool: the first is
// st.order.body, the others st.order.more), at most max bytes, each
// filled before the next is taken: a body held whole takes the memory of
// the bytes that have arrived, in buffers of a few KiB that go back to
// the pool, never what its Content-Length promises and never a buffer
// grown by copies. tooBig reports a body longer than max; n is how many
// bytes were read.
func (st *requestState) readChunks(r io.Reader, max int64) (n int64, tooBig bool, err error) {
	if r == nil || r == http.NoBody {
		return 0, false, nil
	}
	cur := st.order.body
	for {
		if n >= max {
			tooBig, err := probeEnd(r)
			return n, tooBig, err
		}
		if len(*cur) == cap(*cur) {
			cur = bodyPool.Get().(*[]byte)
			*cur = (*cur)[:0]
			st.order.more = append(st.order.more, cur)
		}
		b := *cur
		k, err := r.Read(b[len(b):min(cap(b), len(b)+int(max-n))])
		*cur = b[:len(b)+k]
		n += int64(k)
		if err == io.EOF {
			return n, false, nil
		}
		if err != nil {
			return n, false, err
		}
	}
}

// probeEnd reads r, at the limit of its body, for one byte more: true
// when there is one (the body is too big), false at its end; or the error
// the read failed with.
func probeEnd(r io.Reader) (bool, error) {
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		switch {
		case n == 1:
			return true, nil
		case err == io.EOF:
			return false, nil
		case err != nil:
			return false, err
		}
	}
}

// wholeBody returns the n bytes readChunks read: the first buffer itself
// when they fit in it (pooled: st's until releaseOrder), else a buffer of
// their own holding them all (pooled false), and gives the buffers past
// the first back to the pool.
func (st *requestState) wholeBody(n int64) (body []byte, pooled bool) {
	first := *st.order.body
	if int64(len(first)) == n {
		body, pooled = first, true // a buffer taken for the end of file is empty
	} else {
		body = make([]byte, 0, n)
		body = append(body, first...)
	}
	for _, bp := range st.order.more {
		if !pooled {
			body = append(body, *bp...)
		}
		putBody(bp)
	}
	clear(st.order.more)
	st.order.more = st.order.more[:0]
	return body, pooled
}

// replay answers with the response recorded for an identifier, and
// returns answered.
func (g *Gateway) replay(st *requestState, rec *idempotency.Record) *apierror.Error {
	h := st.rw.Header()
	if rec.ContentType != "" {
		h["Content-Type"] = []string{rec.ContentType}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	h[idempotency.ReplayedHeader] = []string{"true"}
	h["X-Request-Id"] = []string{st.id}
	st.replayed = true
	st.rw.WriteHeader(rec.Status)
	_, _ = st.rw.Write(rec.Body)
	return answered
}

// claimKey marks an outbound request whose response must be recorded.
type claimKey struct{}

// recordResponse, from ModifyResponse, settles the claim of an order as
// soon as the backend's response arrives, before it is written to the
// client: a client that hangs up must not leave the outcome unrecorded.
//
// Only an order the backend accepted (2xx) keeps its identifier, with the
// response for replay. An order it refused (4xx) was not placed: the
// identifier is released, so that refused orders — invented tokens,
// insufficient balance — cost the store nothing and a corrected order may
// reuse the identifier. A 5xx says nothing certain about the order (the
// backend may have failed after placing it), so, like a timeout, it is
// recorded as an unknown outcome and never sent twice. A 2xx body longer
// than idempotency.max_response_bytes, or one that cannot be read to its
// end, is recorded as an unknown outcome too.
//
// The body (up to idempotency.max_response_bytes) is read before anything
// is written to the client, whatever the status: a body the backend
// breaks off is then answered 502 (errOrderAnswerBroken, through
// ErrorHandler; 504 when the route's timeout cut it) instead of a dropped
// connection, which would leave the client with a bare EOF and no answer
// at all.
func (g *Gateway) recordResponse(res *http.Response) error {
	st, _ := res.Request.Context().Value(claimKey{}).(*requestState)
	if st == nil || !st.order.claimed || st.order.settled {
		return nil
	}
	st.order.settled = true
	b, readErr := io.ReadAll(io.LimitReader(res.Body, int64(g.idemMaxResp)+1))
	rest := res.Body
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	switch {
	case res.StatusCode >= 500:
		g.settleUnknown(ctx, st)
	case res.StatusCode >= 300:
		g.metrics.Idempotency(metrics.IdempotencyReleased)
		if err := g.releaseClaims(ctx, st); err != nil {
			g.log.Warn("duplicate protection: releasing a refused order's claim failed", zap.String("request_id", st.id), zap.Error(err))
		}
	case readErr != nil || len(b) > g.idemMaxResp:
		g.settleUnknown(ctx, st)
	default:
		rec := idempotency.Record{Status: res.StatusCode, ContentType: res.Header.Get("Content-Type"), Body: b}
		if err := g.completeClaims(ctx, st, rec); err != nil {
			g.log.Warn("duplicate protection: recording the response failed", zap.String("request_id", st.id), zap.Error(err))
		}
	}
	if readErr != nil {
		return brokenAnswer{readErr}
	}
	return nil
}

// errOrderAnswerBroken answers an order whose response the backend broke
// off before exgate had read it: nothing had been written to the client.
var errOrderAnswerBroken = apierror.Static(http.StatusBadGateway, "bad_gateway",
	"The exchange's answer to this order was cut off, so its outcome is unknown: check your orders before sending it again.")

// brokenAnswer is the error of reading an order's response body, which
// proxyError answers with errOrderAnswerBroken.
type brokenAnswer struct{ err error }

func (b brokenAnswer) Error() string { return "order response broken off: " + b.err.Error() }

// Unwrap returns the read error, so that a timeout is still classified as
// one in the metrics.
func (b brokenAnswer) Unwrap() error { return b.err }

// settleFailed settles the claim of an order the backend did not answer:
// released when the request certainly never left exgate, else recorded as
// an unknown outcome (it may have been placed).
func (g *Gateway) settleFailed(st *requestState, err error) {
	if !st.order.claimed || st.order.settled {
		return
	}
	st.order.settled = true
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	if err != nil && idempotency.NotSent(err) {
		if err := g.releaseClaims(ctx, st); err != nil {
			g.log.Warn("duplicate protection: releasing a claim failed", zap.String("request_id", st.id), zap.Error(err))
		}
		return
	}
	g.settleUnknown(ctx, st)
}

func (g *Gateway) settleUnknown(ctx context.Context, st *requestState) {
	if err := g.unknownClaims(ctx, st); err != nil && !errors.Is(err, idempotency.ErrClaimLost) {
		g.log.Warn("duplicate protection: recording an unknown outcome failed", zap.String("request_id", st.id), zap.Error(err))
	}
}

func putBody(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		bodyPool.Put(bp)
	}
}

// releaseOrder returns the buffers of a body read whole (the client's
// bytes) to their pool; the backend is sent a buffer of its own (an
// order's canonical body, or a copy).
func (st *requestState) releaseOrder() {
	if bp := st.order.body; bp != nil {
		st.order.body = nil
		putBody(bp)
	}
	for _, bp := range st.order.more {
		putBody(bp)
	}
	st.order.more = nil
}

// idemDefaultTimeout bounds duplicate-protection store calls when the
// configuration does not.
const idemDefaultTimeout = 100 * time.Millisecond
