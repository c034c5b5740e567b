package config

import (
	"maps"
	"slices"
)

// TierLimit overrides a route's token limit for one tier. Tiers (the
// tiers section) maps a tier name to the routes it overrides, by route
// name.
type TierLimit struct {
	// Rate replaces the route's token limit rate.
	Rate Rate `yaml:"rate"`
	// Burst replaces the burst; 0 means Rate.N, and Validate writes that
	// out. Default 0.
	Burst int `yaml:"burst"`
}

// normaliseTiers writes out each tier limit's burst of 0 as its rate's N.
func normaliseTiers(tiers map[string]map[string]TierLimit) {
	for _, routes := range tiers {
		for name, tl := range routes {
			if b := normalBurst(tl.Burst, tl.Rate); b != tl.Burst {
				tl.Burst = b
				routes[name] = tl
			}
		}
	}
}

// checkTiers reports problems in the tiers section at p: tier names, the
// overrides, and that every tier names real routes that have a token
// limit to override, since a tier overrides routes by name.
func checkTiers(col *collector, p path, tiers map[string]map[string]TierLimit, routes []Route) {
	var routeNames []string
	for _, r := range routes {
		routeNames = append(routeNames, r.Name)
	}
	for _, t := range slices.Sorted(maps.Keys(tiers)) {
		tp := p.key(t)
		if !isName(t) {
			col.addf(tp, "tier name %q must be lower-case letters, digits and _", t)
		}
		for _, rn := range slices.Sorted(maps.Keys(tiers[t])) {
			rp := tp.key(rn)
			i := slices.Index(routeNames, rn)
			switch {
			case i < 0:
				col.addf(rp, "no such route%s", didYouMean(rn, routeNames))
			case !slices.ContainsFunc(routes[i].Limits, func(l Limit) bool { return l.Key != KeyAddress }):
				col.addf(rp, "route %q has no token or account limit for a tier to override", rn)
			}
			tl := tiers[t][rn]
			checkRate(col, rp.key("rate"), tl.Rate)
			checkBurst(col, rp.key("burst"), tl.Burst)
		}
	}
}
