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
// older than the window, never when a calendar minute turns over. A
// request is counted once, in its 10-second bucket; when that bucket is
// taken for a new 10 seconds (a minute later) its sketches are merged
// into its minute's bucket (Sketch.Merge), and a minute's count is its
// bucket's and those of its 10-second buckets not merged yet. A count
// reported for a window overestimates the true one by at most N/K, N
// being the weight its stripe counted over the window (at most every
// request of the route in the window; about a quarter of them when keys
// spread evenly); it is never below it. While a stripe holds no more than
// K keys of a kind in any bucket, counts are exact.
//
// Memory is bounded: per route that records, 4 stripes × (7 + 16)
// buckets × 4 sketches × K counters (a minute bucket's sketches keep
// room for 2K, which merging needs). Recording costs a lookup of the
// route in a map no lock guards, one or two stripe locks and no
// allocation once a sketch holds K keys. It is safe for concurrent use.
type Tracker struct {
	k    int
	now  func() time.Time
	seed maphash.Seed

	mu     sync.Mutex // serializes adding routes
	routes atomic.Pointer[map[string]*routeTrack]
}

type routeTrack struct {
	stripes [stripes]stripe
}

// stripe is the counts of the keys whose hash lands in it, in the fine
// and the coarse buckets, under one lock.
type stripe struct {
	mu       sync.Mutex
	fine     [fineSlots]bucket
	coarse   [coarseSlots]bucket
	requests int64 // since the start, those counted here (Totals)
	refused  int64
	_        [16]byte
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
	t := &Tracker{k: o.K, now: o.Now, seed: maphash.MakeSeed()}
	t.routes.Store(&map[string]*routeTrack{})
	return t
}

// Record counts one request on route, made at the given time, by id
// (Kind "" for an anonymous request) from addr (invalid when unknown),
// refused or not. The caller passes the time it already read (the
// request's start), which saves a clock read on the hot path.
func (t *Tracker) Record(at time.Time, route string, id Identity, addr netip.Addr, refused bool) {
	if t == nil {
		return
	}
	rt := t.route(route)
	span := at.Unix() / fineWidth
	var w int64
	if refused {
		w = 1
	}
	counted := false
	if addr.IsValid() {
		h := t.addrHash(addr)
		s := &rt.stripes[h%stripes]
		s.mu.Lock()
		b := s.fineBucket(span, t.k)
		b.requests++
		b.refused += w
		s.requests++
		s.refused += w
		b.addrs.AddHashed(addr, h, 1)
		if refused {
			b.adRef.AddHashed(addr, h, 1)
		}
		s.mu.Unlock()
		counted = true
	}
	if id.Kind != "" || !counted {
		h := t.idHash(id)
		s := &rt.stripes[h%stripes]
		s.mu.Lock()
		b := s.fineBucket(span, t.k)
		if !counted {
			b.requests++
			b.refused += w
			s.requests++
			s.refused += w
		}
		if id.Kind != "" {
			b.ids.AddHashed(id, h, 1)
			if refused {
				b.idsRef.AddHashed(id, h, 1)
			}
		}
		s.mu.Unlock()
	}
}

// addrHash returns the hash of addr: its low bits choose the stripe that
// counts it, its high bits its place in the stripe's sketches' index.
func (t *Tracker) addrHash(addr netip.Addr) uint64 {
	a16 := addr.As16()
	return maphash.Bytes(t.seed, a16[:])
}

// idHash returns the hash of id, like addrHash (of the id alone: an
// account and a token of the same id are told apart by their kind).
func (t *Tracker) idHash(id Identity) uint64 { return maphash.String(t.seed, id.ID) }

// route returns the route's buckets, made on first use.
func (t *Tracker) route(name string) *routeTrack {
	if rt := (*t.routes.Load())[name]; rt != nil {
		return rt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.routes.Load()
	if rt := old[name]; rt != nil {
		return rt
	}
	m := make(map[string]*routeTrack, len(old)+1)
	for n, rt := range old {
		m[n] = rt
	}
	rt := &routeTrack{}
	m[name] = rt
	t.routes.Store(&m)
	return rt
}

// routeList returns the routes that recorded, by name.
func (t *Tracker) routeList() map[string]*routeTrack { return *t.routes.Load() }

// fineBucket returns the 10-second bucket of span, first merging what it
// held of an earlier span into that span's minute bucket; called
// locked. A request recorded late, after its slot was taken by a later
// span, is counted in that later span.
func (s *stripe) fineBucket(span int64, k int) *bucket {
	b := &s.fine[span%fineSlots]
	switch {
	case b.ids == nil:
		b.init(span, k)
	case b.at < span:
		s.fold(b, k)
		b.reset(span)
	}
	return b
}

// fold merges the fine bucket b into its minute's coarse bucket, unless
// that one already counts a later minute (b is then older than every
// window); called locked.
func (s *stripe) fold(b *bucket, k int) {
	m := b.at / (60 / fineWidth)
	c := &s.coarse[m%coarseSlots]
	switch {
	case c.ids == nil:
		c.init(m, k)
	case c.at < m:
		c.reset(m)
	case c.at > m:
		return
	}
	c.requests += b.requests
	c.refused += b.refused
	c.ids.Merge(b.ids)
	c.idsRef.Merge(b.idsRef)
	c.addrs.Merge(b.addrs)
	c.adRef.Merge(b.adRef)
}

func (b *bucket) init(at int64, k int) {
	b.ids, b.idsRef = NewSketch[Identity](k), NewSketch[Identity](k)
	b.addrs, b.adRef = NewSketch[netip.Addr](k), NewSketch[netip.Addr](k)
	b.at = at
}

// reset empties the bucket to count span at.
func (b *bucket) reset(at int64) {
	b.at, b.requests, b.refused = at, 0, 0
	b.ids.Reset()
	b.idsRef.Reset()
	b.addrs.Reset()
	b.adRef.Reset()
}

// inWindow calls each with the buckets of the stripe that a window of
// the given minutes covers at Unix second now (see Span), a span at a
// time: for 1 minute each 10-second bucket, for 5 and 15 each minute's
// bucket with its 10-second buckets not merged into it yet; called
// locked.
func (s *stripe) inWindow(window int, now int64, each func(span []*bucket)) {
	var group [1 + fineSlots]*bucket
	if window <= 1 {
		cur := now / fineWidth
		for at := cur - 60/fineWidth; at <= cur; at++ {
			if b := &s.fine[at%fineSlots]; b.ids != nil && b.at == at {
				group[0] = b
				each(group[:1])
			}
		}
		return
	}
	cur := now / 60
	for at := cur - int64(window); at <= cur; at++ {
		g := group[:0]
		if b := &s.coarse[at%coarseSlots]; b.ids != nil && b.at == at {
			g = append(g, b)
		}
		for i := range s.fine {
			if b := &s.fine[i]; b.ids != nil && b.at/(60/fineWidth) == at {
				g = append(g, b)
			}
		}
		if len(g) > 0 {
			each(g)
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
	for _, rt := range t.routeList() {
		for i := range rt.stripes {
			s := &rt.stripes[i]
			s.mu.Lock()
			requests, refused = requests+s.requests, refused+s.refused
			s.mu.Unlock()
		}
	}
	return requests, refused
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
	var out []RouteTop
	for name, rt := range t.routeList() {
		if top := rt.top(window, now, t.k, n); top.Requests > 0 {
			top.Route = name
			out = append(out, top)
		}
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

// top returns the route's counts over the window, for Top.
func (rt *routeTrack) top(window int, now int64, k, n int) RouteTop {
	ids, idsRef := newTally[Identity](), newTally[Identity]()
	addrs, adRef := newTally[netip.Addr](), newTally[netip.Addr]()
	var top RouteTop
	for i := range rt.stripes {
		s := &rt.stripes[i]
		s.mu.Lock()
		s.inWindow(window, now, func(span []*bucket) {
			var nIDs, nAddrs int64
			for _, b := range span {
				top.Requests += b.requests
				top.Refused += b.refused
				nIDs, nAddrs = nIDs+b.ids.Total(), nAddrs+b.addrs.Total()
				ids.add(b.ids)
				idsRef.add(b.idsRef)
				addrs.add(b.addrs)
				adRef.add(b.adRef)
			}
			top.ErrorBound += max(nIDs, nAddrs) / int64(k)
		})
		s.mu.Unlock()
		ids.endStripe()
		idsRef.endStripe()
		addrs.endStripe()
		adRef.endStripe()
	}
	top.IDsByRefused, top.IDsByRequests = topOf(idsRef.all, n), topOf(ids.all, n)
	top.AddrsByRefused, top.AddrsByRequests = topOf(adRef.all, n), topOf(addrs.all, n)
	return top
}

// tally adds up the counts of one kind of key over a window: a key's
// count is the sum, over the buckets of its stripe in the window, of its
// count where a bucket holds it and of the bucket's Floor where not (as
// count and as error), so that it stays at least the true count.
type tally[K comparable] struct {
	all    map[K]Entry[K]
	stripe map[K]Entry[K] // the stripe's keys, less the floors of the buckets holding them
	floor  int64          // the floors of the stripe's buckets, summed
}

func newTally[K comparable]() *tally[K] {
	return &tally[K]{all: map[K]Entry[K]{}, stripe: map[K]Entry[K]{}}
}

func (c *tally[K]) add(s *Sketch[K]) {
	f := s.Floor()
	c.floor += f
	s.Each(func(e Entry[K]) {
		x := c.stripe[e.Key]
		x.Key, x.Count, x.Err = e.Key, x.Count+e.Count-f, x.Err+e.Err-f
		c.stripe[e.Key] = x
	})
}

// endStripe moves the stripe's keys into all (a key is counted in one
// stripe only).
func (c *tally[K]) endStripe() {
	for k, e := range c.stripe {
		e.Count, e.Err = e.Count+c.floor, e.Err+c.floor
		c.all[k] = e
	}
	clear(c.stripe)
	c.floor = 0
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
	now := t.now().Unix()
	found, ambiguous := "", false
	for _, rt := range t.routeList() {
		for i := range rt.stripes {
			s := &rt.stripes[i]
			s.mu.Lock()
			s.inWindow(maxWindow, now, func(span []*bucket) {
				for _, b := range span {
					b.ids.Each(func(e Entry[Identity]) {
						if e.Key.Kind == kind && strings.HasPrefix(e.Key.ID, prefix) {
							ambiguous = ambiguous || (found != "" && found != e.Key.ID)
							found = e.Key.ID
						}
					})
				}
			})
			s.mu.Unlock()
		}
	}
	return found, found != "" && !ambiguous
}
