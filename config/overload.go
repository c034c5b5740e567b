package config

import "time"

// Overload bounds the requests exgate has under way at the backend, adapts
// that bound to the backend's observed latency, and sheds the least
// important requests first when the backend is full (docs/operations.md,
// "Overload"). Every key reloads live; the adaptive limit keeps its value
// across a reload, within the new floor and ceiling.
type Overload struct {
	// Enabled turns the concurrency limit on. Default true.
	Enabled bool `yaml:"enabled"`
	// MinLimit is the floor of the adaptive limit, and the limit while the
	// backend's unloaded latency is measured. Default 4.
	MinLimit int `yaml:"min_limit"`
	// MaxLimit is the ceiling of the adaptive limit. Default 1000.
	MaxLimit int `yaml:"max_limit"`
	// InitialLimit is the limit at start, before the first adjustment.
	// Default 100.
	InitialLimit int `yaml:"initial_limit"`
	// FixedLimit, when not 0, is the limit, and nothing adapts. Default 0.
	FixedLimit int `yaml:"fixed_limit"`
	// TolerancePercent is how much slower than its unloaded latency, in
	// percent, the backend may answer before the limit shrinks: the limit
	// settles where the backend's own queue adds about this much.
	// Default 25.
	TolerancePercent int `yaml:"tolerance_percent"`
	// ToleranceMin is the least the backend may be slower than unloaded
	// before the limit shrinks, whatever the percentage: a backend that
	// answers in a millisecond jitters by more than half of that, and by
	// several milliseconds on a busy host. Default 10ms.
	ToleranceMin time.Duration `yaml:"tolerance_min"`
	// Window is how often the limit is adjusted from the latencies seen.
	// Default 100ms.
	Window time.Duration `yaml:"window"`
	// ProbeInterval is how often the backend's unloaded latency is
	// measured again, holding the limit at half its value for one window.
	// Default 30s.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// MaxWait is, by priority class, the longest a request waits for a
	// slot when the backend is full before it is shed (503 overloaded).
	MaxWait OverloadWaits `yaml:"max_wait"`
	// RetryAfter is the Retry-After of a shed request. Default 1s.
	RetryAfter time.Duration `yaml:"retry_after"`
	// ShedDelay is how long after it arrived a shed request is answered
	// at the soonest. A client that sends again as soon as it is
	// answered (hundreds of connections in a loop, ignoring Retry-After)
	// then costs exgate a few shed answers a second per connection
	// instead of keeping every CPU busy with them, which would leave
	// none for the requests it serves. Default 100ms; 0 answers at once.
	ShedDelay time.Duration `yaml:"shed_delay"`
}

// OverloadWaits are the waits of the priority classes; 0 sheds a request
// of the class at once when the backend is full.
type OverloadWaits struct {
	// Cancel waits of order cancels. Default 1s.
	Cancel time.Duration `yaml:"cancel"`
	// Status waits of order-status and open-orders reads. Default 50ms.
	Status time.Duration `yaml:"status"`
	// Place waits of order placements. Default 20ms.
	Place time.Duration `yaml:"place"`
	// PrivateRead waits of other private reads. Default 10ms.
	PrivateRead time.Duration `yaml:"private_read"`
	// MarketData waits of public market data. Default 5ms.
	MarketData time.Duration `yaml:"market_data"`
}

// Priority classes of routes, most important first.
const (
	PriorityCancel      = "cancel"
	PriorityStatus      = "status"
	PriorityPlace       = "place"
	PriorityPrivateRead = "private_read"
	PriorityMarketData  = "market_data"
)

// Priorities lists the priority classes, most important first.
func Priorities() []string {
	return []string{PriorityCancel, PriorityStatus, PriorityPlace, PriorityPrivateRead, PriorityMarketData}
}

// DefaultOverload returns the overload defaults.
func DefaultOverload() Overload {
	return Overload{
		Enabled:          true,
		MinLimit:         4,
		MaxLimit:         1000,
		InitialLimit:     100,
		TolerancePercent: 25,
		ToleranceMin:     10 * time.Millisecond,
		Window:           100 * time.Millisecond,
		ProbeInterval:    30 * time.Second,
		MaxWait: OverloadWaits{
			Cancel:      time.Second,
			Status:      50 * time.Millisecond,
			Place:       20 * time.Millisecond,
			PrivateRead: 10 * time.Millisecond,
			MarketData:  5 * time.Millisecond,
		},
		RetryAfter: time.Second,
		ShedDelay:  100 * time.Millisecond,
	}
}

// defaultPriority is the class of a route that names none: placements
// (validate: order, or order_bulk on POST) place, a DELETE on a private
// route cancel, other private routes private_read, everything else
// market_data.
func defaultPriority(r *Route) string {
	switch {
	case r.Validate == ValidateOrd || r.Validate == ValidateBulk && r.Match.Method != "DELETE":
		return PriorityPlace
	case r.Auth == AuthRequired && r.Match.Method == "DELETE":
		return PriorityCancel
	case r.Auth == AuthRequired:
		return PriorityPrivateRead
	}
	return PriorityMarketData
}

// check reports problems in the overload section at p; the routes'
// overload keys (priority, max_in_flight) are checked with the routes.
func (o *Overload) check(col *collector, p path) {
	if o.MinLimit < 1 {
		col.addf(p.key("min_limit"), "must be at least 1, got %d", o.MinLimit)
	}
	if o.MaxLimit < o.MinLimit {
		col.addf(p.key("max_limit"), "must be at least overload.min_limit (%d), got %d", o.MinLimit, o.MaxLimit)
	}
	if o.InitialLimit < o.MinLimit || o.InitialLimit > o.MaxLimit {
		col.addf(p.key("initial_limit"), "must be within overload.min_limit and overload.max_limit (%d..%d), got %d", o.MinLimit, o.MaxLimit, o.InitialLimit)
	}
	if o.FixedLimit < 0 {
		col.addf(p.key("fixed_limit"), "must not be negative (0 adapts the limit), got %d", o.FixedLimit)
	}
	if o.TolerancePercent < 1 || o.TolerancePercent > 1000 {
		col.addf(p.key("tolerance_percent"), "must be 1 to 1000, got %d", o.TolerancePercent)
	}
	if o.ToleranceMin < 0 || o.ToleranceMin > 10*time.Second {
		col.addf(p.key("tolerance_min"), "must be 0 to 10s, got %s", o.ToleranceMin)
	}
	if o.Window < time.Millisecond {
		col.addf(p.key("window"), "must be at least 1ms, got %s", o.Window)
	}
	if o.ProbeInterval < time.Second {
		col.addf(p.key("probe_interval"), "must be at least 1s, got %s", o.ProbeInterval)
	}
	if o.RetryAfter < time.Second {
		col.addf(p.key("retry_after"), "must be at least 1s (Retry-After counts whole seconds), got %s", o.RetryAfter)
	}
	if o.ShedDelay < 0 || o.ShedDelay > max(o.RetryAfter, time.Second) {
		col.addf(p.key("shed_delay"), "must be 0 to overload.retry_after (%s), got %s", o.RetryAfter, o.ShedDelay)
	}
	for _, w := range []struct {
		key string
		d   time.Duration
	}{
		{"cancel", o.MaxWait.Cancel}, {"status", o.MaxWait.Status}, {"place", o.MaxWait.Place},
		{"private_read", o.MaxWait.PrivateRead}, {"market_data", o.MaxWait.MarketData},
	} {
		if w.d < 0 || w.d > time.Minute {
			col.addf(p.key("max_wait").key(w.key), "must be 0 to 1m, got %s", w.d)
		}
	}
}
