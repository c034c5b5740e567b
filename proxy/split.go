package proxy

import (
	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/upstream"
)

// newSplit compiles route rc's split between services (routes[].split):
// nil when it has none. A service it names that was not started (a
// reload naming a new service: upstream is restart-only) keeps its share,
// of no service: the requests drawn for it answer 503
// upstream_unavailable until the restart (pickInstance), as a route
// pointed at such a service does, and are never sent to another.
func (g *Gateway) newSplit(rc config.Route) (*upstream.Split, bool) {
	if len(rc.Split) == 0 {
		return nil, false
	}
	targets := make([]upstream.SplitTarget, len(rc.Split))
	for i, t := range rc.Split {
		targets[i] = upstream.SplitTarget{Service: g.fleet.Service(t.Service), Weight: uint32(t.Weight)}
	}
	return upstream.NewSplit(targets), rc.Sticky == config.StickyAccount
}

// splitService is the service of st's route's split that st's request
// goes to (nil when the one drawn was not started: newSplit): with sticky: account, the one its account (the key its limits
// and duplicate protection count it by: the verified account, else the
// token's id, else the token) always goes to; otherwise, and for an
// anonymous request, one drawn by weight.
func (g *Gateway) splitService(st *requestState) *upstream.Service {
	r := st.route
	if r.sticky {
		if key := g.identityKey(st); key != "" {
			return r.split.PickSticky(key)
		}
		if st.caller.token != "" {
			return r.split.PickSticky(st.caller.token)
		}
	}
	return r.split.Pick()
}
