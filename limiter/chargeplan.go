package limiter

import (
	"bytes"
	"net/netip"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

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
