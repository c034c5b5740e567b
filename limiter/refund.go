package limiter

import (
	"context"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// Refund gives back what Decide charged the allowed request req, decided
// as d under the route's rules rr, as if it had never been made: its cost
// in every limit that charged it, on the store or, when the store had
// failed and the route fell back to local limits, in process. A request
// that was refused, a shadow limit that refused, and a limit the store
// could not decide (on_store_error open or closed) charged nothing. The
// limits recorded in d's Outcomes are given back (every limit of a route
// configuration accepts: config.MaxRouteLimits). An error means the
// store could not be reached; the charge then stands, and the failure is
// counted and logged (at most once a second) as the store's. Once the
// charge is given back, d's Outcomes describe the limits without the
// request, so that the answer's rate-limit fields (SetHeaders) tell the
// client what its next request will find.
func (e *Enforcer) Refund(ctx context.Context, rr *RouteRules, req Request, d *Decision) error {
	return e.giveBack(ctx, rr, req, d, false)
}

// RefundLost gives back, in the store, what it charged the request req
// (decided as d under rr) in a round trip whose reply was lost: d's
// outcomes are the fallback's, and the store may have charged it or not.
// Call it only once that is known: duplicate protection's free of the
// claim that rode in the same script run found the claim its holder
// took, and a claim runs only after the run's limits let the request
// pass (idempotency.RequestContext.Ran; not in a Redis Cluster, where
// limits run beside the claim, on other masters). It gives back only what
// the run certainly charged: every limit that applies to the request as
// d settled it, at req.Cost, but not a shadow limit (which may have
// refused and charged nothing), nor the allowance of duplicate answers
// (charged only by a claim that took nothing), and nothing when the run
// carried the spray guard, whose answer, and so the limits it chose, was
// lost too. Less than was charged is given back, never more: no bypass.
func (e *Enforcer) RefundLost(ctx context.Context, rr *RouteRules, req Request, d *Decision) error {
	if d.guardLost || !rr.Limited() {
		return nil
	}
	p := e.plans.Get().(*chargePlan)
	defer e.plans.Put(p)
	p.rebuild(rr, req, d, true, false)
	n := 0
	for _, c := range p.req.Checks {
		if c.Shadow || c.Branch != ratelimit.Always {
			continue
		}
		p.req.Checks[n] = c
		n++
	}
	p.req.Checks = p.req.Checks[:n]
	if n == 0 {
		return nil
	}
	return e.store.Refund(ctx, &p.req)
}

// Uncharge is Refund for a request duplicate protection answered instead
// of letting it through (a replay, a 409, a 503 of its store): its charge
// moves to the route's allowance of duplicate answers, which is charged
// its cost (ratelimit.Check.Allowance) in the same store call, when
// Decide decided it (Request.Claims).
func (e *Enforcer) Uncharge(ctx context.Context, rr *RouteRules, req Request, d *Decision) error {
	return e.giveBack(ctx, rr, req, d, true)
}

// giveBack gives back what Decide charged d's request (Refund) and, with
// answered, charges its allowance of duplicate answers (Uncharge).
func (e *Enforcer) giveBack(ctx context.Context, rr *RouteRules, req Request, d *Decision, answered bool) error {
	if !d.Allowed || d.N == 0 || !rr.Limited() {
		return nil
	}
	p := e.plans.Get().(*chargePlan)
	defer e.plans.Put(p)
	p.rebuild(rr, req, d, false, answered)
	local, n := false, 0
	for j := range p.req.Checks {
		o := d.outcomeOf(p.meta[j].limit)
		if o == nil || o.Decision != Allowed {
			continue
		}
		switch o.Fallback {
		case "":
		case config.StoreLocal:
			local = true
			p.req.Checks[j].Limit = p.meta[j].v.local
		default:
			continue // open or closed: nothing was decided
		}
		p.req.Checks[n] = p.req.Checks[j]
		n++
	}
	p.req.Checks = p.req.Checks[:n]
	var err error
	switch {
	case n == 0:
		return nil
	case local:
		err = e.local.Refund(ctx, &p.req)
	default:
		if err = e.store.Refund(ctx, &p.req); err != nil {
			e.warn("rate-limit store failed; a request's charge could not be given back", err, zap.String("route", rr.Name))
		}
	}
	if err == nil {
		d.uncharge(false, true)
		if answered {
			d.chargeAnswers()
		}
	}
	return err
}
