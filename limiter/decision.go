package limiter

import (
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// Verdict is what one limit decided for one request. Logs, traces and
// metrics name it by String; metrics count each verdict in a counter of
// its own (metrics.LimitMetrics.Observe takes a Verdict), so a verdict
// added here is counted without a string to keep equal by hand.
type Verdict uint8

// The verdicts of one limit.
const (
	// Allowed: the limit let the request through and charged it.
	Allowed Verdict = iota
	// Limited: the limit refused the request (429, or 503 when the store
	// failed with on_store_error: closed).
	Limited
	// ShadowLimited: a shadow limit would have refused the request, which
	// went on.
	ShadowLimited
	// ExceedsBurst is a refusal no wait would lift: the request costs more
	// (a bulk of more orders) than the limit's burst.
	ExceedsBurst
	// NumVerdicts is the number of verdicts.
	NumVerdicts
)

var verdictNames = [NumVerdicts]string{"allowed", "limited", "shadow_limited", "exceeds_burst"}

// String returns the verdict as logs, traces and metrics label it:
// "allowed", "limited", "shadow_limited" or "exceeds_burst".
func (v Verdict) String() string {
	if v < NumVerdicts {
		return verdictNames[v]
	}
	return "unknown"
}

// maxOutcomes is how many limits of one route a Decision records inline:
// as many as configuration allows a route (config.MaxRouteLimits refuses
// more at load), so that every limit is reported, counted and refunded.
const maxOutcomes = config.MaxRouteLimits

// Outcome is what one limit decided for one request.
type Outcome struct {
	// Index is the limit's position among the route's limits.
	Index int
	// Limit is the limit's name.
	Limit string
	// Tier is the caller's tier (Decision.Tier) when the limit counts by
	// token or account, whether or not that tier overrides this limit;
	// "" for a limit by address (tiers never apply to one) and for a
	// caller without a tier.
	Tier string
	// Decision is what the limit decided.
	Decision Verdict
	// Fallback is the on_store_error mode used because the store failed
	// ("open", "closed" or "local"), or "" when the store decided.
	Fallback string
	// Result is the limiter's answer (zero when Fallback is open or closed).
	Result ratelimit.Result

	v *variant
}

// wait is how long the outcome's limit takes to recover: the retry
// delay of a denial, else the time until a full burst.
func (o *Outcome) wait() time.Duration {
	if o.Decision != Allowed {
		return o.Result.RetryAfter
	}
	return o.Result.ResetAfter
}

// Decision is the outcome of every limit of a route for one request.
type Decision struct {
	// Allowed reports whether the request may pass. A shadow limit never
	// makes it false.
	Allowed bool
	// Unavailable reports that the store failed on a route whose
	// on_store_error is "closed", or on one whose on_store_error is
	// "local" for a request costing more than this replica's share of a
	// limit's burst but not more than the burst: answer 503.
	Unavailable bool
	// RetryAfter is how long the client should wait when !Allowed; 0
	// when no wait helps (Unavailable, ExceedsBurst).
	RetryAfter time.Duration
	// ExceedsBurst reports a refusal no wait would lift: the request's
	// cost (a bulk's orders) is above the burst of a limit that applies
	// to it, so it can never pass at that size. MaxCost is then the
	// largest cost that every limit applying to the request lets pass
	// (the smallest of their bursts): the size to split it into.
	ExceedsBurst bool
	// MaxCost is the largest cost the request's limits let pass, when
	// ExceedsBurst; else 0.
	MaxCost int64
	// TokenID is the id of the request's opaque token, or "".
	TokenID string
	// Account is the key of the request's verified account, or "".
	Account string
	// Tier is the token's or the account's tier, or "".
	Tier string
	// Demoted reports that the token was counted as anonymous because its
	// address presented too many distinct tokens.
	Demoted bool
	// TooManyTokens reports a refusal that comes from the demotion: a
	// limit that applied only because the token was demoted (the shared
	// bucket of an address's excess tokens, or an anonymous-only limit)
	// is spent, not the token's own. RetryAfter is then at most the time
	// until the address's token window ends, when the token may count as
	// its own again.
	TooManyTokens bool
	// Claim is what Request.Claim came to: not sent (Claim.Sent false)
	// when the store did not decide the request in Redis.
	Claim ratelimit.ClaimReply
	// Uncharged reports an allowed request whose claim ran and did not
	// take its identifiers (a duplicate, a refusal): it was charged
	// nothing but its allowance of duplicate answers, and Outcomes say
	// what the limits hold without it (and the allowance with it).
	Uncharged bool
	// Undecided reports a Request.CacheOnly that the deny cache could not
	// decide: nothing was decided or charged.
	Undecided bool
	// N is the number of Outcomes recorded.
	N int
	// Outcomes are the decisions of the limits that applied, in order.
	// Their Results describe each limit as the store holds it after the
	// decision: charged when the request was allowed, uncharged when it
	// was refused (ratelimit.Result.Uncharged) or its charge given back.
	Outcomes [maxOutcomes]Outcome

	cost int64       // what the request cost in each limit (at least 1)
	kept *chargePlan // the plan of an undecided CacheOnly request, for the next Decide
	// guardLost says that the store failed a round trip that carried the
	// spray guard: what the store answered it, and so which limits it
	// charged, is unknown (RefundLost).
	guardLost bool
}

// Identity returns the key the request's caller is counted by: the
// verified account's key, else the opaque token's id, else "" for an
// anonymous request. Duplicate protection keys identifiers by it.
func (d *Decision) Identity() string {
	if d.Account != "" {
		return d.Account
	}
	return d.TokenID
}

// Reset makes d the zero Decision, clearing only the outcomes it
// recorded: those past N are zero already, since outcomes are only ever
// appended. Most of a Decision's kilobyte is outcomes a route never uses,
// and clearing memory that holds pointers costs a write barrier on every
// pointer while the collector marks.
func (d *Decision) Reset() {
	clear(d.Outcomes[:d.N])
	d.Allowed, d.Unavailable, d.RetryAfter, d.ExceedsBurst, d.MaxCost = false, false, 0, false, 0
	d.TokenID, d.Account, d.Tier, d.Demoted, d.TooManyTokens = "", "", "", false, false
	d.Claim, d.Uncharged, d.Undecided, d.N = ratelimit.ClaimReply{}, false, false, 0
	d.cost, d.kept, d.guardLost = 0, nil, false
}

// record appends o, unless maxOutcomes are recorded already (a route of
// more limits than configuration allows, built without its checks).
func (d *Decision) record(o Outcome) {
	if d.N == maxOutcomes {
		return
	}
	d.Outcomes[d.N] = o
	d.N++
}

// refuse records o, the outcome of limit r (check m of plan p) that
// refused the request, and what the refusal says: a demoted token's
// refusal by a limit not its own, a bulk over a limit's burst (or over
// only this replica's share of it, under the local fallback). Nothing
// was charged.
func (d *Decision) refuse(o Outcome, r *rule, p *chargePlan, m *checkMeta, fallback string, demotedFor time.Duration) {
	d.Allowed = false
	d.RetryAfter = o.Result.RetryAfter
	switch {
	case d.Demoted && (r.byToken || r.when == config.WhenAnon):
		// Not the token's own limit: say so, and never ask for a
		// wait beyond the demotion (nor tell one in its fields).
		d.TooManyTokens = true
		d.RetryAfter = min(d.RetryAfter, demotedFor)
		o.Decision = Limited
		o.Result.RetryAfter = d.RetryAfter
	case o.Decision == ExceedsBurst && fallback == config.StoreLocal && p.req.Cost <= m.v.limit.Burst:
		// Over this replica's share of the limit only: the shared
		// store would let it pass, so it waits for the store.
		d.RetryAfter, d.Unavailable = 0, true
		o.Decision = Limited
	case o.Decision == ExceedsBurst:
		d.RetryAfter, d.ExceedsBurst, d.MaxCost = 0, true, p.maxCost(p.ans.Admitted)
	}
	d.record(o)
	d.uncharge(true, true) // all or nothing: the limits that allowed it charged nothing either
}

// uncharge turns the recorded outcomes' Results into what their limits
// hold without the request (ratelimit.Result.Uncharged): it was refused,
// or its charge was given back, or (for the allowance of duplicate
// answers) it was not answered as a duplicate. answers and others say
// which outcomes: the allowance's, the other limits'. A limit the store
// could not decide (open or closed) has no state to tell.
func (d *Decision) uncharge(answers, others bool) {
	for k := 0; k < d.N; k++ {
		o := &d.Outcomes[k]
		if o.v.answers && !answers || !o.v.answers && !others {
			continue
		}
		if l, ok := o.heldBy(); ok {
			o.Result = o.Result.Uncharged(l, d.cost)
		}
	}
}

// chargeAnswers turns the recorded Results of the allowance of duplicate
// answers into what it holds once the request is charged to it
// (ratelimit.Result.Charged).
func (d *Decision) chargeAnswers() {
	for k := 0; k < d.N; k++ {
		o := &d.Outcomes[k]
		if !o.v.answers || o.Decision != Allowed {
			continue
		}
		if l, ok := o.heldBy(); ok {
			o.Result = o.Result.Charged(l, d.cost)
		}
	}
}

// heldBy returns the limit whose state o's Result tells: the store's,
// or the local fallback's share when the store failed over to it; false
// for a limit the store could not decide (open or closed), which has no
// state to tell.
func (o *Outcome) heldBy() (ratelimit.Limit, bool) {
	switch o.Fallback {
	case "":
		return o.v.limit, true
	case config.StoreLocal:
		return o.v.local, true
	}
	return ratelimit.Limit{}, false
}

// outcomeOf returns the recorded outcome of the route's limit i, or nil.
func (d *Decision) outcomeOf(i int) *Outcome {
	for k := 0; k < d.N; k++ {
		if d.Outcomes[k].Index == i {
			return &d.Outcomes[k]
		}
	}
	return nil
}
