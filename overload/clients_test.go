package overload

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fill acquires slots of class c for client who until one is refused,
// and returns how many it got.
func fill(l *Controller, c Class, who Client) int {
	n := 0
	for {
		ok, _ := l.Acquire(context.Background(), c, who)
		if !ok {
			return n
		}
		n++
	}
}

// TestClientShares: with no wait, a client alone takes all but the
// reserve (a quarter of the limit); the others then take slots while they
// hold fewer than are left free, and a client that holds none finds one
// while any is free; a client past its share is refused, and only it.
func TestClientShares(t *testing.T) {
	l := New(Options{Fixed: 16}) // no wait: a request that cannot take a slot is shed at once
	for _, tt := range []struct {
		who  Client
		want int
	}{{1, 12}, {2, 2}, {3, 1}, {4, 1}, {5, 0}} {
		if got := fill(l, PrivateRead, tt.who); got != tt.want {
			t.Errorf("client %d took %d slots, want %d", tt.who, got, tt.want)
		}
	}
	if got, n := l.InFlight(), l.Clients(); got != 16 || n != 4 {
		t.Fatalf("InFlight = %d, Clients = %d; want 16 and 4", got, n)
	}
	// Client 1 gives its slots back: client 2 takes the room again down
	// to the reserve, and client 1 comes back with its share of that.
	for range 12 {
		l.Release(1, PrivateRead, time.Now(), time.Millisecond, true)
	}
	if got := fill(l, PrivateRead, 2); got != 8 {
		t.Errorf("client 2, holding 2 with 12 free, took %d more, want 8", got)
	}
	if got := fill(l, PrivateRead, 1); got != 2 {
		t.Errorf("client 1, back with 4 free, took %d, want 2", got)
	}
	if n := len(l.clients); n != 4 {
		t.Errorf("%d clients tracked, want the 4 holding slots", n)
	}
	for _, c := range []struct {
		who Client
		n   int
	}{{1, 2}, {2, 10}, {3, 1}, {4, 1}} {
		for range c.n {
			l.Release(c.who, PrivateRead, time.Now(), time.Millisecond, true)
		}
	}
	if n, in := l.Clients(), l.InFlight(); n != 0 || in != 0 || len(l.clients) > 1 {
		t.Errorf("after every release: %d clients holding or waiting, %d in flight, %d states kept; want none, none and at most the last idle one",
			n, in, len(l.clients))
	}
}

// TestLoneClientYieldsToWaiters: a client alone uses the limit's room
// beyond its share, all but the reserve; once another client waits, a
// freed slot goes to that client, and the first one's next request waits
// for its turn.
func TestLoneClientYieldsToWaiters(t *testing.T) {
	var waits [NumClasses]time.Duration
	for i := range waits {
		waits[i] = 10 * time.Second
	}
	l := New(Options{Fixed: 16, MaxWait: waits})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 12 {
		if ok, _ := l.Acquire(ctx, MarketData, 1); !ok {
			t.Fatal("client 1 alone was refused above the reserve")
		}
	}
	for range 2 { // 0 and 1 slots held, fewer than the 4 and 3 left free
		if ok, _ := l.Acquire(ctx, MarketData, 2); !ok {
			t.Fatal("client 2 found no slot in the reserve")
		}
	}
	b := queuedFor(ctx, l, MarketData, 2) // 2 held, 2 free: past its share
	a := queuedFor(ctx, l, MarketData, 1)
	l.Release(1, MarketData, time.Now(), time.Millisecond, true)
	select {
	case ok := <-b:
		if !ok {
			t.Fatal("client 2's waiter got no slot")
		}
	case <-a:
		t.Fatal("the freed slot went back to client 1 while client 2 waited")
	}
	if l.Waiting() != 1 {
		t.Errorf("%d waiting, want client 1's request", l.Waiting())
	}
}

// TestCancelShare: a cancel's share is of the limit and the cancels'
// headroom, counted in cancels only: a client whose other requests hold
// all the slots it may still has its cancels (3 more, until its cancels
// are as many as are left free), and another client's cancel finds a
// slot while every non-cancel slot is taken.
func TestCancelShare(t *testing.T) {
	l := New(Options{Fixed: 16}) // headroom 2
	if got := fill(l, PrivateRead, 1); got != 12 {
		t.Fatalf("client 1 took %d slots, want 12", got)
	}
	if got := fill(l, Cancel, 1); got != 3 {
		t.Errorf("client 1 took %d cancels beyond its 12 reads, want 3 (6 of limit and headroom left free)", got)
	}
	for who := Client(2); l.InFlight() < 16; who++ {
		fill(l, PrivateRead, who)
	}
	if ok, _ := l.Acquire(context.Background(), Cancel, 99); !ok {
		t.Error("a cancel of a client holding nothing was refused with the headroom free")
	}
}

// TestFreedSlotsGoRoundRobin: freed slots go to the waiting clients in
// turn, each client's oldest waiter first, not to the oldest waiters
// whoever sent them.
func TestFreedSlotsGoRoundRobin(t *testing.T) {
	var waits [NumClasses]time.Duration
	for i := range waits {
		waits[i] = 10 * time.Second
	}
	l := New(Options{Fixed: 2, MaxWait: waits})
	ctx := context.Background()
	for range 2 { // the zero Client has no share: it fills the limit
		if ok, _ := l.Acquire(ctx, Place, 0); !ok {
			t.Fatal("the limit refused the zero Client")
		}
	}
	a1 := queuedFor(ctx, l, Place, 1)
	a2 := queuedFor(ctx, l, Place, 1)
	b1 := queuedFor(ctx, l, Place, 2)
	l.Release(0, PrivateRead, time.Now(), time.Millisecond, true)
	if !<-a1 {
		t.Fatal("client 1's first waiter got no slot")
	}
	l.Release(0, PrivateRead, time.Now(), time.Millisecond, true)
	select {
	case ok := <-b1:
		if !ok {
			t.Fatal("client 2's waiter got no slot")
		}
	case <-a2:
		t.Fatal("the second freed slot went to client 1's second waiter before client 2's first")
	}
	l.Release(1, PrivateRead, time.Now(), time.Millisecond, true)
	if !<-a2 {
		t.Fatal("client 1's second waiter got no slot")
	}
}

// TestAdmitSparesIdleClients: while the queue sheds a class, Admit sheds
// its requests on arrival, except those of a client that holds no slot
// and waits for none.
func TestAdmitSparesIdleClients(t *testing.T) {
	l := New(Options{Fixed: 2})
	ctx := context.Background()
	if ok, _ := l.Acquire(ctx, MarketData, 7); !ok { // client 7 holds a slot
		t.Fatal("client 7 refused")
	}
	if ok, _ := l.Acquire(ctx, MarketData, 0); !ok {
		t.Fatal("the zero Client refused")
	}
	for range 50 { // the queue sheds market data
		if ok, _ := l.Acquire(ctx, MarketData, 9); ok {
			t.Fatal("market data admitted over the limit")
		}
	}
	busy, idle := 0, 0
	for range 1000 {
		if l.Admit(MarketData, 7) {
			busy++
		}
		if l.Admit(MarketData, 9) {
			idle++
		}
	}
	if busy > 100 || idle != 1000 {
		t.Errorf("Admit let through %d of 1000 of a client holding a slot (want under 100) and %d of 1000 of one holding none (want all)", busy, idle)
	}
}

// queuedFor starts an Acquire of class c of client who on l and returns
// once it waits in l's queue, with the channel its result arrives on.
func queuedFor(ctx context.Context, l *Controller, c Class, who Client) <-chan bool {
	n := l.Waiting()
	ch := make(chan bool, 1)
	go func() { ok, _ := l.Acquire(ctx, c, who); ch <- ok }()
	for l.Waiting() != n+1 {
		time.Sleep(time.Millisecond)
	}
	return ch
}

// TestIdleClientKept: the last client to hold nothing keeps its state,
// idle, for its next request, and only that one: it counts as no client
// (Clients), Admit sheds it as a client that holds no slot, and the next
// client to go idle takes its place.
func TestIdleClientKept(t *testing.T) {
	l := New(Options{Fixed: 1, MaxWait: [NumClasses]time.Duration{MarketData: time.Millisecond}})
	ctx := context.Background()
	for _, who := range []Client{1, 1, 2, 3, 3} {
		if ok, _ := l.Acquire(ctx, MarketData, who); !ok {
			t.Fatalf("client %d refused with the backend empty", who)
		}
		l.Release(who, MarketData, time.Now(), time.Millisecond, true)
		if n := l.Clients(); n != 0 || len(l.clients) != 1 || l.idle == nil || l.idle.key != who {
			t.Fatalf("after client %d's request: %d clients, %d states kept, idle %v; want 0, 1 and client %d's",
				who, n, len(l.clients), l.idle, who)
		}
	}
	// The backend full, with market data being shed: the idle client is
	// spared as one that holds nothing; the one holding the slot is not.
	l.Acquire(ctx, MarketData, 4)
	for range 20 {
		l.Acquire(ctx, MarketData, 5)
	}
	if l.Clients() != 1 {
		t.Fatalf("%d clients with client 4 holding the slot, want 1", l.Clients())
	}
	spared, busy := 0, 0
	for range 1000 {
		if l.Admit(MarketData, 3) {
			spared++
		}
		if l.Admit(MarketData, 4) {
			busy++
		}
	}
	if spared != 1000 || busy > 500 {
		t.Errorf("Admit let %d of 1000 of the idle client's through and %d of the busy one's; want all, and under half", spared, busy)
	}
}

// TestIdleStateHoldsNoShare: the state a client keeps idle (forget)
// counts as holding nothing. Whichever client went idle last (the
// flooder or a client about to ask), the shares come out as with no state
// kept; and while a flood from one client holds all it may, a
// well-behaved client whose requests come one at a time (its state idle
// between them, or another's) finds a slot at once every time: a client
// past its share is refused for itself alone.
func TestIdleStateHoldsNoShare(t *testing.T) {
	want := []int{12, 2, 1, 1, 0}
	for idle := Client(1); idle <= 6; idle++ {
		l := New(Options{Fixed: 16})
		if ok, _ := l.Acquire(context.Background(), PrivateRead, idle); !ok {
			t.Fatal("refused with the backend empty")
		}
		l.Release(idle, PrivateRead, time.Now(), time.Millisecond, true)
		for i, n := range want {
			if got := fill(l, PrivateRead, Client(i+1)); got != n {
				t.Errorf("client %d idle first: client %d took %d slots, want %d", idle, i+1, got, n)
			}
		}
	}

	l := New(Options{Fixed: 8}) // no wait: a request that cannot take a slot is shed at once
	stop := make(chan struct{})
	var flood sync.WaitGroup
	for range 16 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ok, _ := l.Acquire(context.Background(), PrivateRead, 1); ok {
					l.Release(1, PrivateRead, time.Now(), time.Millisecond, true)
				}
			}
		}()
	}
	refused := 0
	for i := range 5000 {
		who := Client(2 + i%2) // two well-behaved clients in turn, one request at a time
		if ok, _ := l.Acquire(context.Background(), PrivateRead, who); !ok {
			refused++
			continue
		}
		l.Release(who, PrivateRead, time.Now(), time.Millisecond, true)
	}
	close(stop)
	flood.Wait()
	if refused != 0 {
		t.Errorf("%d of 5,000 requests of clients holding nothing refused under one client's flood, want none", refused)
	}
	if n, in := l.Clients(), l.InFlight(); n != 0 || in != 0 || len(l.clients) > 1 {
		t.Errorf("after the flood: %d clients, %d in flight, %d states kept; want none, none and at most one idle", n, in, len(l.clients))
	}
}

// TestAdmitSparesRequestsWithRoom: while the queue sheds a class, Admit
// does not shed on arrival a request of a busy client (or of the zero
// Client) that would take a slot at once: a cancel with the cancels'
// headroom free while a read waits for the limit. Past the headroom it
// sheds as before. Fixed limit 16 (headroom 2): client 7's cancel and
// fifteen reads hold the limit, two cancels the headroom.
func TestAdmitSparesRequestsWithRoom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		who      Client
		headroom bool // the cancels' headroom is free
		all      bool // every cancel let through
	}{
		{"a client holding a cancel, the headroom free", 7, true, true},
		{"the zero Client, the headroom free", 0, true, true},
		{"a client holding a cancel, the headroom taken", 7, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := New(Options{Fixed: 16, MaxWait: [NumClasses]time.Duration{Cancel: time.Millisecond, MarketData: time.Hour}})
			if ok, _ := l.Acquire(ctx, Cancel, 7); !ok {
				t.Fatal("refused under the limit")
			}
			for i := range 15 {
				if ok, _ := l.Acquire(ctx, MarketData, Client(100+i)); !ok {
					t.Fatal("refused under the limit")
				}
			}
			for _, who := range []Client{8, 9} { // the headroom
				if ok, _ := l.Acquire(ctx, Cancel, who); !ok {
					t.Fatal("a cancel refused the headroom")
				}
			}
			for range 20 { // cancels wait in vain
				if ok, _ := l.Acquire(ctx, Cancel, 10); ok {
					t.Fatal("a cancel took a slot past the headroom")
				}
			}
			if tc.headroom {
				l.Release(8, Cancel, time.Time{}, 0, false)
				l.Release(9, Cancel, time.Time{}, 0, false)
			}
			queuedFor(ctx, l, MarketData, 11) // a read waits for the limit
			let := 0
			for range 1000 {
				if l.Admit(Cancel, tc.who) {
					let++
				}
			}
			if (let == 1000) != tc.all || (!tc.all && let > 100) {
				t.Errorf("Admit let %d of 1000 cancels through; all: %v", let, tc.all)
			}
		})
	}
}

// TestAdmitCountsCancelsApart: while the queue sheds cancels, Admit
// spares the cancel of a client that holds other requests' slots but no
// cancel's and waits for none (its cancels are counted apart), and sheds
// as before that of a client holding a cancel's slot.
func TestAdmitCountsCancelsApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		who  Client
		all  bool // every cancel let through
	}{
		{"holding a read", 7, true},
		{"holding a cancel", 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := New(Options{Fixed: 2, MaxWait: [NumClasses]time.Duration{Cancel: time.Millisecond}})
			for _, h := range []struct {
				c   Class
				who Client
			}{{MarketData, 7}, {Cancel, 8}, {Cancel, 9}} { // the limit and the headroom
				if ok, _ := l.Acquire(ctx, h.c, h.who); !ok {
					t.Fatal("refused within the limit and the headroom")
				}
			}
			for range 8 { // cancels wait in vain
				if ok, _ := l.Acquire(ctx, Cancel, 10); ok {
					t.Fatal("a cancel took a slot past the headroom")
				}
			}
			let := 0
			for range 1000 {
				if l.Admit(Cancel, tc.who) {
					let++
				}
			}
			if (let == 1000) != tc.all {
				t.Errorf("Admit let %d of 1000 cancels through; all: %v", let, tc.all)
			}
		})
	}
}
