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
	fineWidth   = 10 // seconds a fine bucket counts
	fineSlots   = 7  // the 1-minute window: the current 10 seconds and the 6 before
	coarseSlots = 16 // the 15-minute window: the current minute and the 15 before
	maxWindow   = coarseSlots - 1
	stripes     = 4 // independently locked parts of a route's counts, by key hash
)

// TrackerOptions configure a Tracker. The zero value is usable.
type TrackerOptions struct {
	// K is the number of counters of each sketch. Zero means 32.
	K int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Tracker counts, per route, requests and refusals by identity and by
// client address, in Space-Saving sketches split into stripes by key
// hash (a key always lands in the same stripe, so each stripe is an
// exact Space-Saving summary of its keys). Each stripe counts in
// 10-second buckets for the last minute and in minute buckets for the
// last 15, so that every window slides: the 1-minute window is the last
// 60 to 70 seconds, the 5- and 15-minute windows the last 5 to 6 and 15
// to 16 minutes (Span), and a refusal leaves a window only once it is
// older than the window, never when a calendar minute turns over. A count
// reported for a window overestimates the true one by at most N/K, N
// being the weight its stripe counted over the window (at most every
// request of the route in the window; about a quarter of them when keys
// spread evenly); it is never below it.
//
// Memory is bounded: per route that records, 4 stripes × (7 + 16)
// buckets × 4 sketches × K counters. Recording costs two stripe locks
// and, for a key already counted, no allocation. It is safe for
// concurrent use.
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
	stripes [stripes]stripe
}

// stripe is the counts of the keys whose hash lands in it, in the fine
// and the coarse buckets, under one lock.
type stripe struct {
	mu     sync.Mutex
	fine   [fineSlots]bucket
	coarse [coarseSlots]bucket
	_      [16]byte
}

// bucket is what a stripe counted in one span of time.
type bucket struct {
	at           int64 // the span's number: Unix seconds over the span's width
	requests     int64 // requests whose address (or, without one, identity) lands here
	refused      int64
	ids, idsRef  *Sketch[Identity]
	addrs, adRef *Sketch[netip.Addr]
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
	sec := at.Unix()
	var w int64
	if refused {
		w = 1
	}
	counted := false
	if addr.IsValid() {
		a16 := addr.As16()
		s := &rt.stripes[maphash.Bytes(t.seed, a16[:])%stripes]
		s.mu.Lock()
		for _, b := range s.buckets(sec, t.k) {
			b.requests++
			b.refused += w
			b.addrs.Add(addr, 1)
			if refused {
				b.adRef.Add(addr, 1)
			}
		}
		s.mu.Unlock()
		counted = true
	}
	if id.Kind != "" || !counted {
		s := &rt.stripes[maphash.String(t.seed, id.ID)%stripes]
		s.mu.Lock()
		for _, b := range s.buckets(sec, t.k) {
			if !counted {
				b.requests++
				b.refused += w
			}
			if id.Kind != "" {
				b.ids.Add(id, 1)
				if refused {
					b.idsRef.Add(id, 1)
				}
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

// buckets returns the fine and the coarse bucket of the Unix second sec,
// emptied first when they held an older span; called locked.
func (s *stripe) buckets(sec int64, k int) [2]*bucket {
	f, m := sec/fineWidth, sec/60
	b := [2]*bucket{&s.fine[f%fineSlots], &s.coarse[m%coarseSlots]}
	b[0].roll(f, k)
	b[1].roll(m, k)
	return b
}

// roll makes the bucket count span at, emptying it when it held another.
func (b *bucket) roll(at int64, k int) {
	if b.ids == nil {
		b.ids, b.idsRef = NewSketch[Identity](k), NewSketch[Identity](k)
		b.addrs, b.adRef = NewSketch[netip.Addr](k), NewSketch[netip.Addr](k)
		b.at = at
		return
	}
	if b.at == at {
		return
	}
	b.at, b.requests, b.refused = at, 0, 0
	b.ids.Reset()
	b.idsRef.Reset()
	b.addrs.Reset()
	b.adRef.Reset()
}

// inWindow returns the buckets of the stripe that a window of the given
// minutes covers at Unix second now (see Span); called locked.
func (s *stripe) inWindow(window int, now int64, each func(*bucket)) {
	slots, width, n := s.coarse[:], int64(60), int64(window)
	if window <= 1 {
		slots, width, n = s.fine[:], fineWidth, 60/fineWidth
	}
	cur := now / width
	for at := cur - n; at <= cur; at++ {
		if b := &slots[at%int64(len(slots))]; b.ids != nil && b.at == at {
			each(b)
		}
	}
}

// Span returns how far back a window of the given minutes reaches now:
// the window's minutes and the part of the current 10 seconds (for 1
// minute) or of the current minute (for 5 and 15) already gone.
func (t *Tracker) Span(window int) time.Duration {
	window = min(max(window, 1), maxWindow)
	now := t.now()
	width := time.Minute
	if window == 1 {
		width = fineWidth * time.Second
	}
	return time.Duration(window)*time.Minute + time.Duration(now.UnixNano()%int64(width))
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

// Top returns, for every route that recorded within the window of the
// given minutes (1, 5 or 15; see Span), its n heaviest identities and
// addresses by refusals and by requests; routes sorted by refusals, then
// name.
func (t *Tracker) Top(window, n int) []RouteTop {
	window = min(max(window, 1), maxWindow)
	now := t.now().Unix()
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
		for i := range rt.stripes {
			s := &rt.stripes[i]
			s.mu.Lock()
			s.inWindow(window, now, func(b *bucket) {
				top.Requests += b.requests
				top.Refused += b.refused
				top.ErrorBound += max(b.ids.Bound(), b.addrs.Bound())
				merge(ids, b.ids)
				merge(idsRef, b.idsRef)
				merge(addrs, b.addrs)
				merge(adRef, b.adRef)
			})
			s.mu.Unlock()
		}
		if top.Requests == 0 {
			continue
		}
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
	now := t.now().Unix()
	found, ambiguous := "", false
	for _, rt := range rts {
		for i := range rt.stripes {
			s := &rt.stripes[i]
			s.mu.Lock()
			s.inWindow(maxWindow, now, func(b *bucket) {
				b.ids.Each(func(e Entry[Identity]) {
					if e.Key.Kind == kind && strings.HasPrefix(e.Key.ID, prefix) {
						ambiguous = ambiguous || (found != "" && found != e.Key.ID)
						found = e.Key.ID
					}
				})
			})
			s.mu.Unlock()
		}
	}
	return found, found != "" && !ambiguous
}
