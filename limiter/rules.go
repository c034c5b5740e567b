package limiter

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// KeyPrefix starts every key exgate stores (the Redis store adds "rate:"
// in front of a limit's): rate:exgate:<route>:<limit>:<N>/<seconds>:<t|u|a|s>:<id>.
// The rate is part of the key, so changing a limit (a reload, or a token
// moving to another tier) starts its counting afresh instead of carrying
// over a debt measured at the old rate.
const KeyPrefix = "exgate:"

// Rules is the rate-limit configuration compiled for the hot path: per
// route its limits with their key prefixes, tier overrides and header
// values, plus the token tiers and the token-spray guard. It is immutable;
// a reload compiles new Rules and swaps them whole.
type Rules struct {
	routes    map[string]*RouteRules
	tiers     map[string]string // token id → tier
	users     map[string]string // user claim → tier
	tierNames map[string]bool
	headers   string
	spray     config.TokenSpray
	v6Prefix  int
}

// RouteRules are the compiled limits of one route.
type RouteRules struct {
	// Name is the route's name.
	Name string

	rules        *Rules
	limits       []rule
	onStoreError string
}

// rule is one compiled limit.
type rule struct {
	name      string
	byToken   bool
	byAccount bool
	when      string
	shadow    bool
	base      variant
	tiers     map[string]*variant // tier → override (token limits only)
	// answers marks the allowance of duplicate answers
	// (config.DuplicateAnswerLimits): last among the route's limits,
	// decided only for requests duplicate protection may answer
	// (Request.Claims), charged only for its answers.
	answers bool
}

// variant is a limit as it applies to one tier (or to no tier).
type variant struct {
	tier    string // "" for the route's own limit
	answers bool   // the allowance of duplicate answers (rule.answers)
	limit   ratelimit.Limit
	local   ratelimit.Limit // the local fallback's share: limit / replicas
	policy  []string        // RateLimit-Policy value, shared by every response (never modified)
	quota   []string        // X-RateLimit-Limit value, likewise

	// rateLimit holds RateLimit field values made for the limit, reused
	// while the numbers they tell repeat (rateLimitValue). Rules copy
	// their variants, which share it; a value tells its limit's name with
	// its numbers, so a copy never takes another limit's value.
	rateLimit *[rateLimitValues]atomic.Pointer[rateLimitField]

	prefixToken   string // KeyPrefix + route:limit:N/seconds + ":t:"
	prefixAccount string // … ":u:" (verified accounts)
	prefixAddr    string // … ":a:"
	prefixSpray   string // … ":s:" (demoted tokens, keyed by address)
}

// Compile compiles the limits of a validated configuration and the
// token tiers read from its tokens file (token id → tier; nil for none).
func Compile(cfg *config.Config, tokens map[string]string) *Rules {
	rs := &Rules{
		routes:   make(map[string]*RouteRules, len(cfg.Routes)),
		tiers:    tokens,
		headers:  cfg.Limiter.Headers,
		spray:    cfg.Limiter.TokenSpray,
		v6Prefix: cfg.ClientIP.IPv6Prefix,
	}
	if rs.tiers == nil {
		rs.tiers = map[string]string{}
	}
	rs.tierNames = make(map[string]bool, len(cfg.Tiers))
	for t := range cfg.Tiers {
		rs.tierNames[t] = true
	}
	replicas := int64(max(cfg.Limiter.Replicas, 1))
	for _, rc := range cfg.Routes {
		rr := &RouteRules{Name: rc.Name, rules: rs, onStoreError: rc.OnStoreError}
		if rr.onStoreError == "" {
			rr.onStoreError = cfg.Limiter.OnStoreError
		}
		for _, lc := range rc.Limits {
			rr.limits = append(rr.limits, compileRule(cfg, rc.Name, lc, true, replicas))
		}
		rs.routes[rc.Name] = rr
	}
	for _, da := range cfg.DuplicateAnswerLimits() {
		if da.Rate.IsZero() {
			continue // nothing to derive it from: nothing bounds the route's orders either
		}
		lc := config.Limit{Name: config.DuplicateAnswersLimit, Key: da.Key, When: config.WhenAlways, Rate: da.Rate, Burst: da.Burst}
		r := compileRule(cfg, da.Route, lc, da.Tiers, replicas)
		r.answers, r.base.answers = true, true
		for _, v := range r.tiers {
			v.answers = true
		}
		rr := rs.routes[da.Route]
		rr.limits = append(rr.limits, r)
	}
	return rs
}

// compileRule compiles limit lc of the named route, with the tiers that
// override it when tiers is set and it counts by token or account.
func compileRule(cfg *config.Config, route string, lc config.Limit, tiers bool, replicas int64) rule {
	base := KeyPrefix + route + ":" + lc.Name + ":"
	r := rule{
		name:      lc.Name,
		byToken:   lc.Key == config.KeyToken,
		byAccount: lc.Key == config.KeyAccount,
		when:      lc.When,
		shadow:    lc.Shadow,
		base:      newVariant(base, "", lc.Name, lc.Rate, lc.Burst, replicas),
	}
	if !tiers || (!r.byToken && !r.byAccount) {
		return r
	}
	for tier, routes := range cfg.Tiers {
		if tl, ok := routes[route]; ok {
			if r.tiers == nil {
				r.tiers = map[string]*variant{}
			}
			v := newVariant(base, tier, lc.Name, tl.Rate, tl.Burst, replicas)
			r.tiers[tier] = &v
		}
	}
	return r
}

func newVariant(keyBase, tier, name string, rate config.Rate, burst int, replicas int64) variant {
	l := ratelimit.Limit{Rate: rate.N, Period: rate.Period, Burst: int64(burst)}
	if l.Burst == 0 {
		l.Burst = l.Rate
	}
	local := ratelimit.Limit{Rate: max(l.Rate/replicas, 1), Period: l.Period, Burst: max(l.Burst/replicas, 1)}
	// The window a full burst takes to refill: Burst × Period / Rate.
	w := clampSeconds(l.RefillSeconds())
	keyBase += strconv.FormatInt(l.Rate, 10) + "/" + strconv.FormatInt(int64(l.Period/time.Second), 10) + ":"
	return variant{
		tier:          tier,
		limit:         l,
		local:         local,
		prefixToken:   keyBase + "t:",
		prefixAccount: keyBase + "u:",
		prefixAddr:    keyBase + "a:",
		prefixSpray:   keyBase + "s:",
		rateLimit:     new([rateLimitValues]atomic.Pointer[rateLimitField]),
		policy:        []string{strconv.Quote(name) + ";q=" + strconv.FormatInt(l.Burst, 10) + ";w=" + strconv.FormatInt(w, 10)},
		quota:         []string{strconv.FormatInt(l.Burst, 10)},
	}
}

// WithUsers sets the account tiers read from a users file (user claim →
// tier; nil for none) and returns rs. Call it before rs is in use.
func (rs *Rules) WithUsers(users map[string]string) *Rules {
	rs.users = users
	return rs
}

// Users returns the number of accounts mapped to a tier.
func (rs *Rules) Users() int { return len(rs.users) }

// Route returns the compiled limits of the named route, or nil.
func (rs *Rules) Route(name string) *RouteRules { return rs.routes[name] }

// Tier returns the tier of a token id, or "".
func (rs *Rules) Tier(tokenID string) string { return rs.tiers[tokenID] }

// Tiers returns the number of tokens mapped to a tier.
func (rs *Rules) Tiers() int { return len(rs.tiers) }

// Headers returns the header style: config.HeadersIETF, HeadersLegacy or
// HeadersNone.
func (rs *Rules) Headers() string { return rs.headers }

// IPv6Prefix returns client_ip.ipv6_prefix: the length of the prefix an
// IPv6 client is limited as (clientip.AddrGroup).
func (rs *Rules) IPv6Prefix() int { return rs.v6Prefix }

// Limited reports whether the route has any limit.
func (rr *RouteRules) Limited() bool { return rr != nil && len(rr.limits) > 0 }

// LimitNames returns the names of the route's limits, in order.
func (rr *RouteRules) LimitNames() []string {
	out := make([]string, len(rr.limits))
	for i, r := range rr.limits {
		out[i] = r.name
	}
	return out
}

// LimitTiers returns the tiers a decision of the route's limit i is
// counted under (Outcome.Tier): "" and, for a limit that counts by token
// or account, every configured tier, sorted; a limit by address has no
// tier.
func (rr *RouteRules) LimitTiers(i int) []string {
	out := []string{""}
	if r := &rr.limits[i]; !r.byToken && !r.byAccount {
		return out
	}
	for t := range rr.rules.tierNames {
		out = append(out, t)
	}
	slices.Sort(out[1:])
	return out
}
