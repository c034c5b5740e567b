package proxy

import (
	"net/http"

	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/topk"
)

// enforceLimits decides the limits of rt (the request's route, or the
// route a bulk is charged against) for a request of the given cost, sets
// the rate-limit headers and records the decision in ex. It returns false
// when it has refused the request itself (429, or 503 when the store
// failed on a route that fails closed).
func (g *Gateway) enforceLimits(ex *exchange, r *http.Request, pl *plan, rt *Route, cost int64) bool {
	if g.limits == nil || !rt.limits.Limited() {
		return true
	}
	ex.limited = true
	d := &ex.decision
	req := ex.limitRequest()
	req.Cost = cost
	g.limits.Decide(r.Context(), rt.limits, req, d)
	if rt.limitMetrics != nil {
		for i := 0; i < d.N; i++ {
			o := &d.Outcomes[i]
			rt.limitMetrics[o.Index][o.Tier].Observe(o.Decision, o.Fallback)
		}
	}
	if g.top != nil {
		var id topk.Identity
		switch {
		case d.Account != "":
			id = topk.Identity{Kind: "account", ID: d.Account}
		case d.TokenID != "":
			id = topk.Identity{Kind: "token", ID: d.TokenID}
		}
		g.top.Record(ex.start, rt.Name, id, ex.addr, !d.Allowed)
	}
	d.SetHeaders(ex.rw.Header(), pl.rules.Headers())
	if d.Allowed {
		return true
	}
	switch {
	case d.Unavailable:
		g.refuse(ex, r, errLimitsUnavailable)
	case d.TooManyTokens:
		g.refuse(ex, r, tooManyTokens(limiter.Seconds(d.RetryAfter)))
	default:
		g.refuse(ex, r, throttled(limiter.Seconds(d.RetryAfter)))
	}
	return false
}
