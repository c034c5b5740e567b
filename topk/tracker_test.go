package topk

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

// record is one request given to Record, kept to count it exactly.
type record struct {
	at      int64 // Unix seconds
	route   string
	id      Identity
	addr    netip.Addr
	refused bool
}

// exactTop is what Top answers for the records, counted exactly: a
// window's spans are its 10-second spans (1 minute) or its minutes (5 and
// 15), and its error bound the sum, over stripes and spans, of the larger
// of the identities and the addresses the span counted in that stripe,
// over k — what the Tracker answered when it counted every request in a
// 10-second and a minute bucket, whenever no bucket held more than k keys.
func exactTop(tr *Tracker, recs []record, window int, now int64) []RouteTop {
	width, n := int64(60), int64(window)
	if window == 1 {
		width, n = fineWidth, 60/fineWidth
	}
	type spanKey struct {
		route  string
		stripe uint64
		span   int64
	}
	routes := map[string]*RouteTop{}
	ids, idsRef := map[string]map[Identity]int64{}, map[string]map[Identity]int64{}
	addrs, adRef := map[string]map[netip.Addr]int64{}, map[string]map[netip.Addr]int64{}
	nIDs, nAddrs := map[spanKey]int64{}, map[spanKey]int64{}
	for _, r := range recs {
		span := r.at / width
		if span < now/width-n || span > now/width {
			continue
		}
		top := routes[r.route]
		if top == nil {
			top = &RouteTop{Route: r.route}
			routes[r.route] = top
			ids[r.route], idsRef[r.route] = map[Identity]int64{}, map[Identity]int64{}
			addrs[r.route], adRef[r.route] = map[netip.Addr]int64{}, map[netip.Addr]int64{}
		}
		top.Requests++
		if r.refused {
			top.Refused++
		}
		if r.id.Kind != "" {
			ids[r.route][r.id]++
			nIDs[spanKey{r.route, tr.idHash(r.id) % stripes, span}]++
			if r.refused {
				idsRef[r.route][r.id]++
			}
		}
		if r.addr.IsValid() {
			addrs[r.route][r.addr]++
			nAddrs[spanKey{r.route, tr.addrHash(r.addr) % stripes, span}]++
			if r.refused {
				adRef[r.route][r.addr]++
			}
		}
	}
	for sk := range joinKeys(nIDs, nAddrs) {
		routes[sk.route].ErrorBound += max(nIDs[sk], nAddrs[sk]) / int64(tr.K())
	}
	var out []RouteTop
	for name, top := range routes {
		top.IDsByRequests, top.IDsByRefused = exactEntries(ids[name]), exactEntries(idsRef[name])
		top.AddrsByRequests, top.AddrsByRefused = exactEntries(addrs[name]), exactEntries(adRef[name])
		out = append(out, *top)
	}
	slices.SortFunc(out, func(a, b RouteTop) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(a.Route, b.Route))
	})
	return out
}

func joinKeys[K comparable](a, b map[K]int64) map[K]bool {
	out := map[K]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func exactEntries[K comparable](m map[K]int64) []Entry[K] {
	out := []Entry[K]{}
	for k, c := range m {
		out = append(out, Entry[K]{Key: k, Count: c})
	}
	return inOrder(out)
}

// inOrder sorts entries by count, largest first, then by key: Top leaves
// equal counts in any order.
func inOrder[K comparable](es []Entry[K]) []Entry[K] {
	slices.SortFunc(es, func(a, b Entry[K]) int {
		if c := cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Err, b.Err)); c != 0 {
			return c
		}
		return cmp.Compare(fmt.Sprint(a.Key), fmt.Sprint(b.Key))
	})
	return es
}

func normalized(tops []RouteTop) []RouteTop {
	if tops == nil {
		tops = []RouteTop{}
	}
	for i := range tops {
		t := &tops[i]
		t.IDsByRequests, t.IDsByRefused = inOrder(t.IDsByRequests), inOrder(t.IDsByRefused)
		t.AddrsByRequests, t.AddrsByRefused = inOrder(t.AddrsByRequests), inOrder(t.AddrsByRefused)
	}
	return tops
}

// requests returns n requests' worth of Record arguments from a few
// clients (at most 6 identities and 5 addresses, some anonymous or with no
// address), a quarter of them refused, at times step apart.
func requests(seed uint64, n int, start time.Time, step func(r *rand.Rand) time.Duration) []record {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := []Identity{{}, {"account", "a1"}, {"account", "a2"}, {"account", "a3"}, {"account", "a4"}, {"token", "t1"}, {"token", "a1"}}
	addrs := []netip.Addr{{}, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("198.51.100.9")}
	at := start
	out := make([]record, n)
	for i := range out {
		at = at.Add(step(r))
		out[i] = record{at.Unix(), []string{"place_order", "ticker"}[r.IntN(2)], ids[r.IntN(len(ids))], addrs[r.IntN(len(addrs))], r.IntN(4) == 0}
		if out[i].id.Kind == "" && !out[i].addr.IsValid() && r.IntN(2) == 0 {
			out[i].addr = addrs[1]
		}
	}
	return out
}

// stepTable is how far apart requests are, in the cases of the folding
// tests: across 10-second and minute boundaries, folds, and idle spells
// longer than every window.
var stepTable = []struct {
	name string
	step func(r *rand.Rand) time.Duration
}{
	{"steady", func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(6000)) * time.Millisecond }},
	{"sparse", func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(40)) * time.Second }},
	{"bursts and pauses", func(r *rand.Rand) time.Duration {
		if r.IntN(40) == 0 {
			return time.Duration(1+r.IntN(20)) * time.Minute
		}
		return time.Duration(r.IntN(300)) * time.Millisecond
	}},
	{"on the boundaries", func(r *rand.Rand) time.Duration { // :59 → :00 → :09 → :10 …
		return []time.Duration{time.Second, 9 * time.Second, time.Second, 49 * time.Second}[r.IntN(4)]
	}},
}

// TestTrackerFoldExact: a request is counted once, in its 10-second
// bucket, which is merged into its minute's bucket a minute later; with
// few keys (no bucket holds more than K of a kind) Top answers, after
// every request and for every window, exactly what counting each request
// in both buckets answered: the exact counts in the window, no error, and
// the same error bound.
func TestTrackerFoldExact(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(59 * time.Second)
	for i, tc := range stepTable {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: start}
			tr := NewTracker(TrackerOptions{K: 8, Now: c.Now})
			recs := requests(uint64(i), 700, start, tc.step)
			recent := 0 // the first request of the last 16 minutes
			for j, r := range recs {
				c.t = time.Unix(r.at, int64(j%1000)*int64(time.Millisecond))
				tr.Record(c.t, r.route, r.id, r.addr, r.refused)
				for recs[recent].at < r.at-16*60 {
					recent++
				}
				for _, w := range Windows {
					got, want := normalized(tr.Top(w, 100)), normalized(exactTop(tr, recs[recent:j+1], w, r.at))
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("after request %d at %s, %d-minute window:\n got %+v\nwant %+v", j, c.t.UTC().Format(time.TimeOnly), w, got, want)
					}
				}
			}
			var req, ref int64
			for _, r := range recs {
				req++
				if r.refused {
					ref++
				}
			}
			if gotReq, gotRef := tr.Totals(); gotReq != req || gotRef != ref {
				t.Errorf("totals %d %d, want %d %d", gotReq, gotRef, req, ref)
			}
		})
	}
}

// TestTrackerFoldBound: with more keys than counters, Top's counts over
// every window stay within its error bound of the exact ones and never
// below them, every key counted more than the bound is listed, and the
// route's requests and refusals are exact.
func TestTrackerFoldBound(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(59 * time.Second)
	for i, tc := range stepTable {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: start}
			tr := NewTracker(TrackerOptions{K: 2, Now: c.Now})
			r := rand.New(rand.NewPCG(uint64(i), 2))
			var recs []record
			at := start
			for j := range 1500 {
				at = at.Add(tc.step(r))
				k := r.IntN(40)
				if r.IntN(3) == 0 {
					k = r.IntN(3) // a few heavy hitters
				}
				rec := record{at.Unix(), "place_order", Identity{"token", "t" + strconv.Itoa(k)},
					netip.AddrFrom4([4]byte{10, 0, 0, byte(k)}), r.IntN(3) == 0}
				recs = append(recs, rec)
				c.t = at
				tr.Record(at, rec.route, rec.id, rec.addr, rec.refused)
				if j%7 != 0 {
					continue
				}
				for _, w := range Windows {
					checkBound(t, tr.Top(w, 100), exactTop(tr, recs[max(len(recs)-2000, 0):], w, rec.at))
				}
				if t.Failed() {
					t.Fatalf("after request %d at %s", j, at.UTC().Format(time.TimeOnly))
				}
			}
		})
	}
}

func checkBound(t *testing.T, got, want []RouteTop) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d routes, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Route != w.Route || g.Requests != w.Requests || g.Refused != w.Refused || g.ErrorBound != w.ErrorBound {
			t.Errorf("route %+v, want %+v", g, w)
		}
		within(t, "identities", g.IDsByRequests, w.IDsByRequests, g.ErrorBound)
		within(t, "identities by refusals", g.IDsByRefused, w.IDsByRefused, g.ErrorBound)
		within(t, "addresses", g.AddrsByRequests, w.AddrsByRequests, g.ErrorBound)
		within(t, "addresses by refusals", g.AddrsByRefused, w.AddrsByRefused, g.ErrorBound)
	}
}

func within[K comparable](t *testing.T, what string, got, exact []Entry[K], bound int64) {
	t.Helper()
	truth := map[K]int64{}
	for _, e := range exact {
		truth[e.Key] = e.Count
	}
	listed := map[K]bool{}
	for _, e := range got {
		listed[e.Key] = true
		if tc := truth[e.Key]; e.Count < tc || e.Count > tc+bound || e.Count-e.Err > tc || e.Err > bound {
			t.Errorf("%s: %v counted %d (error %d), truly %d, bound %d", what, e.Key, e.Count, e.Err, tc, bound)
		}
	}
	for k, c := range truth {
		if c > bound && !listed[k] {
			t.Errorf("%s: %v truly %d > bound %d, not listed", what, k, c, bound)
		}
	}
}
