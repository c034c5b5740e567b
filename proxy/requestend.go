package proxy

import (
	"net/http"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/metrics"
)

// finish ends the request and returns st to the pool. A panic from a
// handler is logged; http.ErrAbortHandler (the backend broke off a
// response already under way) is passed on so the server drops the
// connection, anything else is answered 500.
func (g *Gateway) finish(st *requestState, r *http.Request) {
	switch p := recover(); {
	case p == nil:
	case p == http.ErrAbortHandler:
		if st.rw.status == 0 {
			st.rw.status = StatusClientClosed
		}
		if st.route != nil {
			kind := metrics.UpstreamReset
			if st.clientCx.Err() != nil {
				kind = metrics.UpstreamClientGone
			}
			st.route.metrics.UpstreamError(kind)
		}
		g.end(st, r, zap.Bool("aborted", true))
		panic(p)
	default:
		g.log.Error("panic serving request",
			zap.String("request_id", st.id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		if st.rw.status == 0 {
			g.refuse(st, r, apierror.Internal())
		}
	}
	if st.rw.status == 0 {
		st.rw.status = http.StatusOK // net/http's answer when nothing was written
	}
	g.end(st, r)
	g.clear(st)
	g.pool.Put(st)
}

// end gives back what the request holds — a claim still held here is
// settled as of unknown outcome (it may have been placed), then the
// backend slot, the body buffers and their budget — records it in the
// metrics and the access log, ends its spans and its call at its backend
// instance.
func (g *Gateway) end(st *requestState, r *http.Request, extra ...zap.Field) {
	g.settle(st, settleUnknown, idempotency.Record{})
	g.releaseHolds(st)
	var done time.Time // when the request ended, read once for all that record it
	if g.metrics != nil || g.access || st.rec {
		done = g.nowSince(st.start)
	}
	g.observe(st, r, done)
	g.logAccess(st, r, done, extra...)
	if st.rec {
		g.endSpans(st, r, done)
	}
	g.instanceDone(st, r)
}

// releaseHolds gives back what st holds of the shared pools: its backend
// slot and its route's, the pooled buffers its body was read into and the
// bytes of the body budget they took.
func (g *Gateway) releaseHolds(st *requestState) {
	g.releaseSlot(st)
	st.releaseBodyBuffers()
	g.budget.Give(st.client, st.buffered)
}

// observe records the request, ended at done, in the metrics.
func (g *Gateway) observe(st *requestState, r *http.Request, done time.Time) {
	g.metrics.DecInflight()
	if g.metrics == nil {
		return
	}
	rm := g.unrouted
	if st.route != nil {
		rm = st.route.metrics
	}
	if st.rec {
		rm.ObserveRequestTraced(r.Method, st.rw.status, done.Sub(st.start), st.span.SpanContext().TraceID())
		return
	}
	rm.ObserveRequest(r.Method, st.rw.status, done.Sub(st.start))
}
