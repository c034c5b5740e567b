package limiter

import (
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
