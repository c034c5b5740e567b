package proxy

import (
	"sync"
	"time"
)

// recentRefusalsKept is how many sampled refusals the console lists.
const recentRefusalsKept = 50

// RecentRefusal is one refusal of a sampled request, as the console's
// /admin/refusals lists it: enough to open its trace, and nothing of
// who sent it.
type RecentRefusal struct {
	Time      time.Time `json:"time"`
	Route     string    `json:"route"`
	Method    string    `json:"method"`
	Status    int       `json:"status"`
	Code      string    `json:"code"`
	RequestID string    `json:"request_id"`
	TraceID   string    `json:"trace_id"`
}

// recentRefusals keeps the last refusals of sampled requests, newest
// last, in a ring of fixed size.
type recentRefusals struct {
	mu   sync.Mutex
	ring []RecentRefusal
	next int
	full bool
}

func newRecentRefusals(n int) *recentRefusals {
	return &recentRefusals{ring: make([]RecentRefusal, n)}
}

// add records the refusal of st's request, of method, answered at t.
func (rr *recentRefusals) add(st *requestState, method string, t time.Time) {
	route := "default"
	if st.route != nil {
		route = st.route.Name
	}
	e := RecentRefusal{Time: t, Route: route, Method: method, Status: st.rw.status, Code: st.code, RequestID: st.id,
		TraceID: st.span.SpanContext().TraceID().String()}
	rr.mu.Lock()
	rr.ring[rr.next] = e
	rr.next++
	if rr.next == len(rr.ring) {
		rr.next, rr.full = 0, true
	}
	rr.mu.Unlock()
}

// list returns the refusals kept, newest first.
func (rr *recentRefusals) list() []RecentRefusal {
	out := []RecentRefusal{}
	if rr == nil {
		return out
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	n := rr.next
	if rr.full {
		n = len(rr.ring)
	}
	for i := 1; i <= n; i++ {
		out = append(out, rr.ring[(rr.next-i+len(rr.ring))%len(rr.ring)])
	}
	return out
}

// RecentRefusals returns the last refusals of sampled requests, newest
// first, and whether tracing is on (off, none is kept).
func (g *Gateway) RecentRefusals() (tracing bool, refusals []RecentRefusal) {
	return g.tracer != nil, g.refusals.list()
}
