package limiter

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/expiring"
	"github.com/exgate/exgate/internal/lograte"
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

// Request is what the limits of a route look at.
type Request struct {
	// Token is the request's opaque bearer token, or "" for none. It is
	// ignored when Account is set.
	Token string
	// TokenID is Token's id (TokenID) when the caller knows it already
	// (from an earlier decision of the same request, or of an earlier
	// request with the same token), so that it is not worked out again;
	// "" has Decide work it out. It must be Token's id under the
	// Enforcer's key secret.
	TokenID string
	// Account is the key of the verified account behind the request's
	// token (identity.Identity.Account), or "" without verification.
	Account string
	// User is the verified account's user claim, looked up in the users
	// file for a tier. Never stored or logged.
	User string
	// Tier is the tier the token's tier claim names, or "".
	Tier string
	// Addr is the client address (already derived from trusted proxies).
	Addr netip.Addr
	// Cost is how many requests this one counts as in every limit (a
	// bulk of Cost orders); 0 means 1. All or nothing: a request that
	// does not fit whole is refused and charges nothing.
	Cost int64
	// Claim, when set, is an order's identifier claim, run in the store's
	// round trip when the limits let the request pass
	// (ratelimit.ClaimPart); Decision.Claim says what it came to.
	Claim *ratelimit.ClaimPart
	// CacheOnly decides only from the store's deny cache
	// (ratelimit.Request.CacheOnly): a request the cache knows to be
	// refused is refused as Decide would; any other is left undecided
	// (Decision.Undecided), charged nothing.
	CacheOnly bool
	// Claims reports a request duplicate protection may answer after its
	// limits (its identifiers claimed on their own, after Decide): its
	// limits include the route's allowance of duplicate answers, which
	// Uncharge charges when it is so answered. A request with a Claim,
	// and a CacheOnly one, include it too; any other is decided without
	// it (nothing can answer it without placing it: it is charged).
	Claims bool
}

// answers reports whether req's limits include the route's allowance of
// duplicate answers.
func (req *Request) answers() bool { return req.Claim != nil || req.CacheOnly || req.Claims }

// EnforcerOptions are an Enforcer's dependencies. Store is required.
type EnforcerOptions struct {
	// Store decides against the shared limits: a Redis limiter (usually
	// behind a DenyCache) or a Memory limiter.
	Store ratelimit.Store
	// Local is the in-process limiter used when the store fails on a
	// route whose on_store_error is "local". Nil means a new Memory
	// limiter of LocalMaxKeys keys.
	Local *ratelimit.Memory
	// LocalMaxKeys bounds Local when it is made here. Zero means 1,000,000.
	LocalMaxKeys int
	// Keyer turns tokens into ids. Required.
	Keyer *Keyer
	// Logger receives store-failure warnings, at most one per second. Nil
	// means none.
	Logger *zap.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Enforcer applies compiled Rules to requests. It is safe for concurrent
// use and outlives reloads: the Rules are passed with each request.
type Enforcer struct {
	store      ratelimit.Store
	local      *ratelimit.Memory
	sprayCache *expiring.Map[bool]
	seed       maphash.Seed
	keyer      *Keyer
	log        *zap.Logger
	now        func() time.Time
	plans      sync.Pool

	warnRate lograte.OncePerSecond
}

// NewEnforcer returns an Enforcer.
func NewEnforcer(o EnforcerOptions) (*Enforcer, error) {
	if o.Store == nil || o.Keyer == nil {
		return nil, errors.New("limiter: an Enforcer needs a Store and a Keyer")
	}
	e := &Enforcer{
		store: o.Store, local: o.Local, keyer: o.Keyer, log: o.Logger, now: o.Now,
		seed:       maphash.MakeSeed(),
		sprayCache: expiring.New[bool](100000),
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	if e.local == nil {
		e.local = ratelimit.NewMemory(ratelimit.MemoryOptions{Now: e.now, MaxKeys: o.LocalMaxKeys})
	}
	e.plans.New = func() any { return new(chargePlan) }
	return e, nil
}

// TokenID returns the id of token under the Enforcer's key secret.
func (e *Enforcer) TokenID(token string) string { return e.keyer.ID(token) }

// AccountID returns the key of the account with the given user claim
// under the Enforcer's key secret.
func (e *Enforcer) AccountID(user string) string { return e.keyer.AccountID(user) }

// Decide applies the route's limits to req and fills d. A route without
// limits allows everything. Every limit that applies, and the token-spray
// guard when its answer is not known yet, are decided by the store at
// once (one round trip to Redis), all or nothing: a request one limit
// refuses is charged in none. Outcomes are recorded in the order of the
// limits, up to the first that refuses (and is not a shadow limit).
//
// A CacheOnly request the deny cache could not decide leaves its plan
// (the keys of its limits, its guard) in d, and the next Decide of the
// same route with d, for the same request, decides that plan instead of
// building it again, without looking it up in the deny cache again
// (ratelimit.Request.CacheAsked): an order whose claim rides with its
// limits is looked up in the deny cache before its body is read, and
// decided after.
func (e *Enforcer) Decide(ctx context.Context, rr *RouteRules, req Request, d *Decision) {
	kept := d.kept
	d.Reset()
	d.Allowed, d.cost = true, max(req.Cost, 1)
	var p *chargePlan
	asked := false // p's checks were just looked up in the deny cache
	switch {
	case kept != nil && kept.rr == rr && kept.req.Cost == d.cost && !req.CacheOnly:
		p, asked = kept, true
		d.Account, d.TokenID, d.Tier, d.Demoted = p.account, p.tokenID, p.tier, p.demoted
		if !req.answers() && !p.dropAnswers() {
			e.plans.Put(p)
			return
		}
	case kept != nil:
		e.plans.Put(kept)
		fallthrough
	default:
		if !rr.Limited() {
			return
		}
		p = e.plans.Get().(*chargePlan)
		if !e.build(rr, req, d, p) {
			e.plans.Put(p)
			return
		}
	}
	keep := false
	defer func() {
		if !keep {
			e.plans.Put(p)
		}
	}()
	p.req.Claim, p.req.CacheOnly, p.req.CacheAsked = req.Claim, req.CacheOnly, asked
	err := e.store.AllowAll(ctx, &p.req, &p.ans)
	d.Claim = p.ans.Claim
	if req.CacheOnly && err != nil {
		d.Undecided = true
		d.kept, keep = p, true
		return
	}
	e.decide(ctx, rr, d, p, err)
}

// build fills p with the checks and guard of req under the route's rules
// and d with what they settle of the decision (account, token id, tier,
// demotion); it reports false when nothing applies to decide.
func (e *Enforcer) build(rr *RouteRules, req Request, d *Decision, p *chargePlan) bool {
	rs := rr.rules
	addr := p.addrKey(rs, req.Addr)
	p.reset(max(req.Cost, 1))
	anonymous := req.Token == "" && req.Account == ""
	var demotedFor time.Duration // until the address's token window ends
	var sprayHash uint64
	switch {
	case req.Account != "":
		// A verified account: its tier from the users file, else from
		// its token's claim; never demoted (no one invents accounts).
		d.Account = req.Account
		if d.Tier = rs.users[req.User]; d.Tier == "" && rs.tierNames[req.Tier] {
			d.Tier = req.Tier
		}
	case !anonymous:
		if d.TokenID = req.TokenID; d.TokenID == "" {
			d.TokenID = e.keyer.ID(req.Token)
		}
		d.Tier = rs.tiers[d.TokenID]
		if d.Tier == "" && rs.spray.MaxTokens > 0 && addr != nil {
			sprayHash = maphash.Comparable(e.seed, [2]string{string(addr), d.TokenID})
			now := e.now().UnixNano()
			if ok, until, hit := e.sprayCache.Get(sprayHash, now); !hit {
				p.req.Guard = sprayGuard(rs, addr, d.TokenID)
			} else if !ok {
				d.Demoted, demotedFor = true, time.Duration(until-now)
				anonymous = true
			}
		}
	}
	p.addLimits(rr, d, addr, anonymous, req.answers())
	p.rr, p.demotedFor, p.sprayHash = rr, demotedFor, sprayHash
	p.account, p.tokenID, p.tier, p.demoted = d.Account, d.TokenID, d.Tier, d.Demoted
	return len(p.req.Checks) > 0 || p.req.Guard.Key != ""
}

// decide reads the store's answer to plan p (or its failure, err) into d:
// the fallback on a failure, the guard's answer, every limit's outcome.
func (e *Enforcer) decide(ctx context.Context, rr *RouteRules, d *Decision, p *chargePlan, err error) {
	rs := rr.rules
	demotedFor, sprayHash := p.demotedFor, p.sprayHash
	fallback := ""
	if err != nil {
		e.storeFailed(rr, err)
		fallback = rr.onStoreError
		switch fallback {
		case config.StoreOpen, config.StoreClosed:
			// Nothing is decided; the guard is answered in process, as
			// it is for the local fallback, to say who is demoted.
			checks := p.req.Checks
			p.req.Checks = nil
			_ = e.local.AllowAll(ctx, &p.req, &p.ans)
			p.req.Checks = checks
		default:
			fallback = config.StoreLocal
			for j := range p.req.Checks {
				p.req.Checks[j].Limit = p.meta[j].v.local
			}
			_ = e.local.AllowAll(ctx, &p.req, &p.ans)
		}
	}
	d.guardLost = err != nil && p.req.Guard.Key != ""
	if p.req.Guard.Key != "" {
		ttl := p.ans.GuardTTL
		if ttl <= 0 || ttl > rs.spray.Window {
			ttl = rs.spray.Window
		}
		now := e.now().UnixNano()
		e.sprayCache.Put(sprayHash, p.ans.Admitted, now+int64(ttl), now)
		if !p.ans.Admitted {
			d.Demoted, demotedFor = true, ttl
		}
	}
	for j := range p.req.Checks {
		c := &p.req.Checks[j]
		m := &p.meta[j]
		if fallback == config.StoreOpen || fallback == config.StoreClosed {
			if !ratelimit.Applies(c.Branch, p.ans.Admitted) {
				continue
			}
		} else if j >= len(p.ans.Results) || !p.ans.Results[j].Applied {
			continue
		}
		r := &rr.limits[m.limit]
		o := Outcome{Index: m.limit, Limit: r.name, Tier: m.tier, v: m.v}
		switch fallback {
		case config.StoreOpen:
			o.Fallback, o.Decision = config.StoreOpen, Allowed
			d.record(o)
			continue
		case config.StoreClosed:
			o.Fallback, o.Decision = config.StoreClosed, Limited
			d.record(o)
			d.Allowed, d.Unavailable = false, true
			return
		case config.StoreLocal:
			o.Fallback = config.StoreLocal
		}
		res := p.ans.Results[j].Result
		o.Result = res
		switch {
		case res.Allowed:
			o.Decision = Allowed
		case c.Shadow:
			o.Decision = ShadowLimited
		case res.RetryAfter == ratelimit.Never:
			o.Decision = ExceedsBurst
		default:
			o.Decision = Limited
		}
		if o.Decision == Allowed || o.Decision == ShadowLimited {
			d.record(o)
			continue
		}
		d.refuse(o, r, p, m, fallback, demotedFor)
		return
	}
	if p.ans.Uncharged && fallback == "" {
		d.Uncharged = true
		d.uncharge(false, true)
		return
	}
	d.uncharge(true, false) // the allowance of duplicate answers charges none but them
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
		switch o.Fallback {
		case "":
			o.Result = o.Result.Uncharged(o.v.limit, d.cost)
		case config.StoreLocal:
			o.Result = o.Result.Uncharged(o.v.local, d.cost)
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
		switch o.Fallback {
		case "":
			o.Result = o.Result.Charged(o.v.limit, d.cost)
		case config.StoreLocal:
			o.Result = o.Result.Charged(o.v.local, d.cost)
		}
	}
}

// maxCost returns the largest cost every non-shadow limit of the plan
// that applies under the guard's answer admitted lets pass: the smallest
// of their bursts (the shared limit's, not a local fallback's share).
func (p *chargePlan) maxCost(admitted bool) int64 {
	n := int64(-1)
	for j := range p.req.Checks {
		c := &p.req.Checks[j]
		if c.Shadow || !ratelimit.Applies(c.Branch, admitted) {
			continue
		}
		if b := p.meta[j].v.limit.Burst; n < 0 || b < n {
			n = b
		}
	}
	return max(n, 0)
}

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

// rebuild fills p, for req's cost, with the checks of the limits Decide
// charged req, decided as d under rr: the keys Decide charged, built as
// Decide built them (d holds the account, token id, tier and demotion it
// settled); the spray guard's answer is known now. Those of the allowance
// of duplicate answers are added only with answers. The request is
// anonymous, as Decide took it, without a token or an account, or when d
// demoted its token. tokenByID says that req names its token by its id
// alone (Request.TokenID, of a copy kept without the token: RefundLost's),
// so that the request is anonymous only without the id too; else by its
// Token, as Decide read it (Refund and Uncharge pass the request Decide
// was given).
func (p *chargePlan) rebuild(rr *RouteRules, req Request, d *Decision, tokenByID, answers bool) {
	var addrBuf [64]byte
	p.reset(max(req.Cost, 1))
	anonymous := req.Token == "" && req.Account == ""
	if tokenByID {
		anonymous = anonymous && req.TokenID == ""
	}
	anonymous = anonymous || d.Demoted
	p.addLimits(rr, d, rr.rules.addrKey(req.Addr, addrBuf[:0]), anonymous, answers)
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

// chargePlan is what one decision charges: the store request Decide
// sends, and for each of its checks the limit it stands for. Plans are
// pooled: a request allocates none.
type chargePlan struct {
	req     ratelimit.Request
	ans     ratelimit.Answer
	meta    []checkMeta
	checks  [2 * maxOutcomes]ratelimit.Check // two a limit while the spray guard is unanswered
	metas   [2 * maxOutcomes]checkMeta
	results [2 * maxOutcomes]ratelimit.CheckResult
	// keys holds the text of the checks' keys while they are added, one
	// after the other (each check's end in its checkMeta), in key at first:
	// they become one string, the checks' keys parts of it (addLimits).
	keys []byte
	key  [192]byte
	// lastKeys is the string the plan last made of its keys, reused when
	// the next request's keys are the same (a client's requests come in
	// runs, and a pooled plan tends to serve the same goroutine): no
	// allocation then.
	lastKeys string
	// addrText is the key text of the client address addr under an IPv6
	// prefix of addrPrefix (Rules.addrKey), the last the plan made:
	// made again only for another address or prefix (addrKey).
	addr       netip.Addr
	addrPrefix int
	addrText   []byte
	addrBuf    [64]byte

	// What building the plan settled (build), for deciding it again.
	rr                     *RouteRules
	account, tokenID, tier string
	demoted                bool
	demotedFor             time.Duration
	sprayHash              uint64
}

// checkMeta is what a check of a plan stands for.
type checkMeta struct {
	keyEnd int      // where the check's key ends in the plan's keys
	limit  int      // the limit's index among the route's
	v      *variant // the limit as it applies (tier)
	tier   string   // the caller's tier, when the check counts by token or account (Outcome.Tier)
}

// addrKey returns the key text of client address a under rs
// (Rules.addrKey), nil for a request without an address. It is made
// again only when a (its zone included) or rs's IPv6 prefix is not the
// last request's: a pooled plan tends to serve the same connection's
// goroutine, and the text depends on nothing else. The text is the
// plan's, valid until its next request; the checks' keys and the spray
// guard's are copies of it.
func (p *chargePlan) addrKey(rs *Rules, a netip.Addr) []byte {
	if !a.IsValid() {
		return nil
	}
	if a != p.addr || rs.v6Prefix != p.addrPrefix || p.addrText == nil {
		p.addrText = rs.addrKey(a, p.addrBuf[:0])
		p.addr, p.addrPrefix = a, rs.v6Prefix
	}
	return p.addrText
}

// reset empties p for a request of cost. It clears only the checks the
// last request used (those past them are zero: dropAnswers clears what
// it drops), since clearing memory that holds pointers costs a write
// barrier on every pointer while the collector marks.
func (p *chargePlan) reset(cost int64) {
	clear(p.checks[:min(len(p.req.Checks), len(p.checks))])
	p.req = ratelimit.Request{Checks: p.checks[:0], Cost: cost}
	p.ans = ratelimit.Answer{Results: p.results[:0]}
	p.meta = p.metas[:0]
	p.keys = p.key[:0]
}

// addLimits adds the route's limits as they apply to the request d
// decides, from the client address key addr (nil without one): all of
// them, those of the allowance of duplicate answers only with answers.
// While the spray guard's answer is not known (p's guard is set), each
// limit is added as it applies under both answers, of which the store
// applies one; otherwise as it applies to a request anonymous or not,
// demoted as d says. The checks' keys are made in one allocation,
// parts of one string, however many there are, and in none when they
// are those of the plan's last request (lastKeys).
func (p *chargePlan) addLimits(rr *RouteRules, d *Decision, addr []byte, anonymous, answers bool) {
	for i := range rr.limits {
		r := &rr.limits[i]
		if r.answers && !answers {
			continue
		}
		if p.req.Guard.Key == "" {
			p.add(i, r, d, addr, d.Demoted, anonymous, ratelimit.Always)
			continue
		}
		p.add(i, r, d, addr, false, false, ratelimit.IfAdmitted)
		p.add(i, r, d, addr, true, true, ratelimit.IfRefused)
	}
	if string(p.keys) != p.lastKeys { // compares without allocating
		p.lastKeys = string(p.keys)
	}
	keys, start := p.lastKeys, 0
	for j := range p.req.Checks {
		end := p.meta[j].keyEnd
		p.req.Checks[j].Key = keys[start:end]
		start = end
	}
}

// keyOf returns the text of check j's key, while checks are added.
func (p *chargePlan) keyOf(j int) []byte {
	start := 0
	if j > 0 {
		start = p.meta[j-1].keyEnd
	}
	return p.keys[start:p.meta[j].keyEnd]
}

// add adds limit i, r, as it applies to a request that is demoted or not
// and anonymous or not (under branch of the spray guard's answer), unless
// it does not apply to such a request.
func (p *chargePlan) add(i int, r *rule, d *Decision, addr []byte, demoted, anonymous bool, branch ratelimit.Branch) {
	switch {
	case r.when == config.WhenToken && anonymous,
		r.when == config.WhenAnon && !anonymous:
		return
	}
	v := &r.base
	start := len(p.keys)
	key := p.keys
	tier := ""
	switch {
	case r.byToken && demoted:
		if addr == nil {
			return
		}
		key = append(append(key, v.prefixSpray...), addr...)
	case r.byToken:
		if d.TokenID == "" {
			return // a token limit does not apply to a request without a token
		}
		if d.Tier != "" && r.tiers[d.Tier] != nil {
			v = r.tiers[d.Tier]
		}
		tier = d.Tier
		key = append(append(key, v.prefixToken...), d.TokenID...)
	case r.byAccount:
		if d.Account == "" {
			return // an account limit does not apply to a request without a verified account
		}
		if d.Tier != "" && r.tiers[d.Tier] != nil {
			v = r.tiers[d.Tier]
		}
		tier = d.Tier
		key = append(append(key, v.prefixAccount...), d.Account...)
	default:
		if addr == nil {
			return
		}
		key = append(append(key, v.prefixAddr...), addr...)
	}
	if n := len(p.req.Checks); branch == ratelimit.IfRefused && n > 0 && p.meta[n-1].limit == i && bytes.Equal(p.keyOf(n-1), key[start:]) {
		// The same key under either answer: one check that always applies.
		p.req.Checks[n-1].Branch = ratelimit.Always
		return
	}
	p.keys = key
	p.req.Checks = append(p.req.Checks, ratelimit.Check{Limit: v.limit, Shadow: r.shadow, Branch: branch, Allowance: r.answers})
	p.meta = append(p.meta, checkMeta{keyEnd: len(key), limit: i, v: v, tier: tier})
}

// dropAnswers removes the checks of the allowance of duplicate answers
// from p, built with them (they come last), for a request nothing can
// answer without placing it. It reports whether p has anything left to
// decide.
func (p *chargePlan) dropAnswers() bool {
	n := len(p.req.Checks)
	for n > 0 && p.meta[n-1].v.answers {
		n--
	}
	clear(p.req.Checks[n:])
	p.req.Checks, p.meta = p.req.Checks[:n], p.meta[:n]
	return n > 0 || p.req.Guard.Key != ""
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

// wait is how long the outcome's limit takes to recover: the retry
// delay of a denial, else the time until a full burst.
func (o *Outcome) wait() time.Duration {
	if o.Decision != Allowed {
		return o.Result.RetryAfter
	}
	return o.Result.ResetAfter
}

// storeFailed warns of a store failure, at most once a second (the
// failed round trips are counted by the store's observer, the decisions
// taken instead by the metrics of each limit's outcome).
func (e *Enforcer) storeFailed(rr *RouteRules, err error) {
	e.warn("rate-limit store failed; route falls back to on_store_error", err,
		zap.String("route", rr.Name), zap.String("on_store_error", rr.onStoreError))
}

func (e *Enforcer) warn(msg string, err error, fields ...zap.Field) {
	if !e.warnRate.Allow(e.now()) {
		return
	}
	e.log.Warn(msg, append(fields, zap.Error(err))...)
}
