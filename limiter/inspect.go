package limiter

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/exgate/exgate/clientip"
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/ratelimit"
)

// Subject is whom an operator inspects or resets: one account, one token
// or one client address. Exactly one field is set.
type Subject struct {
	// Account is a verified account's key (Keyer.AccountID).
	Account string
	// User, with Account, is the account's user claim, which finds its
	// tier in the users file. Never stored or logged.
	User string
	// TokenID is an opaque token's id (Keyer.ID).
	TokenID string
	// Addr is a client address; it is put in the form the limits key it
	// (clientip.ClientForm: an IPv4 address embedded in an IPv6 one is
	// that IPv4 client) and grouped as they group it (IPv6 by
	// client_ip.ipv6_prefix).
	Addr netip.Addr
}

// LimitState is where one limit stands for a Subject on one route.
type LimitState struct {
	// Route and Limit name the limit.
	Route string `json:"route"`
	Limit string `json:"limit"`
	// Key is what the limit counts by: "token", "account" or "address".
	Key string `json:"key"`
	// When is the limit's when (config.WhenToken, WhenAnon or "").
	When string `json:"when,omitempty"`
	// Shadow reports a limit that is counted but never refuses.
	Shadow bool `json:"shadow,omitempty"`
	// Tier is the tier whose override applies, or "".
	Tier string `json:"tier,omitempty"`
	// Rate, Period and Burst are the limit in force.
	Rate   int64  `json:"rate"`
	Period string `json:"period"`
	Burst  int64  `json:"burst"`
	// Remaining is how many requests would pass right now.
	Remaining int64 `json:"remaining"`
	// RetryAfter is how long until one would pass (0 while Remaining > 0),
	// ResetAfter how long until the bucket is full again; in seconds.
	RetryAfter float64 `json:"retry_after"`
	ResetAfter float64 `json:"reset_after"`
	// Source is "store", or "local" when the store failed and the local
	// fallback's state is shown; Error says why.
	Source string `json:"source"`
	Error  string `json:"error,omitempty"`
}

// target is one limit key that applies to a Subject.
type target struct {
	route *RouteRules
	rule  *rule
	v     *variant
	key   string
	kind  string
}

// targets returns every limit key of s on every route of rs (routes by
// name, limits in order), with all of a limit's tiers when all is set
// (Reset clears them whatever tier the subject has now).
func (e *Enforcer) targets(rs *Rules, s Subject, all bool) []target {
	tier := ""
	switch {
	case s.Account != "" && s.User != "":
		tier = rs.users[s.User]
	case s.Account != "":
		for u, t := range rs.users { // bounded by the users file; admin requests only
			if e.keyer.AccountID(u) == s.Account {
				tier = t
				break
			}
		}
	case s.TokenID != "":
		tier = rs.tiers[s.TokenID]
	}
	var addr string
	if s.Addr.IsValid() {
		addr = clientip.AddrGroup(clientip.ClientForm(s.Addr), rs.v6Prefix).String()
	}
	names := make([]string, 0, len(rs.routes))
	for n := range rs.routes {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []target
	for _, n := range names {
		rr := rs.routes[n]
		for i := range rr.limits {
			r := &rr.limits[i]
			var id, kind string
			switch {
			case r.byToken:
				id, kind = s.TokenID, config.KeyToken
			case r.byAccount:
				id, kind = s.Account, config.KeyAccount
			default:
				id, kind = addr, config.KeyAddress
			}
			if id == "" {
				continue
			}
			variants := []*variant{&r.base}
			if all {
				for _, t := range slices.Sorted(maps.Keys(r.tiers)) {
					variants = append(variants, r.tiers[t])
				}
			} else if tier != "" && r.tiers[tier] != nil {
				variants[0] = r.tiers[tier]
			}
			for _, v := range variants {
				p := v.prefixAddr
				switch kind {
				case config.KeyToken:
					p = v.prefixToken
				case config.KeyAccount:
					p = v.prefixAccount
				}
				out = append(out, target{route: rr, rule: r, v: v, key: p + id, kind: kind})
				if kind == config.KeyAddress && all {
					// demoted tokens of this address share a bucket of their own
					out = append(out, target{route: rr, rule: r, v: v, key: v.prefixSpray + id, kind: kind})
				}
			}
		}
	}
	return out
}

// Inspect returns, for every route of rs, every limit that applies to s
// with where it stands, read from the store without charging anything.
// A limit the store cannot read is reported with its error and the local
// fallback's state.
func (e *Enforcer) Inspect(ctx context.Context, rs *Rules, s Subject) ([]LimitState, error) {
	in, ok := e.store.(ratelimit.Inspector)
	if !ok {
		return nil, errors.New("limiter: the store cannot be inspected")
	}
	ts := e.targets(rs, s, false)
	out := make([]LimitState, 0, len(ts))
	for _, t := range ts {
		st := LimitState{
			Route: t.route.Name, Limit: t.rule.name, Key: t.kind, When: t.rule.when, Shadow: t.rule.shadow,
			Tier: t.v.tier, Rate: t.v.limit.Rate, Period: t.v.limit.Period.String(), Burst: t.v.limit.Burst,
			Source: "store",
		}
		res, err := in.Peek(ctx, t.key, t.v.limit)
		if err != nil {
			st.Source, st.Error = config.StoreLocal, err.Error()
			res = e.local.PeekLocal(t.key, t.v.local)
		}
		st.Remaining = res.Remaining
		st.RetryAfter = seconds(res.RetryAfter)
		st.ResetAfter = seconds(res.ResetAfter)
		out = append(out, st)
	}
	return out, nil
}

// seconds is d in seconds, to the millisecond; Never is -1.
func seconds(d time.Duration) float64 {
	if d == ratelimit.Never {
		return -1
	}
	return float64(d.Milliseconds()) / 1000
}

// Reset clears every bucket of s on every route of rs, under every tier,
// in the store and in the local fallback, and returns how many keys it
// cleared. It stops at the first store error.
func (e *Enforcer) Reset(ctx context.Context, rs *Rules, s Subject) (int, error) {
	in, ok := e.store.(ratelimit.Inspector)
	if !ok {
		return 0, errors.New("limiter: the store cannot be reset")
	}
	n := 0
	for _, t := range e.targets(rs, s, true) {
		_ = e.local.Forget(ctx, t.key, t.v.local)
		if err := in.Forget(ctx, t.key, t.v.limit); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// RouteLimits describes the compiled limits of one route, for the admin
// status.
type RouteLimits struct {
	Route        string           `json:"route"`
	OnStoreError string           `json:"on_store_error"`
	Limits       []LimitDescribed `json:"limits"`
}

// LimitDescribed is one compiled limit with its tier overrides.
type LimitDescribed struct {
	Name   string            `json:"name"`
	Key    string            `json:"key"`
	When   string            `json:"when,omitempty"`
	Shadow bool              `json:"shadow,omitempty"`
	Limit  string            `json:"limit"`
	Tiers  map[string]string `json:"tiers,omitempty"`
}

// Describe returns every route's compiled limits, routes by name.
func (rs *Rules) Describe() []RouteLimits {
	out := make([]RouteLimits, 0, len(rs.routes))
	for _, n := range slices.Sorted(maps.Keys(rs.routes)) {
		rr := rs.routes[n]
		d := RouteLimits{Route: n, OnStoreError: rr.onStoreError, Limits: []LimitDescribed{}}
		for _, r := range rr.limits {
			key := config.KeyAddress
			switch {
			case r.byToken:
				key = config.KeyToken
			case r.byAccount:
				key = config.KeyAccount
			}
			ld := LimitDescribed{Name: r.name, Key: key, When: r.when, Shadow: r.shadow, Limit: r.base.limit.String()}
			for t, v := range r.tiers {
				if ld.Tiers == nil {
					ld.Tiers = map[string]string{}
				}
				ld.Tiers[t] = v.limit.String()
			}
			d.Limits = append(d.Limits, ld)
		}
		out = append(out, d)
	}
	return out
}
