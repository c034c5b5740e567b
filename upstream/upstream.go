// Package upstream is exgate's side of the backend fleet: the named
// services a route forwards to, the instances each service holds (from a
// static list, or a Source that discovers them), the choice of an instance
// for each request (least-request with the power of two choices, by
// weight), passive outlier ejection and active health checks, and the
// Transport requests go out on.
//
// A Service keeps an instance's state across updates of its list: an
// instance named again keeps its in-flight count, its failure counters and
// its ejection. The proxy asks a Service for an instance (Pick) and reports
// how the request went (Instance.Done); nothing here knows of routes,
// clients or orders.
package upstream

import (
	"context"
	"net/url"
)

// Endpoint is one instance of a service as a source names it.
type Endpoint struct {
	// URL is the instance's base URL (http or https); a path in it is
	// prefixed to every forwarded path.
	URL *url.URL
	// Weight is the instance's share of the work relative to its peers
	// of the same priority. Zero means 1.
	Weight uint32
	// Priority is the instance's level, lower first (an SRV record's
	// priority): a service sends requests to the instances of its lowest
	// level that is healthy enough, and to a higher level only while no
	// lower one is (Service). Zero, every static instance's, is the first.
	Priority uint16
}

// Source finds a service's instances: a static list, DNS A/AAAA records
// re-resolved on an interval, or SRV records.
type Source interface {
	// Run calls update with the full list of endpoints each time it
	// changes, first as soon as it is known, until ctx ends. update must
	// not be called concurrently.
	Run(ctx context.Context, update func([]Endpoint))
}

// Static is a Source of a fixed list of endpoints.
type Static []Endpoint

// Run calls update once with the list and returns when ctx ends.
func (s Static) Run(ctx context.Context, update func([]Endpoint)) {
	update(s)
	<-ctx.Done()
}
