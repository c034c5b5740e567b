package config

import "strconv"

// Limit is one rate limit of a route.
type Limit struct {
	// Name labels the limit in headers, logs and metrics; unique within
	// its route. Default "" (Validate writes the key, "token" or
	// "address").
	Name string `yaml:"name"`
	// Key is what the limit counts by: "token" (the bearer token string),
	// "account" (the verified account; needs identity.verify) or
	// "address".
	Key string `yaml:"key"`
	// When is "always", "token" (only requests carrying a token) or
	// "anonymous" (only requests without one). Default "always" (Validate
	// turns "" into "always").
	When string `yaml:"when"`
	// Rate is N requests per period, written "N/period".
	Rate Rate `yaml:"rate"`
	// Burst is how many requests may arrive at once; 0 means Rate.N, and
	// Validate writes that out. Default 0.
	Burst int `yaml:"burst"`
	// Shadow decides and reports the limit without rejecting anything.
	// Default false.
	Shadow bool `yaml:"shadow"`
}

// Limit keys and conditions.
const (
	KeyToken   = "token"
	KeyAddress = "address"
	// KeyAccount counts by the verified account; it needs identity.verify.
	KeyAccount = "account"
	WhenAlways = "always"
	WhenToken  = "token"
	WhenAnon   = "anonymous"
)

// normalise fills in the documented meanings of the zero values of
// limits[j]: when always, a name from its key, and a burst of the rate's
// N.
func (l *Limit) normalise(limits []Limit, j int) {
	if l.When == "" {
		l.When = WhenAlways
	}
	if l.Name == "" {
		l.Name = defaultLimitName(limits, j)
	}
	l.Burst = normalBurst(l.Burst, l.Rate)
}

// normalBurst returns burst, or the rate's N for a burst of 0.
func normalBurst(burst int, r Rate) int {
	if burst == 0 && r.N > 0 && r.N <= maxRateN {
		return int(r.N)
	}
	return burst
}

// defaultLimitName names limits[j], which has no name: its key, or, when
// other limits of the route count by the same key, its key and condition
// ("address_anonymous"), and its index when even that repeats.
func defaultLimitName(limits []Limit, j int) string {
	l := limits[j]
	sameKey, sameWhen := 0, 0
	for _, o := range limits {
		if o.Key == l.Key {
			sameKey++
			if o.When == l.When || o.When == "" && l.When == WhenAlways {
				sameWhen++
			}
		}
	}
	switch {
	case sameKey <= 1:
		return l.Key
	case sameWhen <= 1:
		return l.Key + "_" + l.When
	}
	return l.Key + "_" + l.When + "_" + strconv.Itoa(j)
}

// checkLimits reports problems in a route's limits at p: each limit's,
// and names given twice.
func checkLimits(col *collector, p path, limits []Limit) {
	names := map[string]int{}
	for j, l := range limits {
		lp := p.index(j)
		if l.Name != "" && !isName(l.Name) {
			col.addf(lp.key("name"), "%q must be lower-case letters, digits and _", l.Name)
		} else if k, dup := names[l.Name]; dup {
			col.addf(lp.key("name"), "%q is already the name of %s; give each limit of a route its own name", l.Name, p.index(k))
		} else {
			names[l.Name] = j
		}
		col.oneOf(lp.key("key"), l.Key, KeyToken, KeyAccount, KeyAddress)
		col.oneOf(lp.key("when"), l.When, WhenAlways, WhenToken, WhenAnon)
		if l.Key != KeyAddress && l.When == WhenAnon {
			col.addf(lp.key("when"), "a %s limit cannot apply to anonymous requests", l.Key)
		}
		checkRate(col, lp.key("rate"), l.Rate)
		checkBurst(col, lp.key("burst"), l.Burst)
	}
}

// checkBurst checks a burst after normalisation.
func checkBurst(col *collector, p path, b int) {
	if b < 0 || int64(b) > maxRateN {
		col.addf(p, "must be from 0 to %d (0 means the rate's N), got %d", int64(maxRateN), b)
	}
}
