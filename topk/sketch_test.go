package topk

import (
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestSketchBound feeds skewed streams and checks Space-Saving's
// guarantees against exact counts: every reported count is at least the
// true one and at most true + N/k, and every key above N/k is kept.
func TestSketchBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		k, n int
		keys int
		zipf float64
	}{
		{"few keys", 8, 1000, 5, 1.5},
		{"zipf", 16, 20000, 5000, 1.2},
		{"flat", 16, 20000, 200, 1.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), tc.zipf, 1, uint64(tc.keys-1))
			_ = r
			s := NewSketch[string](tc.k)
			exact := map[string]int64{}
			for i := 0; i < tc.n; i++ {
				k := strconv.FormatUint(z.Uint64(), 10)
				s.Add(k, 1)
				exact[k]++
			}
			bound := s.Bound()
			if bound != int64(tc.n/tc.k) {
				t.Fatalf("bound %d", bound)
			}
			kept := map[string]bool{}
			s.Each(func(e Entry[string]) {
				kept[e.Key] = true
				if e.Count < exact[e.Key] || e.Count > exact[e.Key]+bound || e.Count-e.Err > exact[e.Key] {
					t.Errorf("%s: count %d err %d, true %d, bound %d", e.Key, e.Count, e.Err, exact[e.Key], bound)
				}
			})
			for k, c := range exact {
				if c > bound && !kept[k] {
					t.Errorf("%s counted %d > N/k = %d but dropped", k, c, bound)
				}
			}
			if top := s.Top(1); len(top) != 1 || top[0].Key != "0" {
				t.Errorf("top: %+v", top)
			}
		})
	}
}

// TestSketchIndex drives a sketch's own index through insertions and
// replacements with hashes that collide and wrap around its end, checking
// after every Add that each key is found where it is, the index holds
// nothing else, the heap is a heap, and counts hold Space-Saving's bound.
func TestSketchIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		hash func(k int) uint64
	}{
		{"maphash", func(k int) uint64 { return maphash.Comparable(seed, k) }},
		{"one place", func(int) uint64 { return 0 }},
		{"the last places", func(k int) uint64 { return ^uint64(0) - uint64(k%2) }},
		{"three places", func(k int) uint64 { return uint64(k%3) << 62 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 10))
			s := NewSketch[int](8)
			exact := map[int]int64{}
			for i := range 3000 {
				k := r.IntN(4 + i/300) // a few keys, then more than the counters
				s.AddHashed(k, tc.hash(k), 1)
				exact[k]++
				checkIndex(t, s, exact)
				if t.Failed() {
					t.Fatalf("after %d adds", i+1)
				}
			}
			m := NewSketch[int](8)
			m.Merge(s)
			checkIndex(t, m, exact)
		})
	}
}

func checkIndex(t *testing.T, s *Sketch[int], exact map[int]int64) {
	t.Helper()
	used := 0
	for _, j := range s.index {
		if j != 0 {
			used++
		}
	}
	if used != len(s.slots) {
		t.Errorf("index holds %d keys, sketch %d", used, len(s.slots))
	}
	for i, c := range s.slots {
		if j, _ := s.find(c.Key, c.hash); j != int32(i) {
			t.Errorf("key %d of slot %d found at %d", c.Key, i, j)
		}
		if s.heap[s.pos[i]] != int32(i) {
			t.Errorf("slot %d at heap place %d, which holds %d", i, s.pos[i], s.heap[s.pos[i]])
		}
		if c.Count < exact[c.Key] || c.Count-c.Err > exact[c.Key] || c.Count < s.Floor() {
			t.Errorf("key %d: count %d err %d, truly %d, floor %d", c.Key, c.Count, c.Err, exact[c.Key], s.Floor())
		}
	}
	for i := 1; i < len(s.heap); i++ {
		if s.slots[s.heap[(i-1)/2]].Count > s.slots[s.heap[i]].Count {
			t.Errorf("heap place %d below a larger count", i)
		}
	}
}

// TestSketchMerge folds sketches of parts of a stream into one, as the
// Tracker folds its 10-second buckets into their minute's, and checks the
// merged sketch against exact counts: every count at least the true one,
// its error and the floor at most Total/k, a key left out counted at most
// the floor; and parts that never dropped a key merge exactly.
func TestSketchMerge(t *testing.T) {
	zipf := func(keys uint64, z float64) func(part int) string {
		g := rand.NewZipf(rand.New(rand.NewPCG(5, 6)), z, 1, keys-1)
		return func(int) string { return strconv.FormatUint(g.Uint64(), 10) }
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name        string
		k, n, parts int
		key         func(part int) string
		exact       bool
	}{
		{"few keys", 8, 600, 6, zipf(6, 1.5), true},
		{"zipf", 8, 6000, 6, zipf(2000, 1.2), false},
		{"flat", 8, 6000, 6, func(int) string { return strconv.Itoa(r.IntN(40)) }, false},
		// Each part has its own busy keys and a few shared ones.
		{"shifting", 4, 6000, 6, func(part int) string {
			if r.IntN(3) == 0 {
				return strconv.Itoa(r.IntN(3))
			}
			return strconv.Itoa(100*part + r.IntN(6))
		}, false},
		{"one part", 16, 3000, 1, zipf(500, 1.3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkMerge(t, tc.k, tc.n, tc.parts, tc.key, tc.exact)
		})
	}
	// Many tiny streams: 2 counters, a handful of keys, a few parts, in
	// every order a sketch drops and merges them.
	t.Run("tiny", func(t *testing.T) {
		for range 2000 {
			keys := 2 + r.IntN(4)
			checkMerge(t, 2, (2+r.IntN(4))*(1+r.IntN(12)), 2+r.IntN(3), func(int) string { return strconv.Itoa(r.IntN(keys)) }, false)
			if t.Failed() {
				return
			}
		}
	})
}

func checkMerge(t *testing.T, k, n, parts int, key func(part int) string, exactly bool) {
	t.Helper()
	merged := NewSketch[string](k)
	exact := map[string]int64{}
	total := 0
	for p := range parts {
		part := NewSketch[string](k)
		for range n / parts {
			k := key(p)
			part.Add(k, 1)
			exact[k]++
			total++
		}
		merged.Merge(part)
	}
	bound := merged.Bound()
	if merged.Total() != int64(total) || merged.Floor() > bound {
		t.Fatalf("total %d, floor %d, bound %d", merged.Total(), merged.Floor(), bound)
	}
	kept := map[string]bool{}
	merged.Each(func(e Entry[string]) {
		kept[e.Key] = true
		if e.Count < exact[e.Key] || e.Count-e.Err > exact[e.Key] || e.Err > bound {
			t.Errorf("%s: count %d err %d, true %d, bound %d", e.Key, e.Count, e.Err, exact[e.Key], bound)
		}
		if exactly && (e.Count != exact[e.Key] || e.Err != 0) {
			t.Errorf("%s: count %d err %d, exactly %d", e.Key, e.Count, e.Err, exact[e.Key])
		}
	})
	for k, c := range exact {
		if !kept[k] && c > merged.Floor() {
			t.Errorf("%s counted %d > floor %d but dropped", k, c, merged.Floor())
		}
	}
	if exactly && len(kept) != len(exact) {
		t.Errorf("kept %d keys of %d", len(kept), len(exact))
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestTrackerWindows checks the heavy hitter of refusals comes first
// per route, and that minutes age out of the 1-, 5- and 15-minute
// windows.
func TestTrackerWindows(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	tr := NewTracker(TrackerOptions{K: 4, Now: c.Now})
	hot := Identity{Kind: "account", ID: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
	hotAddr := netip.MustParseAddr("192.0.2.7")
	for i := 0; i < 50; i++ { // background traffic from many clients
		tr.Record(c.Now(), "place_order", Identity{Kind: "token", ID: "t" + strconv.Itoa(i)}, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), false)
	}
	for i := 0; i < 30; i++ {
		tr.Record(c.Now(), "place_order", hot, hotAddr, i >= 10)
	}
	tr.Record(c.Now(), "ticker", Identity{}, hotAddr, false)
	top := tr.Top(1, 3)
	if len(top) != 2 || top[0].Route != "place_order" || top[0].Requests != 80 || top[0].Refused != 20 {
		t.Fatalf("top: %+v", top)
	}
	if e := top[0].IDsByRefused; len(e) == 0 || e[0].Key != hot || e[0].Count != 20 {
		t.Errorf("identities by refusals: %+v", e)
	}
	if e := top[0].AddrsByRequests; len(e) == 0 || e[0].Key != hotAddr || e[0].Count < 30 {
		t.Errorf("addresses by requests: %+v", e)
	}
	if id, ok := tr.Resolve("account", hot.ID[:12]); !ok || id != hot.ID {
		t.Errorf("Resolve: %q %v", id, ok)
	}
	small := NewTracker(TrackerOptions{Now: c.Now})
	for _, id := range []string{"abc1", "abc2", "xyz9"} {
		small.Record(c.Now(), "r", Identity{Kind: "token", ID: id}, netip.Addr{}, false)
	}
	if id, ok := small.Resolve("token", "abc"); ok {
		t.Errorf("Resolve of an ambiguous prefix: %q", id)
	}
	if id, ok := small.Resolve("token", "xyz"); !ok || id != "xyz9" {
		t.Errorf("Resolve of xyz: %q %v", id, ok)
	}
	c.add(2 * time.Minute)
	if top := tr.Top(1, 3); len(top) != 0 {
		t.Errorf("1-minute window two minutes later: %+v", top)
	}
	if top := tr.Top(5, 3); len(top) != 2 || top[0].Refused != 20 {
		t.Errorf("5-minute window: %+v", top)
	}
	c.add(15 * time.Minute)
	tr.Record(c.Now(), "place_order", hot, hotAddr, true) // reuses an expired bucket
	if top := tr.Top(15, 3); len(top) != 1 || top[0].Requests != 1 || top[0].Refused != 1 {
		t.Errorf("15-minute window later: %+v", top)
	}
	if req, ref := tr.Totals(); req != 82 || ref != 21 {
		t.Errorf("totals %d %d", req, ref)
	}
}

// TestTrackerWindowsSlide: a window is the last 1, 5 or 15 minutes
// whatever the clock reads, not the calendar minutes: refusals made ten
// seconds before a minute turns over are still in the 1-minute window
// fifty seconds into the next one, and leave it only once more than a
// minute (and at most 70 seconds) old; likewise for 5 and 15 minutes at
// minute steps. Span says how far back each window reaches.
func TestTrackerWindowsSlide(t *testing.T) {
	start := time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(50 * time.Second) // hh:mm:50
	c := &clock{t: start}
	tr := NewTracker(TrackerOptions{Now: c.Now})
	hot := Identity{Kind: "token", ID: "hot"}
	for range 3 {
		tr.Record(c.Now(), "place_order", hot, netip.MustParseAddr("192.0.2.7"), true)
	}
	refused := func(window int) int64 {
		var n int64
		for _, r := range tr.Top(window, 3) {
			n += r.Refused
		}
		return n
	}
	for _, tc := range []struct {
		after  time.Duration
		window int
		want   int64
		span   time.Duration
	}{
		{0, 1, 3, 60 * time.Second},
		{20 * time.Second, 1, 3, 60 * time.Second}, // the minute turned over 10 s ago
		{59 * time.Second, 1, 3, 69 * time.Second},
		{69 * time.Second, 1, 3, 69 * time.Second},
		{70 * time.Second, 1, 0, 60 * time.Second},
		{70 * time.Second, 5, 3, 5 * time.Minute},
		{5*time.Minute + 9*time.Second, 5, 3, 5*time.Minute + 59*time.Second},
		{5*time.Minute + 10*time.Second, 5, 0, 5 * time.Minute},
		{5*time.Minute + 10*time.Second, 15, 3, 15 * time.Minute},
		{15*time.Minute + 9*time.Second, 15, 3, 15*time.Minute + 59*time.Second},
		{15*time.Minute + 10*time.Second, 15, 0, 15 * time.Minute},
	} {
		c.t = start.Add(tc.after)
		if got := refused(tc.window); got != tc.want {
			t.Errorf("%v after, %d-minute window: %d refused, want %d", tc.after, tc.window, got, tc.want)
		}
		if got := tr.Span(tc.window); got != tc.span {
			t.Errorf("%v after, %d-minute window spans %v, want %v", tc.after, tc.window, got, tc.span)
		}
	}
	if _, ok := tr.Resolve("token", "hot"); ok {
		t.Error("Resolve finds an identity counted more than 16 minutes ago")
	}
}

// BenchmarkRecord is the hot path: one limited request recorded. "few"
// is a handful of busy clients (each already counted: an increment);
// "churn" is thousands of clients through 32 counters a stripe, so that
// nearly every record replaces a counter (the worst case); "rolling" is
// churn with the clock a second further every 1,000 records of a
// goroutine, so that 10-second buckets are merged into their minute's
// about every 10,000 (a route at 1,000 requests a second).
func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys int
		roll bool
	}{{"few", 16, false}, {"churn", 4096, false}, {"rolling", 4096, true}} {
		b.Run(bc.name, func(b *testing.B) {
			tr := NewTracker(TrackerOptions{})
			ids := make([]Identity, bc.keys)
			addrs := make([]netip.Addr, bc.keys)
			for i := range ids {
				ids[i] = Identity{Kind: "token", ID: strconv.Itoa(i * 7919)}
				addrs[i] = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
			}
			now := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				at := now
				for pb.Next() {
					if bc.roll && i%1000 == 999 {
						at = at.Add(time.Second)
					}
					j := (i * i) % bc.keys // skewed: some keys much more often
					tr.Record(at, "place_order", ids[j], addrs[j], i%16 == 0)
					i++
				}
			})
		})
	}
}
