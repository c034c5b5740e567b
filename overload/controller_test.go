package overload

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/fakeclock"
)

func TestFixedLimitShedsPastItWithoutWait(t *testing.T) {
	l := New(Options{Fixed: 2})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
			t.Fatalf("acquire %d refused under the limit", i)
		}
	}
	if ok, _ := l.Acquire(ctx, MarketData, 0); ok {
		t.Fatal("third acquire admitted over a fixed limit of 2 with no wait")
	}
	l.Release(0, MarketData, time.Now(), time.Millisecond, true)
	if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
		t.Fatal("acquire refused after a release")
	}
	if got := l.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d, want 2", got)
	}
}

// TestFreedSlotGoesToMostImportantWaiter fills the limit, queues waiters
// of every class in reverse order, and checks that released slots go to
// them most important first.
func TestFreedSlotGoesToMostImportantWaiter(t *testing.T) {
	var waits [NumClasses]time.Duration
	for i := range waits {
		waits[i] = 5 * time.Second
	}
	l := New(Options{Fixed: 1, MaxWait: waits})
	ctx := context.Background()
	for i := 0; i < 2; i++ { // the limit and the cancels' headroom
		if ok, _ := l.Acquire(ctx, Cancel, 0); !ok {
			t.Fatal("first acquires refused")
		}
	}
	order := make(chan Class, NumClasses)
	var wg sync.WaitGroup
	for c := NumClasses - 1; ; c-- {
		wg.Add(1)
		go func(c Class) {
			defer wg.Done()
			if ok, _ := l.Acquire(ctx, c, 0); ok {
				order <- c
				l.Release(0, MarketData, time.Now(), time.Millisecond, true)
			}
		}(c)
		for l.Waiting() != int(NumClasses-c) {
			time.Sleep(time.Millisecond)
		}
		if c == 0 {
			break
		}
	}
	l.Release(0, MarketData, time.Now(), time.Millisecond, true)
	l.Release(0, MarketData, time.Now(), time.Millisecond, true)
	wg.Wait()
	close(order)
	want := Class(0)
	for c := range order {
		if c != want {
			t.Fatalf("slot went to %v, want %v", c, want)
		}
		want++
	}
	if want != NumClasses {
		t.Fatalf("%d classes served, want %d", want, NumClasses)
	}
}

func TestWaitIsBoundedByClass(t *testing.T) {
	// A cancel's wait far beyond the bound below: a request that waited
	// another class's wait would miss it by far.
	waits := [NumClasses]time.Duration{Cancel: time.Minute, MarketData: 20 * time.Millisecond}
	l := New(Options{Fixed: 1, MaxWait: waits})
	ctx := context.Background()
	l.Acquire(ctx, Cancel, 0)
	l.Acquire(ctx, Cancel, 0) // the headroom
	tests := []struct {
		class Class
		want  bool
	}{
		{MarketData, false}, // waits 20ms, then shed
		{Place, false},      // no wait configured: shed at once
	}
	for _, tt := range tests {
		t.Run(tt.class.String(), func(t *testing.T) {
			start := time.Now()
			ok, waited := l.Acquire(ctx, tt.class, 0)
			if ok != tt.want {
				t.Fatalf("Acquire = %v, want %v", ok, tt.want)
			}
			if el := time.Since(start); waited < waits[tt.class] || waited > el || el > 30*time.Second {
				t.Fatalf("waited %v (reported %v), want its class's wait %v", el, waited, waits[tt.class])
			}
			if l.Waiting() != 0 {
				t.Fatalf("a shed waiter is still queued")
			}
		})
	}
	// A cancel waiting behind the full limit gets the next slot.
	done := queued(ctx, l, Cancel)
	l.Release(0, MarketData, time.Now(), time.Millisecond, true)
	if !<-done {
		t.Fatal("cancel shed while a slot was freed")
	}
}

// TestCancelsGoOverTheLimitByTheHeadroom checks the cancels' headroom: at
// a limit of 16, other classes get 16 slots, cancels 2 more, and a freed
// slot over the limit goes to a waiting cancel only.
func TestCancelsGoOverTheLimitByTheHeadroom(t *testing.T) {
	waits := [NumClasses]time.Duration{Cancel: 5 * time.Second, Place: 5 * time.Second}
	l := New(Options{Fixed: 16, MaxWait: waits})
	ctx := context.Background()
	for i := 0; i < 16; i++ {
		if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
			t.Fatalf("market data %d refused under the limit", i)
		}
	}
	if ok, _ := l.Acquire(ctx, MarketData, 0); ok {
		t.Fatal("market data admitted over the limit")
	}
	for i := 0; i < 2; i++ {
		if !l.Admit(Cancel, 0) {
			t.Fatalf("Admit shed cancel %d within the headroom", i)
		}
		if ok, waited := l.Acquire(ctx, Cancel, 0); !ok || waited != 0 {
			t.Fatalf("cancel %d within the headroom: acquired %v after %v, want at once", i, ok, waited)
		}
	}
	if got := l.InFlight(); got != 18 {
		t.Fatalf("InFlight = %d, want 18", got)
	}
	// Full for everyone: a placement and a cancel wait.
	place := queued(ctx, l, Place)
	cancel := queued(ctx, l, Cancel)
	l.Release(0, MarketData, time.Now(), time.Millisecond, true) // 17 in flight: over the limit, within the headroom
	if !<-cancel {                                               // 18 again
		t.Fatal("the waiting cancel was shed")
	}
	select {
	case <-place:
		t.Fatal("a placement got a slot over the limit")
	case <-time.After(20 * time.Millisecond):
	}
	for i := 0; i < 3; i++ { // down to 15: room under the limit
		l.Release(0, MarketData, time.Now(), time.Millisecond, true)
	}
	if !<-place {
		t.Fatal("the waiting placement was shed after a slot under the limit freed")
	}
}

// TestCancelHeadroomAtEveryLimit checks the bound of the cancels'
// headroom at any limit L, the floor of 1 included: the other classes get
// L slots, cancels L + ⌈L/8⌉ — at least one slot over the limit, so that a
// cancel finds a slot at once in a limit full of other requests — and the
// next cancel waits for a freed slot rather than going over the bound.
func TestCancelHeadroomAtEveryLimit(t *testing.T) {
	for _, tc := range []struct{ limit, headroom int }{
		{1, 1}, {2, 1}, {4, 1}, {8, 1}, {9, 2}, {16, 2}, {17, 3}, {100, 13},
	} {
		t.Run(strconv.Itoa(tc.limit), func(t *testing.T) {
			l := New(Options{Fixed: tc.limit})
			ctx := context.Background()
			for i := 0; i < tc.limit; i++ {
				if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
					t.Fatalf("market data %d refused under the limit", i)
				}
			}
			if ok, _ := l.Acquire(ctx, Status, 0); ok {
				t.Fatal("a status request went over the limit")
			}
			for i := 0; i < tc.headroom; i++ {
				if !l.Admit(Cancel, 0) {
					t.Fatalf("Admit shed cancel %d within the headroom", i)
				}
				if ok, waited := l.Acquire(ctx, Cancel, 0); !ok || waited != 0 {
					t.Fatalf("cancel %d within the headroom: acquired %v after %v, want at once", i, ok, waited)
				}
			}
			if ok, _ := l.Acquire(ctx, Cancel, 0); ok { // no wait configured: shed at once
				t.Fatalf("a cancel went over the bound of %d", tc.limit+tc.headroom)
			}
			if got := l.InFlight(); got != tc.limit+tc.headroom {
				t.Errorf("InFlight = %d, want %d", got, tc.limit+tc.headroom)
			}
		})
	}
}

// TestCancelGetsThroughAtTheFloor drives an adaptive limit down to its
// floor (min_limit 2) with a backend that only gets slower, fills it with
// market data, and checks that a cancel still takes a slot at once, that
// the next cancel waits for the next freed slot ahead of other waiters,
// and that nothing else goes over the limit.
func TestCancelGetsThroughAtTheFloor(t *testing.T) {
	clk := fakeclock.New(time.Unix(0, 0))
	waits := [NumClasses]time.Duration{Cancel: 5 * time.Second, Place: 5 * time.Second}
	l := New(Options{Min: 2, Max: 100, Initial: 20, MinSamples: 1, MaxWait: waits, Now: clk.Now})
	run(l, clk, 5, func(int) time.Duration { return time.Millisecond })                   // the unloaded latency
	run(l, clk, 100, func(n int) time.Duration { return time.Duration(n) * time.Second }) // then ever slower
	if got := l.Limit(); got != 2 {
		t.Fatalf("limit %d, want the floor 2", got)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
			t.Fatalf("market data %d refused under the limit", i)
		}
	}
	if !l.Admit(Cancel, 0) {
		t.Fatal("Admit shed a cancel at the floor")
	}
	if ok, waited := l.Acquire(ctx, Cancel, 0); !ok || waited != 0 {
		t.Fatalf("cancel at the floor: acquired %v after %v, want at once", ok, waited)
	}
	place := queued(ctx, l, Place)
	cancel := queued(ctx, l, Cancel)
	if got := l.InFlight(); got != 3 {
		t.Fatalf("InFlight = %d, want 3: the floor and one cancel over it", got)
	}
	l.Release(0, MarketData, clk.Now(), time.Second, false) // a market data request ends: 2 in flight
	if !<-cancel {
		t.Fatal("the waiting cancel was shed")
	}
	select {
	case <-place:
		t.Fatal("a placement got a slot over the limit")
	case <-time.After(20 * time.Millisecond):
	}
	l.Release(0, MarketData, clk.Now(), time.Second, false)
	l.Release(0, MarketData, clk.Now(), time.Second, false) // 1 in flight: room under the limit
	if !<-place {
		t.Fatal("the waiting placement was shed after a slot under the limit freed")
	}
}

func TestAcquireHonoursContext(t *testing.T) {
	l := New(Options{Fixed: 1, MaxWait: [NumClasses]time.Duration{Cancel: time.Hour}})
	l.Acquire(context.Background(), Cancel, 0)
	l.Acquire(context.Background(), Cancel, 0) // the headroom
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if ok, _ := l.Acquire(ctx, Cancel, 0); ok {
		t.Fatal("acquired past a done context")
	}
}

// run feeds the controller windows of samples at a given concurrency,
// with the backend's latency as a function of concurrency.
func run(l *Controller, clk *fakeclock.Clock, windows int, latency func(n int) time.Duration) {
	for w := 0; w < windows; w++ {
		n := l.Limit()
		for i := 0; i < n; i++ {
			l.Acquire(context.Background(), Cancel, 0)
		}
		for i := 0; i < n; i++ {
			if i == n-1 {
				clk.Advance(100 * time.Millisecond)
			}
			l.Release(0, MarketData, clk.Now(), latency(n), true)
		}
	}
}

// TestGradientSettlesNearCapacity drives the controller against a backend
// of 20 workers taking 10ms each, whose latency grows with its queue once
// they are busy: the limit settles above the workers and well below 2×.
func TestGradientSettlesNearCapacity(t *testing.T) {
	clk := fakeclock.New(time.Unix(0, 0))
	l := New(Options{Min: 4, Max: 1000, Initial: 10, MinSamples: 4, Slack: time.Millisecond, Now: clk.Now})
	backend := func(n int) time.Duration {
		d := 10 * time.Millisecond
		if n > 20 {
			d = d * time.Duration(n) / 20
		}
		return d
	}
	run(l, clk, 100, backend)
	if got := l.MinRTT(); got != 10*time.Millisecond {
		t.Errorf("MinRTT = %v, want 10ms", got)
	}
	if got := l.Limit(); got < 20 || got > 40 {
		t.Errorf("limit settled at %d, want 20..40 for 20 workers", got)
	}
	// The backend slows down for good: the limit shrinks but stays
	// at least the floor, and the next probe learns the new latency.
	slow := func(n int) time.Duration { return 4 * backend(n) }
	before := l.Limit()
	run(l, clk, 10, slow)
	if got := l.Limit(); got > before*3/4 {
		t.Errorf("limit %d after the backend slowed 4× (from %d), want it shrinking", got, before)
	}
	clk.Advance(31 * time.Second)
	run(l, clk, 60, slow)
	if got := l.MinRTT(); got != 40*time.Millisecond {
		t.Errorf("MinRTT after a probe = %v, want 40ms", got)
	}
	if got := l.Limit(); got < 20 || got > 40 {
		t.Errorf("limit after re-probing settled at %d, want 20..40", got)
	}
}

// TestUnusedLimitComesDown: a limit far above what all but idle traffic
// uses comes down to about three times the windows' peak in flight, so
// that a surge
// after a quiet spell meets a limit near what the backend was last seen
// to carry, not the initial 100; a probe of the unloaded latency does
// not halve it; and it grows again once the surge uses it and the backend
// keeps up.
func TestUnusedLimitComesDown(t *testing.T) {
	clk := fakeclock.New(time.Unix(0, 0))
	l := New(Options{Min: 4, Max: 1000, Initial: 100, MinSamples: 4, Now: clk.Now})
	windows := func(n, inFlight int, length time.Duration) {
		heldWindows(l, clk, n, inFlight, length, 10*time.Millisecond)
	}
	// Busy traffic that holds few slots at once (a fast backend) keeps
	// its limit: a burst of it must not meet one sized to that.
	windows(30, 3, 100*time.Millisecond)
	if got := l.Limit(); got != 100 {
		t.Errorf("limit %d after 30 busy windows using 3 slots, want 100 kept", got)
	}
	quiet := func(n, inFlight int) { windows(n, inFlight, 250*time.Millisecond) } // all but idle: 12 answers in 250ms
	quiet(30, 3)
	if got := l.Limit(); got > 9 {
		t.Errorf("limit %d after 30 windows using 3 slots, want at most three times that (9)", got)
	}
	// A probe of the unloaded latency keeps a limit the traffic uses half
	// of at most: halving it would shed a burst it left room for.
	before := l.Limit()
	clk.Advance(31 * time.Second)
	for range 3 {
		l.Acquire(context.Background(), Cancel, 0)
	}
	for range 4 { // the window closes and the probe starts
		l.Release(0, Cancel, clk.Now(), 10*time.Millisecond, true)
		l.Acquire(context.Background(), Cancel, 0)
	}
	if got := l.Limit(); !l.probing || got < before-1 {
		t.Errorf("limit %d at a probe (probing %v), from %d, with 3 in flight: want it kept", got, l.probing, before)
	}
	for range 3 {
		l.Release(0, Cancel, clk.Now(), 10*time.Millisecond, false)
	}
	run(l, clk, 16, func(int) time.Duration { return 10 * time.Millisecond }) // uses all, no queue
	if got := l.Limit(); got < 100 {
		t.Errorf("limit %d after 16 windows using it all without a queue, want it grown by half every other window (slow start)", got)
	}
}

// TestSlowWindowsShrinkOnlyAUsedLimit: a window whose latency is over the
// tolerance shrinks the limit only when it used half of the limit at
// least. Light traffic on a busy machine sees such windows at each of
// the machine's stalls; they must not bring its limit down a step at a
// time until a stall's burst meets it (at 1,540 GET/s, a twentieth of
// the backend's capacity, the limit fell from 100 to 26 over some thirty 6 s runs
// and 1,099 requests were shed in one).
func TestSlowWindowsShrinkOnlyAUsedLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inFlight   int // the windows' most in flight, of a limit of 100
		wantShrunk bool
	}{
		{name: "light traffic, a tenth of the limit", inFlight: 10},
		{name: "just under half", inFlight: 49},
		{name: "half", inFlight: 50, wantShrunk: true},
		{name: "all of it", inFlight: 100, wantShrunk: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := fakeclock.New(time.Unix(0, 0))
			l := New(Options{Min: 4, Max: 1000, Initial: 100, MinSamples: 4, Now: clk.Now})
			windows := func(n, inFlight int, rtt time.Duration) { heldWindows(l, clk, n, inFlight, 100*time.Millisecond, rtt) }
			windows(3, 3, time.Millisecond)               // the unloaded latency learnt, the limit kept
			windows(10, tc.inFlight, 50*time.Millisecond) // slow windows, each over the tolerance
			got := l.Limit()
			if shrunk := got < 100; shrunk != tc.wantShrunk {
				t.Errorf("limit %d after 10 slow windows using %d of 100, want shrunk %v", got, tc.inFlight, tc.wantShrunk)
			}
		})
	}
}

func TestLimitStaysWithinMinMax(t *testing.T) {
	clk := fakeclock.New(time.Unix(0, 0))
	l := New(Options{Min: 5, Max: 12, MinSamples: 1, Now: clk.Now})
	run(l, clk, 50, func(int) time.Duration { return time.Millisecond }) // never slower: grows
	if got := l.Limit(); got != 12 {
		t.Errorf("limit %d, want the ceiling 12", got)
	}
	run(l, clk, 50, func(n int) time.Duration { return time.Duration(n) * time.Second }) // always slower: shrinks
	if got := l.Limit(); got != 5 {
		t.Errorf("limit %d, want the floor 5", got)
	}
}

func TestParseClass(t *testing.T) {
	for c := Class(0); c < NumClasses; c++ {
		if got, ok := ParseClass(c.String()); !ok || got != c {
			t.Errorf("ParseClass(%q) = %v, %v", c.String(), got, ok)
		}
	}
	if _, ok := ParseClass("urgent"); ok {
		t.Error("ParseClass accepted an unknown name")
	}
}

// BenchmarkAcquireRelease is the per-request cost of the admission step
// when the backend has room.
func BenchmarkAcquireRelease(b *testing.B) {
	l := New(Options{Min: 4, Max: 1 << 20, Initial: 1 << 20})
	ctx := context.Background()
	var clients atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// The caller has read the clock for the round trip; a request
		// every microsecond closes a window as real traffic would. Each
		// goroutine is a client of its own with one request at a time,
		// whose state is kept idle between them (forget) while no other
		// client goes idle meanwhile.
		done := time.Now()
		who := Client(clients.Add(1))
		for pb.Next() {
			if ok, _ := l.Acquire(ctx, Place, who); !ok {
				b.Fatal("refused")
			}
			done = done.Add(time.Microsecond)
			l.Release(who, Place, done, time.Millisecond, true)
		}
	})
}

// TestAdmitShedsBeforeTheQueueOnceTheQueueSheds checks the gate in front
// of the checks: open while there is room, and once a class's requests
// wait in vain, closed to most of that class while the backend stays full
// — but never to a class that is being served.
func TestAdmitShedsBeforeTheQueueOnceTheQueueSheds(t *testing.T) {
	l := New(Options{Fixed: 1, MaxWait: [NumClasses]time.Duration{Cancel: time.Second, MarketData: time.Millisecond}})
	ctx := context.Background()
	count := func(c Class) int {
		n := 0
		for i := 0; i < 1000; i++ {
			if l.Admit(c, 0) {
				n++
			}
		}
		return n
	}
	if got := count(MarketData); got != 1000 {
		t.Fatalf("Admit with room let %d of 1000 through, want all", got)
	}
	l.Acquire(ctx, Cancel, 0) // the backend is full
	if got := count(MarketData); got != 1000 {
		t.Fatalf("Admit before any shed let %d of 1000 through, want all", got)
	}
	for i := 0; i < 20; i++ {
		if ok, _ := l.Acquire(ctx, MarketData, 0); ok {
			t.Fatal("market data admitted over the limit")
		}
	}
	if got := count(MarketData); got > 100 {
		t.Errorf("after 20 sheds at the queue, Admit let %d of 1000 through, want under 100", got)
	}
	if got := count(Cancel); got != 1000 {
		t.Errorf("Admit let %d of 1000 cancels through, want all", got)
	}
	l.Release(0, MarketData, time.Now(), time.Millisecond, true) // room again
	if got := count(MarketData); got != 1000 {
		t.Errorf("Admit with room again let %d of 1000 through, want all", got)
	}
}

func BenchmarkAdmit(b *testing.B) {
	l := New(Options{Min: 4, Max: 1 << 20, Initial: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !l.Admit(MarketData, 0) {
				b.Fatal("shed with room")
			}
		}
	})
}

// queued starts an Acquire of class c of the zero Client on l and
// returns once it waits in l's queue, with the channel its result arrives
// on.
func queued(ctx context.Context, l *Controller, c Class) <-chan bool { return queuedFor(ctx, l, c, 0) }

// heldWindows runs n of l's windows, each length long on clk, in which
// inFlight requests are under way at once and each answers after rtt:
// 4 × inFlight samples a window, the window's last moving the clock.
func heldWindows(l *Controller, clk *fakeclock.Clock, n, inFlight int, length, rtt time.Duration) {
	for range n {
		for range inFlight {
			l.Acquire(context.Background(), Cancel, 0)
		}
		for i := range 4 * inFlight {
			if i == 4*inFlight-1 {
				clk.Advance(length)
			}
			l.Release(0, Cancel, clk.Now(), rtt, true)
			l.Acquire(context.Background(), Cancel, 0)
		}
		for range inFlight {
			l.Release(0, Cancel, clk.Now(), rtt, false)
		}
	}
}

// TestEvictEndsWaits queues requests of several classes and clients at a
// full limit and evicts them: each Acquire returns false at once, none
// waits on, no class's shed probability rises (an evicted request is sent
// elsewhere, not shed), the slots held stay held, a request that comes
// while the instance is out is refused at once without waiting, and once
// readmitted the controller serves a request queued as before.
func TestEvictEndsWaits(t *testing.T) {
	tests := []struct {
		name    string
		waiters []Class
		clients []Client
	}{
		{"none", nil, nil},
		{"one order", []Class{Place}, []Client{1}},
		{"classes and clients", []Class{Place, MarketData, Place, Status}, []Client{1, 2, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var waits [NumClasses]time.Duration
			for i := range waits {
				waits[i] = time.Hour // only an eviction ends them
			}
			l := New(Options{Fixed: 1, MaxWait: waits})
			ctx := context.Background()
			if ok, _ := l.Acquire(ctx, MarketData, 9); !ok {
				t.Fatal("the first slot was not free")
			}
			var results []<-chan bool
			for i, c := range tt.waiters {
				results = append(results, queuedFor(ctx, l, c, tt.clients[i]))
			}
			if got := l.Evict(); got != len(tt.waiters) {
				t.Fatalf("Evict ended %d waits, want %d", got, len(tt.waiters))
			}
			for i, ch := range results {
				if <-ch {
					t.Errorf("waiter %d got a slot", i)
				}
			}
			if l.Waiting() != 0 || l.InFlight() != 1 {
				t.Fatalf("after Evict: %d waiting, %d in flight; want 0 and the slot held", l.Waiting(), l.InFlight())
			}
			for c := range l.shedP {
				if p := l.shedP[c].Load(); p != 0 {
					t.Errorf("class %s's shed probability rose to %d", Class(c), p)
				}
			}
			if ok, waited := l.Acquire(ctx, Place, 1); ok || waited != 0 || l.Waiting() != 0 {
				t.Fatalf("an Acquire after the eviction: ok %v, waited %v, %d waiting; want refused at once, none queued", ok, waited, l.Waiting())
			}
			if p := l.shedP[Place].Load(); p != 0 {
				t.Errorf("a request refused out of the rotation raised the shed probability to %d", p)
			}
			l.Readmit()
			next := queuedFor(ctx, l, Place, 1)
			l.Release(9, MarketData, time.Now(), time.Millisecond, true)
			if !<-next {
				t.Fatal("a request queued after the readmission was not served")
			}
		})
	}
}

// TestLimitWithinConns checks that a limit (fixed, or adaptive from its
// initial value up to its ceiling) is kept within Options.Conns, the
// backend's connections, with the cancels' headroom: every slot a
// request of any class may take, cancels' included, has a connection.
func TestLimitWithinConns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     Options
		limit int // the limit at start
		max   int // the ceiling an adaptive limit may grow to
	}{
		{"fixed over 2 connections", Options{Fixed: 4, Conns: 2}, 1, 1},
		{"fixed over 9 connections", Options{Fixed: 100, Conns: 9}, 8, 8},
		{"fixed over 100 connections", Options{Fixed: 100, Conns: 100}, 88, 88},
		{"fixed within the connections", Options{Fixed: 8, Conns: 9}, 8, 8},
		{"adaptive over 32 connections", Options{Conns: 32}, 28, 28},
		{"adaptive, floor over 2 connections", Options{Min: 4, Initial: 4, Conns: 2}, 1, 1},
		{"one connection", Options{Fixed: 4, Conns: 1}, 1, 1},
		{"no cap", Options{Fixed: 100}, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.o)
			if got := l.Limit(); got != tc.limit {
				t.Errorf("Limit() = %d, want %d", got, tc.limit)
			}
			if tc.o.Fixed == 0 && l.o.Max != tc.max {
				t.Errorf("ceiling %d, want %d", l.o.Max, tc.max)
			}
			if c := tc.o.Conns; c > 1 {
				if got := l.limitFor(Cancel); got > c {
					t.Errorf("a cancel may take %d slots, over %d connections", got, c)
				}
			}
		})
	}
}

// TestTryAcquireAndRoom checks the checks that let a request go to an
// instance with room instead of waiting at a full one: Room takes
// nothing, TryAcquire takes a slot only when Acquire would at once, and
// neither queues nor sheds (Admit still lets the class in), both within
// the client's share and the cancels' headroom, and neither has room at
// an evicted controller.
func TestTryAcquireAndRoom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		class  Class
		who    Client
		take   int // what TryAcquire takes before it finds no room
		evicts bool
	}{
		{"market data, no client", MarketData, 0, 4, false},
		{"market data, a client alone", MarketData, 1, 3, false},
		{"cancel, no client: the headroom", Cancel, 0, 5, false},
		{"evicted", Cancel, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(Options{Fixed: 4})
			if tc.evicts {
				l.Evict()
			}
			for i := range tc.take {
				if !l.Room(tc.class, tc.who) {
					t.Fatalf("no room for request %d", i)
				}
				if got := l.InFlight(); got != i {
					t.Fatalf("Room took a slot: %d in flight, want %d", got, i)
				}
				if !l.TryAcquire(tc.class, tc.who) {
					t.Fatalf("TryAcquire refused request %d", i)
				}
			}
			if l.Room(tc.class, tc.who) || l.TryAcquire(tc.class, tc.who) {
				t.Fatalf("room past %d slots", tc.take)
			}
			if got := l.InFlight(); got != tc.take {
				t.Errorf("%d in flight, want %d", got, tc.take)
			}
			if l.Waiting() != 0 || l.shedP[tc.class].Load() != 0 {
				t.Errorf("a refused TryAcquire queued (%d waiting) or shed (probability %d)", l.Waiting(), l.shedP[tc.class].Load())
			}
		})
	}
}

// fakeElsewhere is an Elsewhere whose Take answers from a list, running
// during before it answers; its Watch channel is closed by free.
type fakeElsewhere struct {
	mu      sync.Mutex
	room    chan struct{}
	answers []bool
	during  func()
	takes   int
}

func (f *fakeElsewhere) Watch() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.room
}

func (f *fakeElsewhere) free() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.room)
	f.room = make(chan struct{})
}

func (f *fakeElsewhere) Take() bool {
	f.takes++
	if f.during != nil {
		f.during()
	}
	ok := len(f.answers) > 0 && f.answers[0]
	if len(f.answers) > 0 {
		f.answers = f.answers[1:]
	}
	return ok
}

// TestAcquireOrTakesASlotElsewhere checks the wait of a request that may
// take a slot elsewhere: at the start of its wait and each time a slot
// may have been freed there it tries, and the first slot it gets ends
// its wait, here or there; a slot granted here while it took one there
// is given back; a wait moved sheds nothing; and Release calls OnRoom
// when it leaves room for a cancel.
func TestAcquireOrTakesASlotElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []bool // Take's answers
		freeThere bool   // a slot frees elsewhere while it waits
		freeHere  bool   // a slot frees here while it waits
		during    bool   // a slot frees here during the first Take
		ok, moved bool
		takes     int
		inflight  int // here, after it
	}{
		{"taken at the start", []bool{true}, false, false, false, true, true, 1, 2},
		{"taken when one frees there", []bool{false, true}, true, false, false, true, true, 2, 2},
		{"granted here", []bool{false}, false, true, false, true, false, 1, 2},
		{"granted here while it took one there", []bool{true}, false, false, true, true, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rooms atomic.Int64
			l := New(Options{Fixed: 1, MaxWait: [NumClasses]time.Duration{Cancel: time.Minute}, OnRoom: func() { rooms.Add(1) }})
			for i := range 2 { // the limit and the headroom
				if !l.TryAcquire(Cancel, Client(10+i)) {
					t.Fatal("no slot")
				}
			}
			f := &fakeElsewhere{room: make(chan struct{}), answers: tc.answers}
			if tc.during {
				f.during = func() { l.Release(10, Cancel, time.Time{}, 0, false); waitGranted(t, l) }
			}
			done := make(chan [2]bool, 1)
			go func() {
				ok, moved, _ := l.AcquireOr(context.Background(), Cancel, 1, f)
				done <- [2]bool{ok, moved}
			}()
			if tc.freeThere || tc.freeHere {
				waitWaiting(t, l)
			}
			if tc.freeThere {
				f.free()
			}
			if tc.freeHere {
				l.Release(10, Cancel, time.Time{}, 0, false)
			}
			got := <-done
			if got != [2]bool{tc.ok, tc.moved} {
				t.Errorf("ok, moved = %v, want %v", got, [2]bool{tc.ok, tc.moved})
			}
			if f.takes != tc.takes {
				t.Errorf("%d takes, want %d", f.takes, tc.takes)
			}
			if l.InFlight() != tc.inflight || l.Waiting() != 0 || l.shedP[Cancel].Load() != 0 {
				t.Errorf("%d in flight, %d waiting, shed probability %d; want %d, 0, 0", l.InFlight(), l.Waiting(), l.shedP[Cancel].Load(), tc.inflight)
			}
			if tc.during && rooms.Load() == 0 {
				t.Error("OnRoom not called after the slot granted here was given back")
			}
		})
	}
}

// waitWaiting waits until a request waits at l.
func waitWaiting(t *testing.T, l *Controller) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); l.Waiting() == 0; time.Sleep(time.Millisecond) { // only bounds a hang
		if time.Now().After(deadline) {
			t.Fatal("nothing waits")
		}
	}
}

// waitGranted waits until no request waits at l: the waiter was granted.
func waitGranted(t *testing.T, l *Controller) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); l.Waiting() != 0; time.Sleep(time.Millisecond) { // only bounds a hang
		if time.Now().After(deadline) {
			t.Fatal("still waiting")
		}
	}
}

// TestCancelsSheddingEndsWithTheirQueue: after cancels waited in vain, a
// cancel that takes a slot at once while no cancel waits sets their shed
// probability back to 0 (it fell by 1/512 a cancel served: 2564 cancels
// after eight such waits); one served while a cancel waits (its client
// past its share), and a request of another class served at once, lower
// it by that alone.
func TestCancelsSheddingEndsWithTheirQueue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		class    Class // of the wasted waits and of the request served at once
		queued   bool  // a cancel of client 8, which holds one, waits meanwhile
		stopped  bool  // the probability is 0 after it
		tryFirst bool  // served by TryAcquire, not Acquire
	}{
		{"a cancel, none waiting", Cancel, false, true, false},
		{"a cancel by TryAcquire, none waiting", Cancel, false, true, true},
		{"a cancel while a cancel waits", Cancel, true, false, false},
		{"market data", MarketData, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var waits [NumClasses]time.Duration
			waits[tc.class] = time.Millisecond
			l := New(Options{Fixed: 8, MaxWait: waits}) // a headroom of 1
			for _, who := range []Client{8, 101, 102, 103, 104, 105, 106, 107, 108} {
				if ok, _ := l.Acquire(ctx, Cancel, who); !ok { // the limit and the headroom
					t.Fatal("refused within the limit and the headroom")
				}
			}
			for range 8 {
				if ok, _ := l.Acquire(ctx, tc.class, 7); ok {
					t.Fatal("a slot past the limit and the headroom")
				}
			}
			before := l.shedP[tc.class].Load()
			if tc.queued {
				waits[Cancel] = time.Hour
				l.Configure(Options{Fixed: 8, MaxWait: waits})
				queuedFor(ctx, l, Cancel, 8)
			}
			l.Release(101, Cancel, time.Time{}, 0, false)
			if tc.class != Cancel {
				l.Release(102, Cancel, time.Time{}, 0, false) // a slot of the limit
			}
			if tc.tryFirst {
				if !l.TryAcquire(tc.class, 9) {
					t.Fatal("refused a free slot")
				}
			} else if ok, _ := l.Acquire(ctx, tc.class, 9); !ok {
				t.Fatal("refused a free slot")
			}
			if tc.queued && l.Waiting() != 1 {
				t.Fatalf("%d waiting, want client 8's cancel", l.Waiting())
			}
			if p := l.shedP[tc.class].Load(); (p == 0) != tc.stopped || (!tc.stopped && p < before*9/10) {
				t.Errorf("the probability went from %d to %d; back to 0: %v", before, p, tc.stopped)
			}
		})
	}
}

// TestConfigureCallsOnRoom: a new limit that leaves room for a cancel
// calls OnRoom, as a Release does (a cancel waiting at another instance
// may take it); one that leaves none does not, nor does New.
func TestConfigureCallsOnRoom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fixed int
		rooms int64
	}{
		{"a limit with room", 4, 1},
		{"a limit as full", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rooms atomic.Int64
			onRoom := func() { rooms.Add(1) }
			l := New(Options{Fixed: 1, OnRoom: onRoom})
			for i := range 2 { // the limit and the headroom
				if !l.TryAcquire(Cancel, Client(i+1)) {
					t.Fatal("no slot")
				}
			}
			if rooms.Load() != 0 {
				t.Fatalf("OnRoom called %d times by New and TryAcquire", rooms.Load())
			}
			l.Configure(Options{Fixed: tc.fixed, OnRoom: onRoom})
			if got := rooms.Load(); got != tc.rooms {
				t.Errorf("OnRoom called %d times, want %d", got, tc.rooms)
			}
		})
	}
}
