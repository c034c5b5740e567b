package proxy

import (
	"net/http"
	"time"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/topk"
)

// enforceLimits decides the limits of rt (the request's route, or the
// route a bulk is charged against) for a request of the given cost, with
// an order's identifier claim riding in the same round trip when claim
// is set (st.decision.Claim says what it came to), sets the rate-limit
// headers and records the decision in st. It returns the
// refusal of a request over a limit (429), of a bulk larger than a limit's
// burst, which no wait would let pass (413, exceedsBurst), or of one whose
// store failed on a route that fails closed (503), or nil.
func (g *Gateway) enforceLimits(st *requestState, r *http.Request, pl *requestPlan, rt *Route, cost int64, claim *ratelimit.ClaimPart) *apierror.Error {
	if g.limits == nil || !rt.limits.Limited() {
		return nil
	}
	req := st.limitRequest()
	req.Cost, req.Claim, req.Claims = cost, claim, st.claim.answerable
	var t0 time.Time
	if st.rec {
		t0 = g.now()
	}
	g.decide(st, r, rt.limits, req)
	if st.rec {
		g.traceLimits(st, rt, cost, t0, false)
	}
	return g.limitAnswer(st, pl, rt, cost)
}

// decide decides the limits rules for req into st.decision, and keeps
// the id of the request's token for the next requests of its connection
// (tokenMemo).
func (g *Gateway) decide(st *requestState, r *http.Request, rules *limiter.RouteRules, req limiter.Request) {
	g.limits.Decide(r.Context(), rules, req, &st.decision)
	st.rememberTokenID(st.decision.TokenID)
}

// refusedFromCache refuses, as enforceLimits would, a request the deny
// cache of its route's limits knows to be refused, before anything else
// is decided or read: an order route whose claims ride with its limits
// reads the order before deciding them, and a throttled client's order is
// not read. Any other request goes on, charged nothing.
func (g *Gateway) refusedFromCache(st *requestState, r *http.Request, pl *requestPlan) *apierror.Error {
	req := st.limitRequest()
	req.CacheOnly = true
	g.decide(st, r, st.route.limits, req)
	if st.decision.Undecided || st.decision.Allowed {
		return nil
	}
	if st.rec {
		g.traceLimits(st, st.route, 1, time.Time{}, true)
	}
	return g.limitAnswer(st, pl, st.route, 1)
}

// bulkRefusedFromCache refuses, before its body is read, a bulk whose
// client the deny caches of both its targets know to be refused: neither
// a placement nor a cancel of it could pass. It is answered as the target
// that frees first would answer it. Any other bulk goes on to be read,
// its bytes taken from its client's share as they arrive, charged nothing
// yet: its cost, and whether it is a placement or a cancel, are in its
// body, and it is charged them whole once its body is read (checkBulk).
func (g *Gateway) bulkRefusedFromCache(st *requestState, r *http.Request, pl *requestPlan) *apierror.Error {
	if g.limits == nil {
		return nil
	}
	var best *Route
	var d limiter.Decision
	for _, rt := range [...]*Route{st.route.bulk.cancels, st.route.bulk.orders} {
		if rt == nil || !rt.limits.Limited() {
			return nil // no limit could refuse a bulk of this kind
		}
		req := st.limitRequest()
		req.CacheOnly = true
		g.decide(st, r, rt.limits, req)
		if st.decision.Undecided || st.decision.Allowed {
			return nil
		}
		if best == nil || st.decision.RetryAfter < d.RetryAfter {
			best, d = rt, st.decision
		}
	}
	st.decision = d
	return g.limitAnswer(st, pl, best, 1)
}

// limitAnswer records the decision of rt's limits in st (metrics, the
// operator console, the rate-limit headers) and returns its refusal, or
// nil.
func (g *Gateway) limitAnswer(st *requestState, pl *requestPlan, rt *Route, cost int64) *apierror.Error {
	st.limitsDecided = true
	d := &st.decision
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
		g.top.Record(st.start, rt.Name, id, clientip.AddrGroup(st.addr, pl.v6Prefix), !d.Allowed) // the client as the limits count it
	}
	st.setLimitFields(d, pl.rules.Headers())
	switch {
	case d.Allowed:
		if !d.Uncharged { // a claim that rode with the limits and took nothing charged nothing
			st.charged, st.cost = rt, cost
		}
		return nil
	case d.Unavailable:
		return errLimitsUnavailable
	case d.TooManyTokens:
		return tooManyTokens(limiter.Seconds(d.RetryAfter))
	case d.ExceedsBurst:
		return exceedsBurst(cost, d.MaxCost, st.bulkCancel || st.route.maxIDs > 0)
	}
	return throttled(limiter.Seconds(d.RetryAfter))
}

// setLimitFields writes d's rate-limit fields into st's answer in style
// (limiter.headers) and remembers whether they are the legacy ones:
// modifyResponse merges the backend's with those alone, and looks for
// none in the answer of any other style.
func (st *requestState) setLimitFields(d *limiter.Decision, style string) {
	d.SetHeaders(st.rw.Header(), style)
	st.legacyFields = style == config.HeadersLegacy
}
