package proxy

import (
	"strings"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
	"github.com/exgate/exgate/metrics"
	"github.com/exgate/exgate/upstream"
)

// Route is a route compiled from configuration: everything the hot path
// needs, computed once at load. What requests it matches and how the path
// it forwards them is spelled is its routePattern, compiled from its match
// (compileTable) and read by the route table and forwardPath alone; the
// rest is what the requests it matched use, the parts that hold pools and
// counters (limits, admission, metrics, deadlines, service) attached by the
// plan (newPlan).
type Route struct {
	// Name is the configured route name, used in logs and metrics.
	Name string
	// Auth is config.AuthNone, AuthOptional or AuthRequired.
	Auth string
	// Timeout is the route's effective upstream timeout.
	Timeout time.Duration
	// Config is the route as configured.
	Config config.Route

	routePattern // what it matches (compileTable)

	limits       *limiter.RouteRules                // nil or empty: not limited
	bulk         *bulkTargets                       // the routes a bulk route charges, or nil
	maxIDs       int                                // validate: order_ids: the most ids its path may list; else 0
	metrics      *metrics.RouteMetrics              // nil: no metrics
	limitMetrics []map[string]*metrics.LimitMetrics // by limit index, then tier ("" for none)
	admission    *routeAdmission                    // class and in-flight cap under overload
	evidence     bool                               // orders and cancels: the access log never samples them
	trace        routeTrace                         // what its spans say of it, while tracing is on
	deadlines    *timeoutQueues                     // cancel its backend calls at Timeout
	service      *upstream.Service                  // the service it forwards to; nil when not started (fleet.go)
	split        *upstream.Split                    // the services it divides its requests between, instead of service
	sticky       bool                               // split by account
}

// routePattern is what a route matches — a method and a path's shape — and
// how the path it forwards is spelled, compiled from its match at load.
type routePattern struct {
	method   string    // "" for any known method
	segs     []segment // nil for the default route
	trailing bool      // the canonical form ends in "/"
	spelling string    // the path forwarded when its segments are all literal (forwardPath), else ""
	isDef    bool
	refuse   bool   // refuse: true, every request it matches answered 405 (refusedAt)
	allow    string // Allow header of every route sharing this shape
}

type segment struct {
	lit   string // literal text, compared case-insensitively
	param bool
	rest  bool // "{name...}": the rest of the path, zero or more segments
}

// anyMethods are the methods a route without a method accepts, in the
// order they are listed in an Allow header.
var anyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// table is the compiled route table. It is immutable once built.
type table struct {
	routes []*Route // non-default routes, in configuration order
	def    *Route   // the "*" route, or nil
	// byPath holds, for each spelling of a path of literal segments only
	// as configured (with and without its trailing slash), every route
	// whose path matches it, in configuration order: find looks such a
	// path up instead of trying every route.
	byPath map[string][]*Route
}

// allRoutes returns the table's routes, the default one last.
func (t *table) allRoutes() []*Route {
	if t.def == nil {
		return t.routes
	}
	return append(t.routes[:len(t.routes):len(t.routes)], t.def)
}

// compileTable compiles the routes of cfg, which must be valid.
func compileTable(cfg *config.Config) *table {
	t := &table{}
	for i := range cfg.Routes {
		rc := cfg.Routes[i]
		r := &Route{
			Name:         rc.Name,
			Auth:         rc.Auth,
			Timeout:      cfg.RouteTimeout(&rc),
			Config:       rc,
			routePattern: routePattern{method: rc.Match.Method, refuse: rc.Refuse},
			// The route's class says what its requests are; a bulk route
			// is of class place, and a bulk cancel is a cancel.
			evidence: rc.Priority == config.PriorityPlace || rc.Priority == config.PriorityCancel,
		}
		if r.Auth == "" {
			r.Auth = config.AuthNone
		}
		if rc.Validate == config.ValidateIDs {
			r.maxIDs = cfg.Validation.Bulk.MaxOrders
		}
		if rc.Match.IsDefault() {
			r.isDef = true
			r.allow = strings.Join(anyMethods, ", ")
			t.def = r
			continue
		}
		p := rc.Match.Path
		r.trailing = strings.HasSuffix(p, "/") && p != "/"
		it := segmentIter{p: p}
		for s, ok := it.next(); ok; s, ok = it.next() {
			switch {
			case strings.HasSuffix(s, "...}"):
				r.segs = append(r.segs, segment{param: true, rest: true})
			case strings.HasPrefix(s, "{"):
				r.segs = append(r.segs, segment{param: true})
			default:
				r.segs = append(r.segs, segment{lit: s})
			}
		}
		r.spelling = literalSpelling(r)
		t.routes = append(t.routes, r)
	}
	t.indexLiterals()
	// Allow headers: the union of methods of the routes with the same
	// shape, so a 405 lists every method the path accepts.
	for _, r := range t.routes {
		seen := map[string]bool{}
		var methods []string
		add := func(m string) {
			if !seen[m] {
				seen[m] = true
				methods = append(methods, m)
			}
		}
		for _, o := range t.routes {
			if o.refuse || !sameShape(r, o) {
				continue
			}
			switch o.method {
			case "":
				for _, m := range anyMethods {
					add(m)
				}
			case "GET":
				add("GET")
				add("HEAD")
			default:
				add(o.method)
			}
		}
		r.allow = strings.Join(methods, ", ")
	}
	return t
}

// named returns the route called name, or nil.
func (t *table) named(name string) *Route {
	for _, r := range t.routes {
		if r.Name == name {
			return r
		}
	}
	if t.def != nil && t.def.Name == name {
		return t.def
	}
	return nil
}

// sameShape reports whether two routes match the same set of paths.
func sameShape(a, b *Route) bool {
	if len(a.segs) != len(b.segs) {
		return false
	}
	for i := range a.segs {
		if a.segs[i].param != b.segs[i].param || a.segs[i].rest != b.segs[i].rest || !strings.EqualFold(a.segs[i].lit, b.segs[i].lit) {
			return false
		}
	}
	return true
}

// methodOK reports whether the route accepts method.
func (r *routePattern) methodOK(method string) bool {
	switch r.method {
	case method:
		return true
	case "":
		for _, m := range anyMethods {
			if m == method {
				return true
			}
		}
		return false
	case "GET":
		return method == "HEAD"
	}
	return false
}

// matchPath reports whether the canonical path p has the route's shape.
// Literal segments compare case-insensitively and the trailing slash is
// ignored, so every spelling of a route's path that a lenient backend might
// route to the same handler is held to the route.
func (r *routePattern) matchPath(p string) bool {
	it := segmentIter{p: p}
	for i := range r.segs {
		if r.segs[i].rest {
			return true
		}
		s, ok := it.next()
		if !ok {
			return false
		}
		if !r.segs[i].param && !strings.EqualFold(s, r.segs[i].lit) {
			return false
		}
	}
	_, more := it.next()
	return !more
}

// match finds the route for a method and canonical path: the first route,
// in configuration order, whose path and method both match, else the
// default route. A path whose last segment carries a format suffix
// ("orders.json", "{id}.api", see formatless) is matched without it first,
// as Django REST framework's format_suffix_patterns route it to the same
// view; matched is the path the route matched, whose canonical spelling is
// forwarded. Without a route, allow is the Allow header for a 405 (the
// method is one no route accepts, or the route found refuses it:
// refusedAt), or "" for a 404.
func (t *table) match(method, p string) (r *Route, matched, allow string) {
	if bare, ok := formatless(p); ok {
		if r := t.find(method, bare, segmentCount(bare)); r != nil {
			if r.refuse {
				return nil, bare, t.refusedAt(bare)
			}
			return r, bare, ""
		}
	}
	n := segmentCount(p)
	if r := t.find(method, p, n); r != nil {
		if r.refuse {
			return nil, p, t.refusedAt(p)
		}
		return r, p, ""
	}
	if t.def != nil {
		if t.def.methodOK(method) {
			return t.def, p, ""
		}
		return nil, p, t.def.allow
	}
	for _, r := range t.routes {
		if r.fits(n) && r.matchPath(p) {
			return nil, p, r.allow
		}
	}
	return nil, p, ""
}

// refusedAt returns the Allow header of a request a refusing route
// matched at the canonical path p: the methods a route that forwards
// (the default route included) would serve at p, GET with HEAD; "" (a
// 404) when there is none. A refusal only, so it may take its time: one
// lookup per method.
func (t *table) refusedAt(p string) string {
	n := segmentCount(p)
	var b strings.Builder
	for _, m := range anyMethods {
		r := t.find(m, p, n)
		if r == nil {
			r = t.def
		}
		if r == nil || r.refuse || !r.methodOK(m) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m)
	}
	return b.String()
}

// indexLiterals fills byPath: for each route whose segments are all
// literals, its path as configured, with and without the trailing slash,
// and the routes that match that exact path, in configuration order.
func (t *table) indexLiterals() {
	t.byPath = map[string][]*Route{}
	for _, r := range t.routes {
		if !allLiteral(r.segs) {
			continue
		}
		p := "/" + r.segs[0].lit
		for _, s := range r.segs[1:] {
			p += "/" + s.lit
		}
		for _, key := range []string{p, p + "/"} {
			if _, done := t.byPath[key]; done {
				continue
			}
			n := segmentCount(key)
			var cands []*Route
			for _, o := range t.routes {
				if o.fits(n) && o.matchPath(key) {
					cands = append(cands, o)
				}
			}
			t.byPath[key] = cands
		}
	}
}

// allLiteral reports whether segs are literal segments only (and at
// least one).
func allLiteral(segs []segment) bool {
	for _, s := range segs {
		if s.param {
			return false
		}
	}
	return len(segs) > 0
}

// find returns the first route, in configuration order, whose method and
// path match; n is the number of segments of p.
func (t *table) find(method, p string, n int) *Route {
	if cands, ok := t.byPath[p]; ok {
		for _, r := range cands {
			if r.methodOK(method) {
				return r
			}
		}
		return nil
	}
	for _, r := range t.routes {
		if r.fits(n) && r.methodOK(method) && r.matchPath(p) {
			return r
		}
	}
	return nil
}

// fits reports whether a path of n segments can have the route's shape:
// a cheap test that spares most routes the segment comparison.
func (r *routePattern) fits(n int) bool {
	if k := len(r.segs); k > 0 && r.segs[k-1].rest {
		return n >= k-1
	}
	return n == len(r.segs)
}

// segmentCount returns the number of segments of a canonical path.
func segmentCount(p string) int {
	n := strings.Count(p, "/")
	if strings.HasSuffix(p, "/") {
		n--
	}
	return n
}

// formatless returns p without a format suffix on its last segment: the
// segment up to its first ".", when what follows is letters, digits and
// dots ("orders.json", "orders.api/", "42.json", ".json"). Django REST
// framework routes "orders.json" and "orders.json/" to the view of
// "orders/" (the format only picks the renderer), so such a spelling must
// meet the same route and guards as the bare path; exgate forwards the
// bare path. It does not allocate.
func formatless(p string) (string, bool) {
	end := len(p)
	if end > 1 && p[end-1] == '/' {
		end--
	}
	start := strings.LastIndexByte(p[:end], '/') + 1
	dot := strings.IndexByte(p[start:end], '.')
	if dot < 0 || start+dot == end-1 {
		return "", false
	}
	for i := start + dot + 1; i < end; i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.') {
			return "", false
		}
	}
	if dot == 0 {
		return p[:start], true // "/orders/.json" is "/orders/"
	}
	return p[:start+dot], true
}

// forwardPath returns the path to forward for a request to r whose
// canonical path is p: the route's own spelling (its literal segments and
// trailing slash) with the request's parameter values, so that the backend
// sees exactly the path the route describes. The default route forwards p.
// It does not allocate when p is already in the route's spelling, nor for
// a route of literal segments only, whose path is the same for every
// request (spelling).
func (r *routePattern) forwardPath(p string) string {
	if r.isDef {
		return p
	}
	if r.spelling != "" {
		return r.spelling
	}
	if r.spelledAsRoute(p) {
		return p
	}
	var b strings.Builder
	b.Grow(len(p) + 1)
	it := segmentIter{p: p}
	for i := range r.segs {
		if r.segs[i].rest {
			b.WriteString(p[it.i:]) // the rest as the request spelled it: canonical already
			return b.String()
		}
		s, _ := it.next()
		b.WriteByte('/')
		if r.segs[i].param {
			b.WriteString(s)
		} else {
			b.WriteString(r.segs[i].lit)
		}
	}
	if r.trailing || len(r.segs) == 0 {
		b.WriteByte('/')
	}
	return b.String()
}

// literalSpelling returns the path forwarded for every request to r when
// its pattern has no parameter: its literal segments as configured, and
// its trailing slash; "" when it has one.
func literalSpelling(r *Route) string {
	if len(r.segs) > 0 && !allLiteral(r.segs) {
		return ""
	}
	var b strings.Builder
	for _, s := range r.segs {
		b.WriteString("/" + s.lit)
	}
	if r.trailing || len(r.segs) == 0 {
		b.WriteByte('/')
	}
	return b.String()
}

// spelledAsRoute reports whether p, which matches r, is spelled exactly as
// the route's pattern.
func (r *routePattern) spelledAsRoute(p string) bool {
	if len(r.segs) == 0 {
		return p == "/"
	}
	rest := r.segs[len(r.segs)-1].rest
	if !rest && strings.HasSuffix(p, "/") != r.trailing {
		return false
	}
	it := segmentIter{p: p}
	for i := range r.segs {
		if r.segs[i].rest {
			return true
		}
		s, _ := it.next()
		if !r.segs[i].param && s != r.segs[i].lit {
			return false
		}
	}
	return true
}
