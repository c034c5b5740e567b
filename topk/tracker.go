package topk

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Identity is whom a request was counted as: an account's key or an
// opaque token's id (HMACs, never a token or a user id).
type Identity struct {
	// Kind is "account" or "token".
	Kind string
	// ID is the account key or token id.
	ID string
}

// Windows are the spans, in minutes, that Top reports.
var Windows = [...]int{1, 5, 15}

const (
	minutes = 15 // the longest window; one bucket per minute
	stripes = 4  // independently locked parts of a bucket, by key hash
)

// TrackerOptions configure a Tracker. The zero value is usable.
type TrackerOptions struct {
	// K is the number of counters of each sketch stripe. Zero means 32.
	K int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Tracker counts, per route and per minute, requests and refusals by
// identity and by client address, in Space-Saving sketches split into
// stripes by key hash (a key always lands in the same stripe, so each
// stripe is an exact Space-Saving summary of its keys). A count reported
// for a window overestimates the true one by at most N/K, N being the
// weight its stripe counted over the window (at most every request of
// the route in the window; about a quarter of them when keys spread
// evenly); it is never below it.
//
// Memory is bounded: per route that records, 15 buckets × 4 stripes ×
// 4 sketches × K counters. Recording costs two stripe locks and, for a
// key already counted, no allocation. It is safe for concurrent use.
type Tracker struct {
	k    int
	now  func() time.Time
	seed maphash.Seed

	mu     sync.RWMutex
	routes map[string]*routeTrack

	requests atomic.Int64
	refused  atomic.Int64
}

type routeTrack struct {
	buckets [minutes][stripes]stripe
}

type stripe struct {
	mu           sync.Mutex
	minute       int64 // unix minute the counts belong to
	requests     int64 // requests whose address (or, without one, identity) lands here
	refused      int64
	ids, idsRef  *Sketch[Identity]
	addrs, adRef *Sketch[netip.Addr]
	_            [16]byte
}

// NewTracker returns an empty Tracker.
func NewTracker(o TrackerOptions) *Tracker {
	if o.K <= 0 {
		o.K = 32
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Tracker{k: o.K, now: o.Now, seed: maphash.MakeSeed(), routes: map[string]*routeTrack{}}
}

// Record counts one request on route, made at the given time, by id
// (Kind "" for an anonymous request) from addr (invalid when unknown),
// refused or not. The caller passes the time it already read (the
// request's start), which saves a clock read on the hot path.
func (t *Tracker) Record(at time.Time, route string, id Identity, addr netip.Addr, refused bool) {
	if t == nil {
		return
	}
	t.requests.Add(1)
	if refused {
		t.refused.Add(1)
	}
	rt := t.route(route)
	minute := at.Unix() / 60
	b := &rt.buckets[minute%minutes]
	var w int64
	if refused {
		w = 1
	}
	counted := false
	if addr.IsValid() {
		a16 := addr.As16()
		s := &b[maphash.Bytes(t.seed, a16[:])%stripes]
		s.mu.Lock()
		s.roll(minute, t.k)
		s.requests++
		s.refused += w
		s.addrs.Add(addr, 1)
		if refused {
			s.adRef.Add(addr, 1)
		}
		s.mu.Unlock()
		counted = true
	}
	if id.Kind != "" || !counted {
		s := &b[maphash.String(t.seed, id.ID)%stripes]
		s.mu.Lock()
		s.roll(minute, t.k)
		if !counted {
			s.requests++
			s.refused += w
		}
		if id.Kind != "" {
			s.ids.Add(id, 1)
			if refused {
				s.idsRef.Add(id, 1)
			}
		}
		s.mu.Unlock()
	}
}

// route returns the route's buckets, made on first use.
func (t *Tracker) route(name string) *routeTrack {
	t.mu.RLock()
	rt := t.routes[name]
	t.mu.RUnlock()
	if rt != nil {
		return rt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rt = t.routes[name]; rt == nil {
		rt = &routeTrack{}
		t.routes[name] = rt
	}
	return rt
}

// roll empties the stripe when it holds an older minute; called locked.
func (s *stripe) roll(minute int64, k int) {
	if s.ids == nil {
		s.ids, s.idsRef = NewSketch[Identity](k), NewSketch[Identity](k)
		s.addrs, s.adRef = NewSketch[netip.Addr](k), NewSketch[netip.Addr](k)
		s.minute = minute
		return
	}
	if s.minute == minute {
		return
	}
	s.minute, s.requests, s.refused = minute, 0, 0
	s.ids.Reset()
	s.idsRef.Reset()
	s.addrs.Reset()
	s.adRef.Reset()
}

// Totals returns the requests and refusals recorded since the start.
func (t *Tracker) Totals() (requests, refused int64) {
	return t.requests.Load(), t.refused.Load()
}

// K returns the counters per sketch stripe.
func (t *Tracker) K() int { return t.k }

// RouteTop is one route's heavy hitters over one window.
type RouteTop struct {
	Route           string
	Requests        int64
	Refused         int64
	IDsByRefused    []Entry[Identity]
	IDsByRequests   []Entry[Identity]
	AddrsByRefused  []Entry[netip.Addr]
	AddrsByRequests []Entry[netip.Addr]
	ErrorBound      int64 // the largest overestimate of any count here
}

// Top returns, for every route that recorded within the last window
// minutes, its n heaviest identities and addresses by refusals and by
// requests; routes sorted by refusals, then name.
func (t *Tracker) Top(window, n int) []RouteTop {
	window = min(max(window, 1), minutes)
	now := t.now().Unix() / 60
	t.mu.RLock()
	names := make([]string, 0, len(t.routes))
	for name := range t.routes {
		names = append(names, name)
	}
	t.mu.RUnlock()
	var out []RouteTop
	for _, name := range names {
		rt := t.route(name)
		ids, idsRef := map[Identity]Entry[Identity]{}, map[Identity]Entry[Identity]{}
		addrs, adRef := map[netip.Addr]Entry[netip.Addr]{}, map[netip.Addr]Entry[netip.Addr]{}
		top := RouteTop{Route: name}
		var bound int64
		for m := now - int64(window) + 1; m <= now; m++ {
			for i := range rt.buckets[m%minutes] {
				s := &rt.buckets[m%minutes][i]
				s.mu.Lock()
				if s.ids != nil && s.minute == m {
					top.Requests += s.requests
					top.Refused += s.refused
					bound += max(s.ids.Bound(), s.addrs.Bound())
					merge(ids, s.ids)
					merge(idsRef, s.idsRef)
					merge(addrs, s.addrs)
					merge(adRef, s.adRef)
				}
				s.mu.Unlock()
			}
		}
		if top.Requests == 0 {
			continue
		}
		top.ErrorBound = bound
		top.IDsByRefused, top.IDsByRequests = topOf(idsRef, n), topOf(ids, n)
		top.AddrsByRefused, top.AddrsByRequests = topOf(adRef, n), topOf(addrs, n)
		out = append(out, top)
	}
	slices.SortFunc(out, func(a, b RouteTop) int {
		if a.Refused != b.Refused {
			if a.Refused > b.Refused {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Route, b.Route)
	})
	return out
}

func merge[K comparable](into map[K]Entry[K], s *Sketch[K]) {
	s.Each(func(e Entry[K]) {
		c := into[e.Key]
		c.Key, c.Count, c.Err = e.Key, c.Count+e.Count, c.Err+e.Err
		into[e.Key] = c
	})
}

func topOf[K comparable](m map[K]Entry[K], n int) []Entry[K] {
	out := make([]Entry[K], 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	SortEntries(out)
	return out[:min(n, len(out))]
}

// Resolve returns the full id of the identity of the given kind whose id
// starts with prefix (as the access log and Top's readers show it), if
// the Tracker counted exactly one such identity within the last 15
// minutes.
func (t *Tracker) Resolve(kind, prefix string) (string, bool) {
	if prefix == "" {
		return "", false
	}
	t.mu.RLock()
	rts := make([]*routeTrack, 0, len(t.routes))
	for _, rt := range t.routes {
		rts = append(rts, rt)
	}
	t.mu.RUnlock()
	found, ambiguous := "", false
	for _, rt := range rts {
		for m := range rt.buckets {
			for i := range rt.buckets[m] {
				s := &rt.buckets[m][i]
				s.mu.Lock()
				if s.ids != nil {
					s.ids.Each(func(e Entry[Identity]) {
						if e.Key.Kind == kind && strings.HasPrefix(e.Key.ID, prefix) {
							ambiguous = ambiguous || (found != "" && found != e.Key.ID)
							found = e.Key.ID
						}
					})
				}
				s.mu.Unlock()
			}
		}
	}
	return found, found != "" && !ambiguous
}
