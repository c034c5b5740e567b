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
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/validate"
)

// orderState is the validation and duplicate-protection state of one
// order request, kept in its exchange.
type orderState struct {
	body    *[]byte // pooled buffer holding the body, or nil
	claimed bool    // a claim is held and must be settled
	settled bool
	claim   idempotency.Claim
	more    []idempotency.Claim // a bulk's claims after the first, settled with it
}

// bodyPool holds order body buffers (validation.max_body_bytes is small).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// Duplicate-protection answers, and the answer to a body that could not
// be read.
var (
	errIdemInProgress  = idempotency.Refusal(idempotency.InProgress)
	errIdemConflict    = idempotency.Refusal(idempotency.Conflict)
	errIdemUnknown     = idempotency.Refusal(idempotency.Unknown)
	errIdemUnavailable = idempotency.Unavailable()
	errIdemFull        = idempotency.Full()
	errIdemAccountFull = idempotency.AccountFull()
	errBodyUnreadable  = apierror.Static(http.StatusBadRequest, "invalid_body", "Request body could not be read.")
)

// checkOrder validates an order request and claims its identifier. It
// returns false when it has answered the request itself; otherwise the
// request's body is the order's canonical encoding (forwardCanonical),
// whose fingerprint duplicate protection compares. The caller's identity
// key (an HMAC for an opaque token) is worked out only for an order that
// carries an identifier, and reused when the limits already did.
func (g *Gateway) checkOrder(ex *exchange, r *http.Request, v *validate.Validator) bool {
	if p := v.PreCheck(r.Header["Content-Type"], r.ContentLength); p != nil {
		g.metrics.ValidationRejected(p.Code)
		g.refuse(ex, r, p)
		return false
	}
	if !g.reserveBody(ex, r, v.MaxBodyBytes()) {
		return false
	}
	bp := bodyPool.Get().(*[]byte)
	ex.order.body = bp
	body, tooBig, err := readBody((*bp)[:0], r.Body, v.MaxBodyBytes())
	*bp = body[:0]
	if tooBig {
		p := v.PreCheck(r.Header["Content-Type"], v.MaxBodyBytes()+1)
		g.metrics.ValidationRejected(p.Code)
		ex.rw.Header()["Connection"] = connClose // the rest of the body stays unread
		g.reject(ex, p)
		return false
	}
	if err != nil {
		g.reject(ex, errBodyUnreadable)
		return false
	}
	order, p := v.Check(r.Header["Content-Type"], body)
	if p != nil {
		g.metrics.ValidationRejected(p.Code)
		g.reject(ex, p)
		return false
	}
	body = forwardCanonical(ex, r, &order)

	if order.Identifier == "" || g.idem == nil {
		return true
	}
	identityKey := g.identityKey(ex)
	if identityKey == "" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.idemTimeout)
	defer cancel()
	claim, err := g.idem.Claim(ctx, idempotency.Key{Account: identityKey, Identifier: order.Identifier}, idempotency.FingerprintOf(body))
	if err != nil {
		g.refuseClaim(ex, err)
		return false
	}
	switch claim.Outcome {
	case idempotency.Claimed:
		g.metrics.Idempotency(metrics.IdempotencyClaimed)
		ex.order.claimed, ex.order.claim = true, claim
		return true
	case idempotency.Replay:
		g.metrics.Idempotency(metrics.IdempotencyReplayed)
		g.replay(ex, claim.Record)
	case idempotency.InProgress:
		g.metrics.Idempotency(metrics.IdempotencyInProgress)
		g.reject(ex, errIdemInProgress)
	case idempotency.Conflict:
		g.metrics.Idempotency(metrics.IdempotencyConflict)
		g.reject(ex, errIdemConflict)
	default:
		g.metrics.Idempotency(metrics.IdempotencyUnknown)
		g.reject(ex, errIdemUnknown)
	}
	return false
}

// refuseClaim answers an order whose identifier could not be claimed,
// saying why: the account's share is full (only that account is
// refused), the store is full, or the store failed.
func (g *Gateway) refuseClaim(ex *exchange, err error) {
	switch {
	case errors.Is(err, idempotency.ErrAccountFull):
		g.metrics.Idempotency(metrics.IdempotencyAccountFull)
		g.reject(ex, errIdemAccountFull)
	case errors.Is(err, idempotency.ErrFull):
		g.metrics.Idempotency(metrics.IdempotencyStoreFull)
		g.log.Warn("duplicate protection store full; order refused", zap.String("request_id", ex.id), zap.Error(err))
		g.reject(ex, errIdemFull)
	default:
		g.metrics.Idempotency(metrics.IdempotencyStoreError)
		g.log.Warn("duplicate protection store failed; order refused", zap.String("request_id", ex.id), zap.Error(err))
		g.reject(ex, errIdemUnavailable)
	}
}

// readBody reads r into dst, at most max bytes. tooBig reports a body
// longer than max (only max+1 bytes are read).
func readBody(dst []byte, r io.Reader, max int64) (body []byte, tooBig bool, err error) {
	if r == nil || r == http.NoBody {
		return dst, false, nil
	}
	for {
		if int64(len(dst)) > max {
			return dst, true, nil
		}
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), int(max)+1)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, int64(len(dst)) > max, nil
		}
		if err != nil {
			return dst, false, err
		}
	}
}

// replay answers with the response recorded for an identifier.
func (g *Gateway) replay(ex *exchange, rec *idempotency.Record) {
	h := ex.rw.Header()
	if rec.ContentType != "" {
		h["Content-Type"] = []string{rec.ContentType}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	h[idempotency.ReplayedHeader] = []string{"true"}
	h["X-Request-Id"] = []string{ex.id}
	ex.rw.WriteHeader(rec.Status)
	_, _ = ex.rw.Write(rec.Body)
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
func (g *Gateway) recordResponse(res *http.Response) error {
	ex, _ := res.Request.Context().Value(claimKey{}).(*exchange)
	if ex == nil || !ex.order.claimed || ex.order.settled {
		return nil
	}
	ex.order.settled = true
	if res.StatusCode >= 300 {
		ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
		defer cancel()
		if res.StatusCode >= 500 {
			g.settleUnknown(ctx, ex)
			return nil
		}
		g.metrics.Idempotency(metrics.IdempotencyReleased)
		if err := g.releaseClaims(ctx, ex); err != nil {
			g.log.Warn("duplicate protection: releasing a refused order's claim failed", zap.String("request_id", ex.id), zap.Error(err))
		}
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, int64(g.idemMaxResp)+1))
	rest := res.Body
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	if err != nil || len(b) > g.idemMaxResp {
		g.settleUnknown(ctx, ex)
		return nil
	}
	rec := idempotency.Record{Status: res.StatusCode, ContentType: res.Header.Get("Content-Type"), Body: b}
	if err := g.completeClaims(ctx, ex, rec); err != nil {
		g.log.Warn("duplicate protection: recording the response failed", zap.String("request_id", ex.id), zap.Error(err))
	}
	return nil
}

// settleFailed settles the claim of an order the backend did not answer:
// released when the request certainly never left exgate, else recorded as
// an unknown outcome (it may have been placed).
func (g *Gateway) settleFailed(ex *exchange, err error) {
	if !ex.order.claimed || ex.order.settled {
		return
	}
	ex.order.settled = true
	ctx, cancel := context.WithTimeout(context.Background(), g.idemTimeout)
	defer cancel()
	if err != nil && idempotency.NotSent(err) {
		if err := g.releaseClaims(ctx, ex); err != nil {
			g.log.Warn("duplicate protection: releasing a claim failed", zap.String("request_id", ex.id), zap.Error(err))
		}
		return
	}
	g.settleUnknown(ctx, ex)
}

func (g *Gateway) settleUnknown(ctx context.Context, ex *exchange) {
	if err := g.unknownClaims(ctx, ex); err != nil && !errors.Is(err, idempotency.ErrClaimLost) {
		g.log.Warn("duplicate protection: recording an unknown outcome failed", zap.String("request_id", ex.id), zap.Error(err))
	}
}

func putBody(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		bodyPool.Put(bp)
	}
}

// releaseOrder returns the body buffer of an order (the client's bytes)
// to its pool; the backend is sent the canonical body, a buffer of its own.
func (ex *exchange) releaseOrder() {
	if bp := ex.order.body; bp != nil {
		ex.order.body = nil
		putBody(bp)
	}
}

// idemDefaultTimeout bounds duplicate-protection store calls when the
// configuration does not.
const idemDefaultTimeout = 100 * time.Millisecond
