package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/validate"
)

// An order's claim, from start to end (docs/architecture.md, step 8): the
// identifiers of a checked order or bulk are claimed for its account, all
// at once, under the fingerprint of its canonical body — riding in the
// round trip of its limits when duplicate protection shares their Redis
// (prepareClaim, then joinedClaim, or abandonClaim when a limit refused),
// else on their own once the limits let the request pass (claimOwn).
// The answer to the claim (answerClaim) lets the request on holding it,
// replays a recorded response, or refuses the request. A claim held is
// settled once: completed with the backend's 2xx response, released when
// the order was certainly not placed (a 4xx, a dial failure, a request
// exgate did not send), else marked unknown (settle).

// claimPhase is where a request's claim stands.
type claimPhase uint8

const (
	claimNone    claimPhase = iota // nothing claimed
	claimHeld                      // claimed: to be settled when the backend answers or fails
	claimSettled                   // completed, released or marked unknown
)

// claimState is the identifier claim of one request, kept in its
// requestState.
type claimState struct {
	// ids are the identifiers the request claims, all at once, for
	// account (Gateway.identityKey): an order's one (in one), a bulk's
	// orders' in order; elems, for a bulk, the element of each. client
	// is whose share of the store the claim is charged to (claimClient).
	account string
	client  string
	ids     []string
	elems   []int
	one     [1]string
	phase   claimPhase
	claim   idempotency.Claim    // the claim held, once phase is claimHeld
	joined  idempotency.Prepared // the claim as it rides with the limits
	// answerable reports a request whose identifiers are claimed on their
	// own after its limits are decided: duplicate protection may then
	// answer it (limiter.Request.Claims).
	answerable bool
	// by is the deadline of a claim prepared to ride with the limits: of
	// their round trip and, should the claim not be carried, of the claim
	// on its own, so that the order waits one deadline.
	by time.Time
	// held is the response body of the order whose claim is settled
	// (recordResponse): the proxy reads it within the request, before
	// its state goes back to the pool.
	held heldBody
	// ctx is the context of the request's calls to the store (storeCtx).
	ctx idempotency.RequestContext
}

// storeCtx returns parent naming st's request by its id
// (idempotency.RequestContext), for a call to duplicate protection's
// store: what the store does in the background for the call is reported
// with it. It is st's own, valid for that call.
func (st *requestState) storeCtx(parent context.Context) context.Context {
	st.claim.ctx = idempotency.RequestContext{Context: parent, ID: st.id}
	return &st.claim.ctx
}

// limitWithClaim decides rt's limits for a checked request of cost, with
// the claim of its identifiers (claims: orderClaims or bulkClaims set
// them) riding in their round trip when duplicate protection shares the
// limiter's Redis, else made on its own once the limits let the request
// pass. refusal, when set, is the request's own refusal (an invalid
// order), answered once the limits let it pass: a limit's refusal comes
// first, whatever the body, and then nothing is claimed.
func (g *Gateway) limitWithClaim(st *requestState, r *http.Request, pl *requestPlan, rt *Route, cost int64,
	claims bool, refusal *apierror.Error) *apierror.Error {
	limited := rt != nil && g.limits != nil && rt.limits.Limited()
	joined := claims && limited && g.joiner != nil
	var part *ratelimit.ClaimPart
	if joined {
		part = g.prepareClaim(st)
	}
	st.claim.answerable = claims && !joined
	if limited {
		if e := g.enforceLimits(st, r, pl, rt, cost, part); e != nil {
			if joined {
				g.abandonClaim(st, r, rt, cost)
			}
			return e
		}
	}
	switch {
	case refusal != nil:
		return refusal
	case joined:
		return g.joinedClaim(st, r, pl, rt, cost)
	case claims:
		return g.claimOwn(st, r, pl)
	}
	return nil
}

// orderClaims reports whether a checked order has an identifier to claim,
// and sets the identifiers its claim takes. An order without an
// identifier, or of an anonymous caller, passes unclaimed; the caller's
// key (an HMAC for an opaque token) is worked out only for an order that
// needs it, and reused when the limits already did.
func (g *Gateway) orderClaims(st *requestState) bool {
	if st.order.identifier == "" || g.idem == nil {
		return false
	}
	if st.claim.account = g.identityKey(st); st.claim.account == "" {
		return false
	}
	st.claim.client = claimClient(st)
	st.claim.one[0] = st.order.identifier
	st.claim.ids = st.claim.one[:]
	return true
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
	if st.claim.account = g.identityKey(st); st.claim.account == "" {
		return false
	}
	st.claim.client = claimClient(st)
	for i := range bulk.Orders {
		if id := bulk.Orders[i].Identifier; id != "" {
			st.claim.ids = append(st.claim.ids, id)
			st.claim.elems = append(st.claim.elems, i)
		}
	}
	return len(st.claim.ids) > 0
}

// claimClient returns whose share of the duplicate-protection store a
// request's claim is charged to (idempotency.Store.ClaimAll's client): a verified
// account's own (""), else its client address, grouped as the rate
// limits group it, for every opaque token it presents: anyone can invent
// a token, and a client is an account or an address (docs/pools.md).
// Requests without an address are one client, as in the other pools
// (share.AddrKey).
func claimClient(st *requestState) string {
	if st.caller.id.Account != "" {
		return ""
	}
	var a netip.Addr
	if st.addr.IsValid() {
		a = clientip.AddrGroup(st.addr, st.plan.v6Prefix)
	}
	return idempotency.AddressClient(a)
}

// fingerprint returns the fingerprint a request's claim records: of the
// canonical body forwarded.
func (st *requestState) fingerprint() idempotency.Fingerprint {
	return idempotency.FingerprintOf(st.order.canonical)
}

// prepareClaim prepares the identifier claim of a checked request to ride
// with its limits.
func (g *Gateway) prepareClaim(st *requestState) *ratelimit.ClaimPart {
	p := &st.claim.joined
	st.claim.by = g.now().Add(g.idemTimeout)
	g.joiner.Prepare(p, st.claim.account, st.claim.client, st.claim.ids, st.fingerprint())
	return &p.ClaimPart
}

// claimOwn claims the request's identifiers in a store call of its own,
// within what is left of the order's one deadline when its claim was
// prepared to ride with the limits, else within idempotency.timeout.
func (g *Gateway) claimOwn(st *requestState, r *http.Request, pl *requestPlan) *apierror.Error {
	by := st.claim.by
	if by.IsZero() {
		by = g.now().Add(g.idemTimeout)
	}
	ctx, cancel := context.WithDeadline(st.storeCtx(context.WithoutCancel(r.Context())), by)
	defer cancel()
	claim, err := g.idem.ClaimAll(ctx, st.claim.account, st.claim.client, st.claim.ids, st.fingerprint())
	return g.answerClaim(st, r, pl, claim, err)
}

// joinedClaim answers the claim of a request its limits let pass, from
// what the limits' round trip reported. A claim the round trip did not
// carry (the limits were decided without Redis: the store failing fast,
// or no limit applying; in a Cluster, a spray guard sent alone whose
// round trip failed) is made on its own, within what is left of the
// order's one deadline; one whose round trip failed is not retried (the
// order would wait for a second deadline) and the order is refused 503.
func (g *Gateway) joinedClaim(st *requestState, r *http.Request, pl *requestPlan, rt *Route, cost int64) *apierror.Error {
	if !st.decision.Claim.Sent {
		return g.claimOwn(st, r, pl)
	}
	// Most claims are settled from their round trip's reply alone; a call
	// Settle makes (the claim made again, a free) is bounded by the
	// store's own timeout and outlives the client (idempotency.Joiner),
	// so no context is made here.
	ctx := st.storeCtx(r.Context())
	st.claim.ctx.Ran = g.lostRunRefund(st, rt, cost)
	claim, err := g.joiner.Settle(ctx, &st.claim.joined, st.decision.Claim)
	return g.answerClaim(st, r, pl, claim, err)
}

// abandonClaim frees the identifier claim of a request its limits did not
// let through (refused, or failed on a route that fails closed), when
// the claim ran, or may have, all the same: in a Redis Cluster the
// claim's script run is on its account's master and the limit that
// refused may be on another, decided at once in a run of its own; and a
// round trip whose reply never came back (its deadline, a broken
// connection) may have run the claim before on_store_error refused the
// request (freed in the background, idempotency.Joiner.Abandon). It is freed here, before
// the refusal is written, so that the client's retry finds the
// identifier free, and not in the limiter, which gives back what it
// charged but leaves what a claim means, and how it is freed, to
// duplicate protection. A free that fails leaves the claim in flight: a
// retry gets 409 in progress, then the unknown outcome, never a second
// placement.
func (g *Gateway) abandonClaim(st *requestState, r *http.Request, rt *Route, cost int64) {
	if c := st.decision.Claim; !c.Run && (!c.Sent || c.Err == nil) {
		return
	}
	ctx, cancel := context.WithTimeout(st.storeCtx(context.WithoutCancel(r.Context())), g.idemTimeout)
	defer cancel()
	st.claim.ctx.Ran = g.lostRunRefund(st, rt, cost)
	if err := g.joiner.Abandon(ctx, &st.claim.joined, st.decision.Claim); err != nil {
		g.log.Warn("duplicate protection: freeing the claim of an order its limits refused failed; retries get 409 until it expires",
			zap.String("request_id", st.id), zap.Error(err))
	}
}

// lostRunRefund returns, for a request whose limits' round trip carried
// its claim and lost its reply (the run may have charged rt's limits at
// cost, and taken the claim, or done nothing), the give-back of that
// charge (limiter.Enforcer.RefundLost), which duplicate protection calls
// in the background once the free of the claim proves that the run ran
// (idempotency.RequestContext.Ran): the request is refused, and its retry
// is charged again. Without that proof nothing is given back (a charge
// never made, given back, would let the client past its limit). It
// copies what it reads: the request has ended when it runs. Nil for any
// other request: nothing is made on the usual path.
func (g *Gateway) lostRunRefund(st *requestState, rt *Route, cost int64) func() {
	if c := st.decision.Claim; !c.Sent || c.Run || c.Err == nil || rt == nil {
		return nil
	}
	limits, rr, d, id := g.limits, rt.limits, st.decision, st.id
	d.Claim = ratelimit.ClaimReply{}
	req := limiter.Request{Account: d.Account, TokenID: d.TokenID, Addr: st.addr, Cost: cost}
	return func() {
		// Right after the lost reply the limiter fails fast for its
		// backoff (250 ms by default): the give-back waits it out, 1.55 s
		// at most.
		for wait := 50 * time.Millisecond; ; wait *= 2 {
			err := limits.RefundLost(context.Background(), rr, req, &d)
			if err == nil {
				return
			}
			if !errors.Is(err, ratelimit.ErrStoreUnavailable) || wait > time.Second {
				g.log.Warn("rate-limit store failed; the charge of an order refused after its round trip's reply was lost was not given back",
					zap.String("request_id", id), zap.Error(err))
				return
			}
			time.Sleep(wait)
		}
	}
}

// answerClaim is the answer to a request whose claim came back as claim,
// or failed with err. A request its claim does not let through (a
// replay, a refusal, a failure) is charged nothing but its allowance of
// duplicate answers: what its limits charged moves there before the
// answer (a claim that rode with the limits charged only the allowance
// in the first place).
func (g *Gateway) answerClaim(st *requestState, r *http.Request, pl *requestPlan, claim idempotency.Claim, err error) *apierror.Error {
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
		st.claim.phase, st.claim.claim = claimHeld, claim
		return nil
	case idempotency.Replay:
		return g.replay(st, r, claim.Record)
	}
	g.metrics.Idempotency(idemMetric(claim.Outcome))
	if st.claim.elems != nil {
		return bulkClaimRefusal(claim.Outcome, st.claim.elems[claim.At])
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

// claimSettlement is how a held claim is settled.
type claimSettlement uint8

const (
	settleRelease  claimSettlement = iota // the order was certainly not placed: its identifiers are free again
	settleUnknown                         // the order may have been placed: never sent again
	settleComplete                        // the backend accepted it: its response is kept for replay
)

// settle settles the claim st holds, once: a claim already settled, or
// none, is left alone. rec is the response kept by settleComplete. The
// call has no deadline of its own: the store bounds it by its own
// (idempotency.Options.Timeout, idempotency.timeout as the gateway's), and
// a Redis store makes one context for the settling runs one round trip
// carries, where one here cost each order its timer.
func (g *Gateway) settle(st *requestState, how claimSettlement, rec idempotency.Record) {
	if st.claim.phase != claimHeld {
		return
	}
	st.claim.phase = claimSettled
	ctx := st.storeCtx(context.Background())
	var err error
	switch how {
	case settleRelease:
		err = g.idem.Release(ctx, st.claim.claim)
	case settleComplete:
		err = g.idem.Complete(ctx, st.claim.claim, rec)
	default:
		if err = g.idem.MarkUnknown(ctx, st.claim.claim); errors.Is(err, idempotency.ErrClaimLost) {
			err = nil
		}
	}
	if err != nil {
		g.log.Warn("duplicate protection: settling a claim failed", zap.String("request_id", st.id),
			zap.String("settlement", settlementNames[how]), zap.Error(err))
	}
}

var settlementNames = [...]string{settleRelease: "release", settleUnknown: "unknown", settleComplete: "complete"}

// settleFailed settles the claim of an order the backend did not answer:
// released when the request certainly never left exgate (its error says
// so, or net/http never had a connection for it: nothingSent), else
// recorded as an unknown outcome (it may have been placed).
func (g *Gateway) settleFailed(st *requestState, err error) {
	if err != nil && nothingSent(st, err) {
		g.settle(st, settleRelease, idempotency.Record{})
		return
	}
	g.settle(st, settleUnknown, idempotency.Record{})
}

// recordResponse, from ModifyResponse, settles the claim of an order as
// soon as the backend's response arrives, before it is written to the
// client: a client that hangs up must not leave the outcome unrecorded.
//
// Only an order the backend accepted (2xx) keeps its identifier, with the
// response for replay, its Location and Content-Location as the client
// gets them (unexposeInstance). An order it refused (4xx) was not placed: the
// identifier is released, so that refused orders — invented tokens,
// insufficient balance — cost the store nothing and a corrected order may
// reuse the identifier. A 5xx says nothing certain about the order (the
// backend may have failed after placing it), so, like a timeout, it is
// recorded as an unknown outcome and never sent twice; so is a 3xx, which
// refuses nothing: 303 See Other is how HTTP answers a POST that created
// something found elsewhere (a backend that redirects after placing the
// order), but no 3xx says that it did (a 307 or 308 asks for the order to
// be sent elsewhere), so none is replayed as the order's answer. A 2xx
// body longer
// than idempotency.max_response_bytes, one that cannot be read to its
// end, or one in a content coding (encoded: the backend compressed it
// although its request accepted none, identityEncoded) is recorded as an
// unknown outcome too.
//
// The body (up to idempotency.max_response_bytes) is read before anything
// is written to the client, whatever the status: a body the backend
// breaks off is then answered 502 (errOrderAnswerBroken, through
// ErrorHandler; 504 when the route's timeout cut it) instead of a dropped
// connection, which would leave the client with a bare EOF and no answer
// at all.
func (g *Gateway) recordResponse(st *requestState, res *http.Response) error {
	if st.claim.phase != claimHeld {
		return nil
	}
	if st.inst != nil {
		unexposeInstance(res.Header, st.inst.URL) // kept as it is answered
	}
	b, readErr := readAnswer(res.Body, g.idemMaxResp, res.ContentLength)
	st.claim.held = heldBody{held: b, rest: res.Body}
	res.Body = &st.claim.held
	switch {
	case res.StatusCode >= 400 && res.StatusCode < 500:
		g.metrics.Idempotency(metrics.IdempotencyReleased)
		g.settle(st, settleRelease, idempotency.Record{})
	case res.StatusCode/100 != 2 || readErr != nil || len(b) > g.idemMaxResp || encoded(res.Header): // a 5xx, a 3xx
		g.settle(st, settleUnknown, idempotency.Record{})
	default:
		ct := res.Header.Get("Content-Type")
		g.settle(st, settleComplete, idempotency.Record{Status: res.StatusCode, ContentType: ct,
			Header: keptHeaders(res.Header), Accept: acceptAsked(sentAccept(res), ct), Body: b})
	}
	if readErr != nil {
		return brokenAnswer{readErr}
	}
	return nil
}

// identityEncoded reports whether the request is an order its claim is
// held for, sent without the Accept-Encoding its client sent (net/http's
// clients, Python's requests and browsers send gzip unasked; sentAs), so
// that the backend answers the order in the identity encoding: the answer
// recorded for the order's identifiers is replayed to any retry of its
// account, with its status and Content-Type alone (idempotency.Record),
// and a gzipped body recorded would reach the retry as bytes it cannot
// read, whatever encodings the retry accepts. Only an order placed under
// a claim loses compression; its answer is short.
func (c *claimState) identityEncoded() bool {
	return c.phase == claimHeld
}

// encoded reports whether h, a response header, names a content coding
// other than identity: a body duplicate protection cannot replay, for
// its record keeps no Content-Encoding, nor could a retry be sure to
// accept it.
func encoded(h http.Header) bool {
	for _, v := range h["Content-Encoding"] {
		if v != "" && !asciiEqualFold(strings.TrimSpace(v), "identity") {
			return true
		}
	}
	return false
}

// readAnswer reads r, an order's response body, up to max+1 bytes: more
// than max says that the body is longer than duplicate protection keeps.
// A body of known length (size, 0 or more) up to max is read into one
// buffer of its size; err is the read's error, io.EOF excepted.
func readAnswer(r io.Reader, max int, size int64) ([]byte, error) {
	n := 512
	if size >= 0 && size <= int64(max) {
		n = int(size) + 1 // room to see the end without growing
	}
	b := make([]byte, 0, n)
	for len(b) <= max {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
		k, err := r.Read(b[len(b):min(cap(b), max+1)])
		b = b[:len(b)+k]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// heldBody is an order's response body whose first bytes, held, exgate
// read to record them: the client is served them, then the rest.
type heldBody struct {
	held []byte
	rest io.ReadCloser
}

func (h *heldBody) Read(p []byte) (int, error) {
	if len(h.held) > 0 {
		n := copy(p, h.held)
		h.held = h.held[n:]
		return n, nil
	}
	return h.rest.Read(p)
}

func (h *heldBody) Close() error { return h.rest.Close() }

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
