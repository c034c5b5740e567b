package ratelimit

import "time"

// Branch says under which answer of a Request's Guard a Check applies.
type Branch uint8

const (
	// Always applies whatever the guard answers, and without a guard.
	Always Branch = iota
	// IfAdmitted applies only when the guard admitted the member.
	IfAdmitted
	// IfRefused applies only when the guard refused the member.
	IfRefused
)

// Check is one limit a Request is decided against.
type Check struct {
	// Key is what the limit counts; the keys of one Request are distinct.
	Key string
	// Limit is the limit on Key.
	Limit Limit
	// Shadow marks a check that is decided and, when the request passes,
	// charged like the others, but never refuses the request.
	Shadow bool
	// Branch says under which answer of the Request's Guard the check
	// applies.
	Branch Branch
	// Allowance marks the allowance of a request's uncharged answers
	// (claim.go): the answers its claim gives instead of letting it
	// through, which charge its other checks nothing. It is decided like
	// any check, and refuses the request (claim not run) when it cannot
	// take the request's cost, but it is never charged with the others:
	// it is charged, and they are not, when the request's claim ran and
	// did not take what it claims. Refund charges it the request's cost
	// while it gives the others back: the request was answered without
	// being let through.
	Allowance bool
}

// Guard caps how many distinct members a set admits within a window (the
// token-spray guard: the distinct tokens one client address presents). A
// member already in the set, or one that fits under Max, is admitted and
// recorded; the window opens with the set's first member.
type Guard struct {
	// Key names the set, as it is (check keys get the store's prefix);
	// "" means the Request has no guard.
	Key string
	// Member is what is admitted or refused.
	Member string
	// Max is how many distinct members the set admits per window.
	Max int
	// Window is how long a set lives from its first member.
	Window time.Duration
}

// Request is one request decided against all its limits at once: the
// guard first, then every Check that applies under the guard's answer,
// all on one reading of the store's clock. It is all or nothing: the
// request passes when no applicable non-shadow check refuses it, and only
// then is it charged Cost in every applicable check that allows it (but
// its Allowance checks); a refused request charges nothing. The guard
// records its member either way.
type Request struct {
	Guard  Guard
	Checks []Check
	// Cost is how many requests this one counts as (a bulk of Cost
	// orders); 0 means 1.
	Cost int64
	// Claim, when set, is a script call decided with the request, in its
	// round trip, only when the request passes (claim.go). Only a Redis
	// store built with a claim function sends it (Answer.Claim.Sent).
	Claim *ClaimPart
	// CacheOnly asks only what is known in process: a DenyCache answers
	// a request it knows to be refused, as AllowAll would; any other
	// request, and every other Store, returns ErrNotCached, deciding
	// and charging nothing.
	CacheOnly bool
	// CacheAsked reports that a DenyCache was asked about these checks
	// just before, by a CacheOnly request it did not refuse (an order
	// looked up before its body is read): the request goes to the store
	// without the cache being asked again. A denial the cache learnt in
	// between is then the store's own to give, and the answer is the same.
	CacheAsked bool
}

// CheckResult is what one Check decided.
type CheckResult struct {
	// Applied reports that the check applied (its branch matched the
	// guard's answer) and was decided; Result is meaningless otherwise.
	Applied bool
	// Result is the check's answer on its own: Allowed when it would let
	// the request pass (then Remaining is what is left after it), else
	// RetryAfter. For a refused request nothing was charged, whatever the
	// check's own answer; an Allowance check is charged only when the
	// request is Uncharged.
	Result Result
}

// Answer is the outcome of a Request.
type Answer struct {
	// Admitted is the guard's answer; true for a Request without one.
	Admitted bool
	// GuardTTL is how long the guard's answer holds (until its window
	// ends); 0 without a guard.
	GuardTTL time.Duration
	// Allowed reports that the request passed and was charged.
	Allowed bool
	// Results holds one entry per Check, in order. AllowAll reuses its
	// backing array when it is large enough.
	Results []CheckResult
	// Claim is what the request's ClaimPart came to.
	Claim ClaimReply
	// Uncharged reports a request that passed its limits but whose claim
	// ran and did not take what it claims (claim.go): nothing was
	// charged but its Allowance checks, and Results tell what the limits
	// would have held had it been charged.
	Uncharged bool
}

// reset prepares a for a request of n checks.
func (a *Answer) reset(n int) {
	*a = Answer{Admitted: true, Allowed: true, Results: a.Results[:0]}
	if cap(a.Results) < n {
		a.Results = make([]CheckResult, n)
	}
	a.Results = a.Results[:n]
	clear(a.Results)
}

// cost returns the request's cost, at least 1.
func (q *Request) cost() int64 { return max(q.Cost, 1) }

// Applies reports whether a check of branch b applies under the guard's
// answer.
func Applies(b Branch, admitted bool) bool {
	return b == Always || (b == IfAdmitted) == admitted
}

// decideAll is the arithmetic of AllowAll over TATs already read: tat(i)
// returns the TAT of check i's key (0 when new) and charge(i, newTat) is
// called for every check to record once the request passed. now is in
// nanoseconds. It fills ans, whose guard fields are already set: the
// in-process form of the Redis decision script.
func decideAll(now int64, q *Request, ans *Answer, tat func(int) int64, charge func(int, int64)) {
	cost := q.cost()
	var pending [maxChecks]int64
	var newTats []int64
	if len(q.Checks) <= maxChecks {
		newTats = pending[:len(q.Checks)]
	} else {
		newTats = make([]int64, len(q.Checks))
	}
	for i := range q.Checks {
		c := &q.Checks[i]
		if !Applies(c.Branch, ans.Admitted) {
			continue
		}
		nt, r := gcra(now, tat(i), c.Limit, cost)
		ans.Results[i] = CheckResult{Applied: true, Result: r}
		if !c.Allowance { // charged only for an answer of a claim, which no process-local store runs
			newTats[i] = nt
		}
		if !r.Allowed && !c.Shadow {
			ans.Allowed = false
		}
	}
	if !ans.Allowed {
		return
	}
	for i, nt := range newTats {
		if nt != 0 {
			charge(i, nt)
		}
	}
}

// maxChecks is how many checks a request decides without allocating.
const maxChecks = 16
