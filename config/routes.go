package config

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Route is one entry of the route table.
type Route struct {
	// Name labels the route in limits, tiers, logs and metrics. Required
	// and unique; "default" is conventional for the "*" route.
	Name string `yaml:"name"`
	// Match is "METHOD /path/{param}/", "/path/" (any method) or "*"
	// (everything no other route matches).
	Match Match `yaml:"match"`
	// Auth is "none", "optional" or "required". Required means a request
	// without a well-formed Bearer token gets 401. Default "none"
	// (Validate turns "" into "none").
	Auth string `yaml:"auth"`
	// Validate names what exgate checks of a request before the backend
	// sees it: "order" (the body: one order), "order_bulk" (the body: an
	// array of orders, or order ids to cancel, as an array or
	// {"ids": [...]}), "order_ids" (the path's last parameter: one order
	// id, or several joined by commas, each charged as a request) or ""
	// for none. Default "".
	Validate string `yaml:"validate"`
	// Bulk says, for a route with validate: order_bulk, which routes'
	// limits its requests are charged against.
	Bulk BulkRoute `yaml:"bulk"`
	// Timeout overrides Upstream.Timeout for this route. Default 0 (use
	// Upstream.Timeout).
	Timeout time.Duration `yaml:"timeout"`
	// OnStoreError overrides Limiter.OnStoreError for this route: "open",
	// "closed" or "local". Default "" (use Limiter.OnStoreError).
	OnStoreError string `yaml:"on_store_error"`
	// Limits are the route's rate limits. Default: none.
	Limits []Limit `yaml:"limits"`
	// Priority is the route's overload class: "cancel", "status",
	// "place", "private_read" or "market_data" (most important first).
	// Default "" (Validate writes place for validate: order and
	// order_bulk, cancel for a DELETE on an auth: required route,
	// private_read for other auth: required routes, market_data
	// otherwise). A bulk of order ids to cancel is a cancel whatever its
	// route's class.
	Priority string `yaml:"priority"`
	// Service names the service the route forwards to (upstream.services);
	// "" is the default service, that of upstream.url and upstream.urls.
	// Default "".
	Service string `yaml:"service"`
	// Split divides the route's requests between services by weight (a
	// canary), instead of Service. Default: none.
	Split []SplitTarget `yaml:"split"`
	// Sticky is "account" to send an account always to the same service
	// of Split; "" draws every request. Default "".
	Sticky string `yaml:"sticky"`
	// MaxInFlight, when not 0, caps this route's requests under way at
	// the backend on top of the overload limit; past it, requests are
	// shed at once. Default 0.
	MaxInFlight int `yaml:"max_in_flight"`
	// Refuse, when true, answers every request the route matches 405
	// method_not_allowed, with an Allow header naming the methods the
	// rest of the table accepts on its path, before authentication,
	// limits or the backend: a deny-by-default for methods exgate has no
	// check for under a namespace (the default table's orders_refused
	// and wallets_refused). A refusing route forwards nothing, so it
	// takes no validate, bulk, limits, timeout, on_store_error, service,
	// split, sticky or max_in_flight, and its auth is none (a refusal
	// needs no token); a route before it still serves
	// what it matches. Default false.
	Refuse bool `yaml:"refuse"`
}

// BulkRoute names the routes whose limits a bulk request is charged
// against, one unit per order or order id, so that a bulk of k orders
// costs what k single orders cost.
type BulkRoute struct {
	// Orders is the route whose limits a bulk placement (an array of
	// orders) is charged against. Required with validate: order_bulk on
	// a POST route; a DELETE route places nothing and names none (an
	// array of orders sent to it is refused).
	Orders string `yaml:"orders"`
	// Cancels is the route whose limits a bulk cancel (order ids, as an
	// array or {"ids": [...]}) is charged against. Required with
	// validate: order_bulk.
	Cancels string `yaml:"cancels"`
}

// Auth values.
const (
	AuthNone     = "none"
	AuthOptional = "optional"
	AuthRequired = "required"
)

// Body validators of a route.
const (
	ValidateNone = ""
	ValidateOrd  = "order"
	ValidateBulk = "order_bulk"
	ValidateIDs  = "order_ids"
)

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

// DefaultRoutes returns the built-in route table: the trading API's family
// of endpoints (docs/configuration.md, "The default route table"), each
// named for what it does. Routes are tried in this order and the first
// whose path and method match serves the request, so a method no route
// names on a path falls through to a later route, and finally to
// "default" — except under /api/v1/odr/ and /api/v1/wlt/, whose refusing
// routes answer every method their reads and named routes do not serve
// 405 (Route.Refuse).
//
//   - Orders, fills and wallets (everything under /api/v1/odr/ and
//     /api/v1/wlt/) require a token at the edge and are counted per
//     token: placement against the spec's 5400/h order allowance (single
//     and bulk alike: a bulk of k orders costs k), cancels (single and
//     bulk) against their own limit so that a spent order allowance never
//     blocks one, reads against a read limit; any other write there (a
//     mass cancel, an amend, a withdrawal) has no check, and is refused.
//   - Public reads (markets, currencies, tickers, order book) are counted
//     like the spec's market list: per address without a token, per token
//     with one. Recent matches keep the spec's 60/min.
//   - authenticate and refresh_token are counted per address, strictly:
//     20 a minute and 100 an hour of login attempts per address is ample
//     for people and bots that keep their tokens, and slows credential
//     stuffing to a crawl.
func DefaultRoutes() []Route {
	anonDay := Rate{N: 10000, Period: 24 * time.Hour}
	tokenMin := Rate{N: 200, Period: time.Minute}
	orders := Rate{N: 5400, Period: time.Hour}
	cancels := Rate{N: 16200, Period: time.Hour}
	reads := Rate{N: 600, Period: time.Minute}
	token := func(r Rate) []Limit {
		return []Limit{{Name: KeyToken, Key: KeyToken, When: WhenAlways, Rate: r, Burst: int(r.N)}}
	}
	publicRead := func(name, match string) Route {
		return Route{
			Name: name, Match: mustMatch(match), Auth: AuthOptional, Priority: PriorityMarketData,
			Limits: []Limit{
				{Name: KeyAddress, Key: KeyAddress, When: WhenAnon, Rate: anonDay, Burst: int(anonDay.N)},
				{Name: KeyToken, Key: KeyToken, When: WhenToken, Rate: tokenMin, Burst: int(tokenMin.N)},
			},
		}
	}
	private := func(name, match, priority string, r Rate) Route {
		return Route{Name: name, Match: mustMatch(match), Auth: AuthRequired, Priority: priority, Limits: token(r)}
	}
	// Any other method under the private namespaces is a write exgate
	// has no check for (a mass cancel, an amend, a withdrawal): refused
	// 405 rather than forwarded unchecked, or left to the anonymous
	// default route.
	refused := func(name, match string) Route {
		return Route{Name: name, Match: mustMatch(match), Auth: AuthNone, Priority: PriorityMarketData, Refuse: true}
	}
	place := private("place_order", "POST /api/v1/odr/orders/", PriorityPlace, orders)
	place.Validate = ValidateOrd
	bulk := Route{
		Name: "bulk_orders", Match: mustMatch("POST /api/v1/odr/orders/bulk/"), Auth: AuthRequired,
		Validate: ValidateBulk, Bulk: BulkRoute{Orders: "place_order", Cancels: "cancel_order"},
		Priority: PriorityPlace, // a bulk cancel is a cancel
	}
	// A DELETE of the bulk path with ids cancels them, as some clients of
	// the API send it; without this route it would be cancel_order's,
	// charged one cancel for all its ids, of the order "bulk".
	bulkCancel := Route{
		Name: "bulk_cancel", Match: mustMatch("DELETE /api/v1/odr/orders/bulk/"), Auth: AuthRequired,
		Validate: ValidateBulk, Bulk: BulkRoute{Cancels: "cancel_order"}, Priority: PriorityCancel,
	}
	cancel := private("cancel_order", "DELETE /api/v1/odr/orders/{id}/", PriorityCancel, cancels)
	cancel.Validate = ValidateIDs
	status := private("get_orders", "GET /api/v1/odr/orders/{ids}/", PriorityStatus, reads)
	status.Validate = ValidateIDs
	return []Route{
		place,
		bulk,
		bulkCancel,
		cancel,
		private("list_orders", "GET /api/v1/odr/orders/", PriorityStatus, reads),
		status,
		private("list_fills", "GET /api/v1/odr/fills/", PriorityPrivateRead, reads),
		private("orders_other", "GET /api/v1/odr/{rest...}", PriorityPrivateRead, reads),
		refused("orders_refused", "/api/v1/odr/{rest...}"),
		private("list_wallets", "GET /api/v1/wlt/wallets/", PriorityPrivateRead, reads),
		private("wallets_other", "GET /api/v1/wlt/{rest...}", PriorityPrivateRead, reads),
		refused("wallets_refused", "/api/v1/wlt/{rest...}"),
		publicRead("list_markets", "GET /api/v1/mkt/markets/"),
		publicRead("list_currencies", "GET /api/v1/mkt/currencies/"),
		publicRead("list_tickers", "GET /api/v1/mkt/tickers/"),
		publicRead("order_book", "GET /api/v1/mth/orderbook/{symbol}/"),
		{
			Name: "list_matches", Match: mustMatch("GET /api/v1/mth/matches/{symbol}/"), Auth: AuthOptional, Priority: PriorityMarketData,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 60, Period: time.Minute}, Burst: 60}},
		},
		{
			Name: "authenticate", Match: mustMatch("POST /api/v1/usr/authenticate/"), Auth: AuthNone, Priority: PriorityPrivateRead,
			Limits: []Limit{
				{Name: "address_minute", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 20, Period: time.Minute}, Burst: 20},
				{Name: "address_hour", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 100, Period: time.Hour}, Burst: 100},
			},
		},
		{
			Name: "refresh_token", Match: mustMatch("POST /api/v1/usr/refresh_token/"), Auth: AuthNone, Priority: PriorityPrivateRead,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 60, Period: time.Minute}, Burst: 60}},
		},
		{
			Name: "default", Match: Match{Path: "*"}, Auth: AuthNone, Priority: PriorityMarketData,
			Limits: []Limit{{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 600, Period: time.Minute}, Burst: 600}},
		},
	}
}

// mustMatch parses a matcher of the built-in table.
func mustMatch(s string) Match {
	var m Match
	if err := m.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return m
}

// Route returns the route named name, or nil.
func (c *Config) Route(name string) *Route { return findRoute(c.Routes, name) }

// findRoute returns the route of routes named name, or nil.
func findRoute(routes []Route, name string) *Route {
	for i := range routes {
		if routes[i].Name == name {
			return &routes[i]
		}
	}
	return nil
}

// endsInParam reports whether the path pattern p (valid) ends in a
// parameter of one segment, "{name}", with or without a trailing slash.
func endsInParam(p string) bool {
	segs := patternSegments(p)
	if len(segs) == 0 {
		return false
	}
	last := segs[len(segs)-1]
	return strings.HasPrefix(last, "{") && !strings.HasSuffix(last, "...}")
}

// normalise fills in the documented meanings of the route's zero values:
// auth none, the priority its kind implies, and its limits'.
func (r *Route) normalise() {
	if r.Auth == "" {
		r.Auth = AuthNone
	}
	if r.Priority == "" {
		r.Priority = defaultPriority(r)
	}
	for j := range r.Limits {
		r.Limits[j].normalise(r.Limits, j)
	}
}

// routeTable is what checking a route table remembers of the routes
// already checked, to report names and matchers given twice and matchers
// an earlier route covers.
type routeTable struct {
	names     map[string]int // route name -> index
	patterns  map[string]int // patternKey -> index
	paths     []int          // the routes with a valid path matcher, in order
	defaultAt int            // index of the "*" route, or -1
}

// coveredBy returns the index of the first route already checked whose
// matcher covers m (Match.Covers), so that a route with m after it is
// never matched, or -1.
func (t *routeTable) coveredBy(m Match, routes []Route) int {
	for _, j := range t.paths {
		if routes[j].Match.Covers(m) {
			return j
		}
	}
	return -1
}

// checkRoutes reports problems in the route table at p: each route's,
// and names or matchers given twice or never reached.
func checkRoutes(col *collector, p path, routes []Route) {
	if len(routes) == 0 {
		col.addf(p, "at least one route is required")
		return
	}
	t := &routeTable{names: map[string]int{}, patterns: map[string]int{}, defaultAt: -1}
	for i := range routes {
		routes[i].check(col, p, i, routes, t)
	}
}

// check reports problems in routes[i], the route table being at p and t
// holding the routes before it.
func (r *Route) check(col *collector, p path, i int, routes []Route, t *routeTable) {
	rp := p.index(i)
	switch {
	case r.Name == "":
		col.addf(rp.key("name"), "required")
	case !isName(r.Name):
		col.addf(rp.key("name"), "%q must be lower-case letters, digits and _", r.Name)
	default:
		if j, dup := t.names[r.Name]; dup {
			col.addf(rp.key("name"), "%q is already the name of %s", r.Name, p.index(j))
		} else {
			t.names[r.Name] = i
		}
	}

	m := r.Match
	switch {
	case m.Path == "":
		col.addf(rp.key("match"), "required, such as \"GET /api/v1/mkt/markets/\" or \"*\"")
	case m.IsDefault():
		if m.Method != "" {
			col.addf(rp.key("match"), "the default route \"*\" takes no method")
		}
		if t.defaultAt >= 0 {
			col.addf(rp.key("match"), "only one default route \"*\" is allowed; %s is one", p.index(t.defaultAt))
		} else {
			t.defaultAt = i
		}
	default:
		if m.Method != "" && !knownMethods[m.Method] {
			col.addf(rp.key("match"), "unknown method %q", m.Method)
		} else if err := CheckPattern(m.Path); err != nil {
			col.addf(rp.key("match"), "%v", err)
		} else if j, dup := t.patterns[patternKey(m)]; dup {
			col.addf(rp.key("match"), "%q matches the same requests as %s (%q)", m.String(), p.index(j), routes[j].Match.String())
		} else if j := t.coveredBy(m, routes); j >= 0 {
			col.addf(rp.key("match"), "%q is never matched: %s (%q) comes first and matches every request it would (routes are tried in order); move this route above it, or remove it",
				m.String(), p.index(j), routes[j].Match.String())
		} else {
			t.patterns[patternKey(m)] = i
			t.paths = append(t.paths, i)
		}
	}

	col.oneOf(rp.key("auth"), r.Auth, AuthNone, AuthOptional, AuthRequired)
	switch r.Validate {
	case ValidateNone:
	case ValidateOrd:
		if m.Path != "" && m.Method != "POST" {
			col.addf(rp.key("validate"), "%q needs a POST route, but the route matches %q", r.Validate, m.String())
		}
	case ValidateBulk:
		if m.Path != "" && m.Method != "POST" && m.Method != "DELETE" {
			col.addf(rp.key("validate"), "%q needs a POST route (or a DELETE route, which only cancels), but the route matches %q", r.Validate, m.String())
		}
	case ValidateIDs:
		if !m.IsDefault() && CheckPattern(m.Path) == nil && !endsInParam(m.Path) {
			col.addf(rp.key("validate"), "%q checks the path's last parameter, but %q does not end in one such as {ids}", r.Validate, m.Path)
		}
	default:
		col.oneOf(rp.key("validate"), r.Validate, ValidateNone, ValidateOrd, ValidateBulk, ValidateIDs)
	}
	r.checkBulk(col, rp, routes)
	r.checkRefuse(col, rp)
	if r.Timeout < 0 {
		col.addf(rp.key("timeout"), "must not be negative (0 means upstream.timeout), got %s", r.Timeout)
	}
	if r.OnStoreError != "" {
		col.oneOf(rp.key("on_store_error"), r.OnStoreError, StoreOpen, StoreClosed, StoreLocal)
	}
	checkLimits(col, rp.key("limits"), r.Limits)
	col.oneOf(rp.key("priority"), r.Priority, Priorities()...)
	if r.MaxInFlight < 0 {
		col.addf(rp.key("max_in_flight"), "must not be negative (0: only the overload limit), got %d", r.MaxInFlight)
	}
}

// checkRefuse checks a refusing route at p: not the default route (leave
// it out for a 404), and nothing of what a forwarding route has.
func (r *Route) checkRefuse(col *collector, p path) {
	if !r.Refuse {
		return
	}
	if r.Match.IsDefault() {
		col.addf(p.key("refuse"), "the default route \"*\" cannot refuse: without it, a request no route matches is answered 404 (or 405)")
	}
	for _, f := range []struct {
		key string
		set bool
	}{
		{"auth", r.Auth != AuthNone && r.Auth != ""}, {"validate", r.Validate != ""}, {"bulk", r.Bulk != (BulkRoute{})}, {"limits", len(r.Limits) > 0},
		{"timeout", r.Timeout != 0}, {"on_store_error", r.OnStoreError != ""}, {"service", r.Service != ""},
		{"split", len(r.Split) > 0}, {"sticky", r.Sticky != ""}, {"max_in_flight", r.MaxInFlight != 0},
	} {
		if f.set {
			col.addf(p.key(f.key), "a route with refuse: true forwards nothing: omit %s", f.key)
		}
	}
}

// checkBulk checks the bulk settings of the route at p: a bulk route is
// charged against other routes' limits (Bulk.Orders and Bulk.Cancels,
// which must exist and count per token), needs a token so that those
// token limits apply, and has no limits of its own; any other route has
// no bulk settings.
func (r *Route) checkBulk(col *collector, p path, routes []Route) {
	if r.Validate != ValidateBulk {
		if r.Bulk != (BulkRoute{}) {
			col.addf(p.key("bulk"), "only for a route with validate: %s", ValidateBulk)
		}
		return
	}
	if r.Auth != AuthRequired {
		col.addf(p.key("auth"), "a %s route must require a token, so that the token limits it is charged against apply", ValidateBulk)
	}
	if len(r.Limits) > 0 {
		col.addf(p.key("limits"), "a %s route has no limits of its own: it is charged against bulk.orders and bulk.cancels", ValidateBulk)
	}
	for _, f := range []struct{ key, name string }{{"orders", r.Bulk.Orders}, {"cancels", r.Bulk.Cancels}} {
		fp := p.key("bulk").key(f.key)
		switch {
		case f.key == "orders" && r.Match.Method == "DELETE":
			if f.name != "" {
				col.addf(fp, "a DELETE route places no orders: omit bulk.orders (an array of orders sent to it is refused)")
			}
			continue
		case f.name == "":
			col.addf(fp, "required: the route whose limits a bulk is charged against")
			continue
		}
		t := findRoute(routes, f.name)
		switch {
		case t == nil:
			col.addf(fp, "no route named %q", f.name)
		case t.Name == r.Name || t.Validate == ValidateBulk:
			col.addf(fp, "route %q is a bulk route; name the route of single requests", f.name)
		case !slices.ContainsFunc(t.Limits, func(l Limit) bool { return l.Key == KeyToken || l.Key == KeyAccount }):
			col.addf(fp, "route %q has no token limit to charge", f.name)
		}
	}
}

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

// MaxRouteLimits is the most limits one route may have, counting the
// allowance of duplicate answers exgate adds to a route orders are placed
// on (idempotency.duplicate_answers). A request's decision carries the
// outcome of each limit inline, without allocating, and its RateLimit
// headers, metrics and refunds are taken from those outcomes: a limit
// past them would be enforced but not reported, counted or given back, so
// a configuration with more is refused.
const MaxRouteLimits = 8

// checkLimits reports problems in a route's limits at p: each limit's,
// names given twice, and more limits than MaxRouteLimits.
func checkLimits(col *collector, p path, limits []Limit) {
	if len(limits) > MaxRouteLimits {
		col.addf(p, "%d limits: a route has at most %d (its RateLimit headers, metrics and refunds carry each one); merge limits or move some to another route", len(limits), MaxRouteLimits)
	}
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
