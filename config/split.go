package config

// SplitTarget is one service of a route's split and its share.
type SplitTarget struct {
	// Service names the service (DefaultService, or one of
	// upstream.services).
	Service string `yaml:"service"`
	// Weight is the service's share relative to the others'; 0 sends it
	// nothing (a canary turned off).
	Weight int `yaml:"weight"`
}

// Sticky modes of a split.
const (
	// StickyAccount sends an account (the verified account key, else the
	// token id) always to the same service while the weights stay.
	StickyAccount = "account"
)

// maxSplitWeight bounds a split target's weight.
const maxSplitWeight = 1_000_000

// checkSplit reports problems of route r's split at p.
func checkSplit(col *collector, p path, r *Route, services func(string) bool) {
	if len(r.Split) == 0 {
		if r.Sticky != "" {
			col.addf(p.key("sticky"), "set without split")
		}
		return
	}
	if r.Service != "" {
		col.addf(p.key("service"), "set with split: the route forwards to the split's services")
	}
	if len(r.Split) < 2 {
		col.addf(p.key("split"), "want at least two services, got %d (name one with service:)", len(r.Split))
	}
	if r.Sticky != "" {
		col.oneOf(p.key("sticky"), r.Sticky, StickyAccount)
	}
	total, seen := 0, map[string]int{}
	for i, t := range r.Split {
		tp := p.key("split").index(i)
		if !services(t.Service) {
			col.addf(tp.key("service"), "no such service %q (upstream.services names the others; %q is upstream's own)", t.Service, DefaultService)
		}
		if j, dup := seen[t.Service]; dup {
			col.addf(tp.key("service"), "%q is already %s", t.Service, p.key("split").index(j))
		}
		seen[t.Service] = i
		if t.Weight < 0 || t.Weight > maxSplitWeight {
			col.addf(tp.key("weight"), "want 0 to %d, got %d", maxSplitWeight, t.Weight)
		} else {
			total += t.Weight
		}
	}
	if total == 0 {
		col.addf(p.key("split"), "every weight is 0: at least one service must get requests")
	}
}
