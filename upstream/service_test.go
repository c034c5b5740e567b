package upstream

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/overload"
)

func endpoints(t testing.TB, weights ...uint32) []Endpoint {
	t.Helper()
	eps := make([]Endpoint, len(weights))
	for i, w := range weights {
		u, err := url.Parse(fmt.Sprintf("http://10.0.0.%d:9000", i+1))
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = Endpoint{URL: u, Weight: w}
	}
	return eps
}

// shares picks n times, ending each request at once, and counts the
// picks by instance address.
func shares(t *testing.T, s *Service, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		inst, err := s.Pick()
		if err != nil {
			t.Fatal(err)
		}
		got[inst.Addr]++
		inst.Done(Success, Read, 0)
	}
	return got
}

func TestUpdateKeepsInstanceState(t *testing.T) {
	s := NewService("orders", Options{Outlier: Outlier{Consecutive5xx: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 100}})
	eps := endpoints(t, 1, 1, 1)
	s.Update(eps)
	first := s.Instances()
	held, err := s.Pick()
	if err != nil {
		t.Fatal(err)
	}
	var ejected *Instance
	for _, inst := range first {
		if inst != held {
			ejected = inst
			break
		}
	}
	failTwice(ejected, Read)
	if st := s.State(); st.Ejected != 1 || st.Healthy != 2 {
		t.Fatalf("after two clients' 5xx with consecutive_5xx 1: %+v, want 1 ejected, 2 healthy", st)
	}
	// The same list in another order, and a new instance: the old ones
	// keep their requests under way and their ejection.
	more := endpoints(t, 1, 1, 1, 1)
	s.Update([]Endpoint{more[3], more[2], more[1], more[0]})
	if st := s.State(); st.Instances != 4 || st.Ejected != 1 || st.Healthy != 3 {
		t.Fatalf("after adding one: %+v, want 4 instances, 1 ejected", st)
	}
	if held.Active() != 1 {
		t.Errorf("the held instance's requests under way: %d, want 1", held.Active())
	}
	for _, inst := range s.Instances() {
		if inst.URL.String() == held.URL.String() && inst != held {
			t.Errorf("%s named again became a new instance", inst.Addr)
		}
	}
	// Dropped from the list: out of the rotation, its request still ends.
	s.Update(more[3:])
	held.Done(Success, Read, 0)
	for range 50 {
		inst, err := s.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if inst.URL.String() != more[3].URL.String() {
			t.Fatalf("picked %s, which is no longer listed", inst.Addr)
		}
		inst.Done(Success, Read, 0)
	}
}

func TestPickPrefersFewerRequestsUnderWay(t *testing.T) {
	s := NewService("md", Options{})
	s.Update(endpoints(t, 1, 1, 1))
	insts := s.Instances()
	busy := insts[0]
	busy.active.Add(100) // a slow instance holds its requests longer
	got := shares(t, s, 3000)
	// A busy instance loses every draw against another, and the two
	// draws are distinct: it is never chosen.
	if got[busy.Addr] != 0 {
		t.Errorf("shares with one instance busy: %v; want the busy one %s to get far fewer", got, busy.Addr)
	}
}

// TestPickPeeked: a request decided at the instance Peek returned goes
// there and counts as under way there; one whose instance has left the
// rotation meanwhile goes where Pick sends it.
func TestPickPeeked(t *testing.T) {
	cases := []struct {
		name   string
		leaves bool // the peeked instance leaves the service's list before the pick
	}{
		{"still in the rotation", false},
		{"left it", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("md", Options{})
			eps := endpoints(t, 1, 1, 1)
			s.Update(eps)
			for range 50 {
				peeked := s.Peek()
				if tc.leaves {
					var rest []Endpoint
					for _, ep := range eps {
						if ep.URL.Host != peeked.Addr {
							rest = append(rest, ep)
						}
					}
					s.Update(rest)
				}
				inst, err := s.PickPeeked(peeked)
				if err != nil {
					t.Fatal(err)
				}
				if (inst == peeked) == tc.leaves {
					t.Fatalf("picked %s for a request peeked at %s (left the rotation: %v)", inst.Addr, peeked.Addr, tc.leaves)
				}
				if inst.Active() != 1 {
					t.Fatalf("%d requests under way at %s, want the one picked", inst.Active(), inst.Addr)
				}
				inst.Done(Success, Read, 0)
				s.Update(eps)
			}
		})
	}
}

func TestPickFollowsWeights(t *testing.T) {
	s := NewService("md", Options{})
	s.Update(endpoints(t, 3, 1))
	insts := s.Instances()
	got := shares(t, s, 4000)
	heavy, light := got[insts[0].Addr], got[insts[1].Addr]
	// 3:1 by weight; bounds far from it either way.
	if heavy < 2*light || heavy > 5*light {
		t.Errorf("idle shares with weights 3 and 1: %d and %d, want about 3:1", heavy, light)
	}
	// Loaded in proportion to the weights, the light one is as good a
	// choice as the heavy one: it gets about its share again.
	insts[0].active.Add(30)
	insts[1].active.Add(10)
	got = shares(t, s, 4000)
	if got[insts[1].Addr] == 0 || got[insts[0].Addr] < got[insts[1].Addr] {
		t.Errorf("shares with requests under way in proportion to the weights: %v", got)
	}
}

// failTwice ends two requests of kind k at inst as server errors, each of
// another client: a run that ejects at consecutive_5xx 1 or 2 (one
// client's alone never does).
func failTwice(inst *Instance, k Kind) {
	for who := range Client(2) {
		inst.active.Add(1)
		inst.Done(ServerError, k, who+1)
	}
}

func TestEjectionLimits(t *testing.T) {
	var mu sync.Mutex
	var events []Event
	s := NewService("orders", Options{
		Outlier: Outlier{Consecutive5xx: 2, ConsecutiveConnectFailures: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 50},
		OnChange: func(ev Event) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		},
	})
	s.Update(endpoints(t, 1, 1, 1, 1))
	insts := s.Instances()
	var who Client
	fail := func(inst *Instance, o Outcome, n int) {
		for range n {
			who++ // each request another client's
			inst.active.Add(1)
			inst.Done(o, Read, who)
		}
	}
	fail(insts[0], ServerError, 1)
	fail(insts[0], Success, 1) // a success ends the run
	fail(insts[0], ServerError, 1)
	if st := s.State(); st.Ejected != 0 {
		t.Fatalf("ejected after runs of one 5xx: %+v", st)
	}
	fail(insts[0], ServerError, 2)
	fail(insts[1], ConnectFailure, 1)
	fail(insts[2], ConnectFailure, 1) // 3 of 4 would be past 50%
	st := s.State()
	if st.Ejected != 2 || st.Healthy != 2 || st.Panic {
		t.Fatalf("state: %+v, want 2 ejected (max 50%%), 2 healthy", st)
	}
	mu.Lock()
	defer mu.Unlock()
	var reasons []string
	for _, ev := range events {
		if ev.Kind == Ejected {
			reasons = append(reasons, ev.Instance.Addr+" "+ev.Reason.String())
		}
	}
	want := []string{insts[0].Addr + " consecutive_5xx", insts[1].Addr + " connect_failure"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("ejections: %v, want %v", reasons, want)
	}
}

func TestEjectionEndsAndGrows(t *testing.T) {
	returned := make(chan *Instance, 4)
	s := NewService("orders", Options{
		Outlier: Outlier{Consecutive5xx: 1, BaseEjectionTime: 20 * time.Millisecond, MaxEjectionTime: time.Minute, MaxEjectionPercent: 100},
		OnChange: func(ev Event) {
			if ev.Kind == Returned {
				returned <- ev.Instance
			}
		},
	})
	s.Update(endpoints(t, 1, 1))
	inst := s.Instances()[0]
	for i := 1; i <= 2; i++ {
		failTwice(inst, Read)
		s.mu.Lock()
		n := inst.ejections
		s.mu.Unlock()
		if n != i {
			t.Fatalf("ejections after %d: %d", i, n)
		}
		if got := <-returned; got != inst {
			t.Fatalf("returned %s, want %s", got.Addr, inst.Addr)
		}
		if st := s.State(); st.Healthy != 2 {
			t.Fatalf("after the ejection ended: %+v", st)
		}
	}
}

func TestPanicAndUnavailable(t *testing.T) {
	s := NewService("orders", Options{
		Outlier:        Outlier{Consecutive5xx: 1, ConsecutiveConnectFailures: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 100},
		PanicThreshold: 50,
	})
	s.Update(endpoints(t, 1, 1, 1))
	insts := s.Instances()
	failTwice(insts[0], Read)
	failTwice(insts[1], Read)
	st := s.State()
	if !st.Panic || !st.Available() {
		t.Fatalf("1 of 3 healthy under a 50%% threshold: %+v, want panic", st)
	}
	got := shares(t, s, 300)
	if got[insts[0].Addr] == 0 || got[insts[1].Addr] == 0 {
		t.Errorf("in panic the 5xx-ejected instances get no share: %v", got)
	}
	insts[2].active.Add(1)
	insts[2].Done(ConnectFailure, Read, 0)
	got = shares(t, s, 300)
	if got[insts[2].Addr] != 0 {
		t.Errorf("an instance ejected for refusing connects got %d requests in panic", got[insts[2].Addr])
	}
	s.Update(nil)
	if _, err := s.Pick(); err != ErrUnavailable {
		t.Errorf("Pick of an empty service: %v, want ErrUnavailable", err)
	}
	if s.State().Available() {
		t.Error("an empty service is available")
	}
}

func TestPickAllocatesNothing(t *testing.T) {
	s := NewService("md", Options{})
	s.Update(endpoints(t, 1, 2, 3))
	if n := testing.AllocsPerRun(1000, func() {
		inst, _ := s.Pick()
		inst.Done(Success, Read, 0)
	}); n != 0 {
		t.Errorf("Pick and Done allocate %v times", n)
	}
}

// BenchmarkPick measures the choice of an instance and its release, with
// equal and unequal weights, from parallel goroutines.
func BenchmarkPick(b *testing.B) {
	for _, c := range []struct {
		name    string
		weights []uint32
	}{
		{"equal3", []uint32{1, 1, 1}},
		{"weighted3", []uint32{1, 2, 3}},
		{"equal64", make([]uint32, 64)},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := NewService("bench", Options{})
			s.Update(endpoints(b, c.weights...))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					inst, _ := s.Pick()
					inst.Done(Success, Read, 0)
				}
			})
		})
	}
}

// TestPriorityFailover: a service sends requests to its lowest priority
// while that level is healthy enough (a healthy instance, and at least
// panic_threshold percent of its instances), to the next level while it
// is not, and back when it recovers; with no level healthy enough, panic
// mode applies to the lowest level that accepts connections.
func TestPriorityFailover(t *testing.T) {
	hc := config.HealthCheck{UnhealthyThreshold: 1, HealthyThreshold: 1}
	for _, tc := range []struct {
		name      string
		threshold int
		down      []int // instances marked down: 0 and 1 are priority 10, 2 and 3 priority 20, 4 priority 30
		ejected   []int // instances ejected for a server error
		want      []int // the instances picked
		failover  bool
		panic     bool
	}{
		{"all healthy: the lowest priority", 50, nil, nil, []int{0, 1}, false, false},
		{"half the lowest healthy, at the threshold", 50, []int{0}, nil, []int{1}, false, false},
		{"half the lowest healthy, under the threshold", 60, []int{0}, nil, []int{2, 3}, true, false},
		{"lowest down: the next", 50, []int{0, 1}, nil, []int{2, 3}, true, false},
		{"two levels down: the third", 50, []int{0, 1, 2, 3}, nil, []int{4}, true, false},
		{"no threshold: one healthy instance keeps its level", 0, []int{0}, nil, []int{1}, false, false},
		{"none healthy enough: panic in the lowest that accepts connections", 50, []int{2, 3, 4}, []int{0, 1}, []int{0, 1}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("orders", Options{
				Outlier:        Outlier{Consecutive5xx: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 100},
				PanicThreshold: tc.threshold,
			})
			eps := endpoints(t, 1, 1, 1, 1, 1)
			for i, p := range []uint16{10, 10, 20, 20, 30} {
				eps[i].Priority = p
			}
			s.Update([]Endpoint{eps[4], eps[2], eps[0], eps[3], eps[1]}) // the list's order does not matter
			insts := map[string]*Instance{}
			for _, inst := range s.Instances() {
				insts[inst.Addr] = inst
			}
			at := func(i int) *Instance { return insts[eps[i].URL.Host] }
			for _, i := range tc.down {
				s.recordCheck(at(i), false, hc)
			}
			for _, i := range tc.ejected {
				failTwice(at(i), Read)
			}
			got := shares(t, s, 200)
			var want []string
			for _, i := range tc.want {
				want = append(want, at(i).Addr)
				if got[at(i).Addr] == 0 {
					t.Errorf("instance %d got no request: %v", i, got)
				}
			}
			if len(got) != len(want) {
				t.Errorf("requests went to %v, want only %v", got, want)
			}
			var rotation []string
			for _, inst := range s.Rotation() {
				rotation = append(rotation, inst.Addr)
			}
			if slices.Sort(rotation); !slices.Equal(rotation, slices.Sorted(slices.Values(want))) {
				t.Errorf("rotation %v, want %v", rotation, want)
			}
			if st := s.State(); st.Failover != tc.failover || st.Panic != tc.panic || st.Priority != eps[tc.want[0]].Priority {
				t.Errorf("state %+v, want failover %v, panic %v, priority %d", st, tc.failover, tc.panic, eps[tc.want[0]].Priority)
			}
			for _, i := range tc.down {
				s.recordCheck(at(i), true, hc)
			}
			if st := s.State(); len(tc.ejected) == 0 && (st.Failover || st.Priority != 10) {
				t.Errorf("after the lowest level recovered: %+v, want it in use again", st)
			}
		})
	}
}

// TestEjectionRunsByKind feeds one instance's outcomes, reads and writes
// interleaved, under consecutive_5xx 3: a run of either kind's server
// errors ejects it whatever the other kind does meanwhile (an instance
// whose orders fail while its reads succeed), a success ends only its
// own kind's run, and a run over both kinds ejects as before.
func TestEjectionRunsByKind(t *testing.T) {
	const (
		rOK  = "r+" // a read answered
		rErr = "r-" // a read failed (5xx)
		wOK  = "w+"
		wErr = "w-"
	)
	tests := []struct {
		name  string
		seq   []string
		want  Reason // ReasonNone: still in the rotation
		after int    // the outcome that ejects it (1-based), when want is not ReasonNone
	}{
		{"writes fail, reads succeed", []string{wErr, rOK, wErr, rOK, rOK, wErr, rOK}, ReasonWrites5xx, 6},
		{"reads fail, writes succeed", []string{rErr, wOK, rErr, wOK, rErr}, ReasonReads5xx, 5},
		{"a write's success ends the writes' run", []string{wErr, rOK, wErr, wOK, wErr, rOK, wErr}, ReasonNone, 0},
		{"both fail: the run over both", []string{wErr, rErr, wErr}, ReasonConsecutive5xx, 3},
		{"alternating failures and successes of each", []string{wErr, wOK, rErr, rOK, wErr, wOK, rErr, rOK}, ReasonNone, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Event
			s := NewService("orders", Options{
				Outlier: Outlier{Consecutive5xx: 3, BaseEjectionTime: time.Hour, MaxEjectionPercent: 50},
				OnChange: func(ev Event) {
					if ev.Kind == Ejected {
						got = append(got, ev)
					}
				},
			})
			s.Update(endpoints(t, 1, 1))
			inst := s.Instances()[0]
			at := 0
			for i, o := range tt.seq {
				k, out := Read, Success
				if o[0] == 'w' {
					k = Write
				}
				if o[1] == '-' {
					out = ServerError
				}
				inst.active.Add(1)
				inst.Done(out, k, Client(i)) // each request another client's
				if len(got) > 0 && at == 0 {
					at = i + 1
				}
			}
			switch {
			case tt.want == ReasonNone && len(got) != 0:
				t.Fatalf("ejected for %s after outcome %d", got[0].Reason, at)
			case tt.want == ReasonNone:
				return
			case len(got) != 1 || got[0].Reason != tt.want || at != tt.after:
				t.Fatalf("ejections %v at outcome %d, want one for %s at %d", got, at, tt.want, tt.after)
			}
			if st := s.Status()[0]; st.State != "ejected" || st.Reason != tt.want.String() || st.Ejections[tt.want.String()] != 1 {
				t.Errorf("status: %+v", st)
			}
			for range 20 {
				if p, _ := s.Pick(); p == inst {
					t.Fatal("the ejected instance was picked")
				} else {
					p.Done(Success, Write, 0)
				}
			}
		})
	}
}

// TestLeavingTheRotationEndsWaits queues a request at an instance whose
// limit is full, then takes the instance out of the rotation: its wait
// ends at once without a slot, the instance reports it is out
// (InRotation), a request picked for it before it left neither gets a slot
// nor queues there, and once back it is in and queues requests again; an
// instance that stays is untouched.
func TestLeavingTheRotationEndsWaits(t *testing.T) {
	tests := []struct {
		name  string
		leave func(s *Service, inst *Instance, eps []Endpoint)
		back  func(s *Service, inst *Instance, eps []Endpoint)
	}{
		{"ejected", func(s *Service, inst *Instance, _ []Endpoint) {
			failTwice(inst, Write)
		}, func(s *Service, inst *Instance, _ []Endpoint) { s.unEject(inst) }},
		{"gone from the list", func(s *Service, _ *Instance, eps []Endpoint) { s.Update(eps[1:]) },
			func(s *Service, _ *Instance, eps []Endpoint) { s.Update(eps) }},
		{"down", func(s *Service, inst *Instance, _ []Endpoint) {
			s.recordCheck(inst, false, config.HealthCheck{UnhealthyThreshold: 1})
		}, func(s *Service, inst *Instance, _ []Endpoint) {
			s.recordCheck(inst, true, config.HealthCheck{HealthyThreshold: 1})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			waits := [overload.NumClasses]time.Duration{overload.Place: time.Hour}
			s := NewService("orders", Options{
				Outlier:  Outlier{Consecutive5xx: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 50},
				Overload: overload.Options{Fixed: 1, MaxWait: waits},
			})
			eps := endpoints(t, 1, 1)
			s.Update(eps)
			inst, other := s.Instances()[0], s.Instances()[1]
			ctx := context.Background()
			for _, i := range []*Instance{inst, other} {
				if ok, _ := i.Controller.Acquire(ctx, overload.Place, 1); !ok || !i.InRotation() {
					t.Fatalf("%s: first slot %v, in the rotation %v", i.Addr, ok, i.InRotation())
				}
			}
			waited := make(chan bool, 2)
			for _, i := range []*Instance{inst, other} {
				go func() { ok, _ := i.Controller.Acquire(ctx, overload.Place, 2); waited <- ok }()
				for i.Controller.Waiting() != 1 {
					time.Sleep(time.Millisecond)
				}
			}
			tt.leave(s, inst, eps)
			if <-waited {
				t.Fatal("the request queued at the instance that left got a slot")
			}
			if inst.InRotation() || !other.InRotation() || other.Controller.Waiting() != 1 {
				t.Fatalf("in the rotation: %v and %v, the other's waiting %d; want out, in, 1",
					inst.InRotation(), other.InRotation(), other.Controller.Waiting())
			}
			if ok, _ := inst.Controller.Acquire(ctx, overload.Place, 3); ok || inst.Controller.Waiting() != 0 {
				t.Fatal("a request picked for the instance before it left got a slot or queued there")
			}
			tt.back(s, inst, eps)
			back := s.Instances()[0]
			if !back.InRotation() {
				t.Fatal("back, the instance is still out of the rotation")
			}
			other.Controller.Release(1, overload.Place, time.Now(), time.Millisecond, true)
			if !<-waited {
				t.Fatal("the other instance's waiter was not served")
			}
			if back.Controller.InFlight() == 0 { // a new instance of the same address: fill its slot
				if ok, _ := back.Controller.Acquire(ctx, overload.Place, 1); !ok {
					t.Fatal("back, the instance's free slot was refused")
				}
			}
			go func() { ok, _ := back.Controller.Acquire(ctx, overload.Place, 2); waited <- ok }()
			for back.Controller.Waiting() != 1 {
				time.Sleep(time.Millisecond)
			}
			back.Controller.Release(1, overload.Place, time.Now(), time.Millisecond, true)
			if !<-waited {
				t.Fatal("back, a request queued at the instance was not served")
			}
		})
	}
}

// TestEjectionNeedsClientsBesidesOne ends requests of several clients at
// an instance and checks that a run of server errors ejects only when it
// is not one client's alone: a client whose requests make the backend
// fail (a poison order) ejects nothing, however many it sends, nor with
// one other client's failure beside them; two clients' failures on a
// broken instance eject it.
func TestEjectionNeedsClientsBesidesOne(t *testing.T) {
	rep := func(s string, n int) []string { return slices.Repeat([]string{s}, n) }
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	tests := []struct {
		name  string
		n     int      // consecutive_5xx
		seq   []string // each request: its client (A, B, C, D), kind (r, w) and outcome (+, -)
		want  Reason   // ReasonNone: still in the rotation
		after int      // the request that ejects it (1-based)
	}{
		{"one client's failed orders alone", 3, rep("Aw-", 50), ReasonNone, 0},
		{"one client's and one other failure", 3, cat(rep("Aw-", 20), []string{"Bw-"}, rep("Aw-", 20)), ReasonNone, 0},
		{"one client's and two other failures", 3, cat(rep("Aw-", 10), []string{"Bw-", "Cw-"}), ReasonConsecutive5xx, 12},
		{"the one client's failures around another's", 3, cat([]string{"Bw-"}, rep("Aw-", 10), []string{"Bw-"}), ReasonConsecutive5xx, 12},
		{"another client's success ends the run", 3, cat(rep("Aw-", 10), []string{"Bw-", "Cw+", "Bw-"}, rep("Aw-", 10)), ReasonNone, 0},
		{"another client's read ends the run over all only", 3, cat(rep("Aw-", 5), []string{"Br+", "Bw-", "Cw-"}), ReasonWrites5xx, 8},
		{"one client's failed orders, others' reads succeeding", 3, cat(rep("Aw-", 5), rep("Br+", 5), rep("Aw-", 5)), ReasonNone, 0},
		{"two clients on a broken instance", 3, []string{"Aw-", "Bw-", "Aw-", "Bw-"}, ReasonConsecutive5xx, 4},
		{"three clients on a broken instance", 3, []string{"Aw-", "Bw-", "Cw-"}, ReasonConsecutive5xx, 3},
		{"a fifth client past the run's set", 6, []string{"Aw-", "Bw-", "Cw-", "Dw-", "Ew-", "Ew-"}, ReasonConsecutive5xx, 6},
		{"one client's failed reads alone", 5, rep("Ar-", 50), ReasonNone, 0},
		{"consecutive_5xx 1: one client's failure", 1, rep("Aw-", 10), ReasonNone, 0},
		{"consecutive_5xx 1: two clients' failures", 1, []string{"Aw-", "Aw-", "Bw-"}, ReasonConsecutive5xx, 3},
		{"consecutive_5xx 2: two clients' failures", 2, []string{"Aw-", "Bw-"}, ReasonConsecutive5xx, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Event
			s := NewService("orders", Options{
				Outlier: Outlier{Consecutive5xx: tt.n, BaseEjectionTime: time.Hour, MaxEjectionPercent: 50},
				OnChange: func(ev Event) {
					if ev.Kind == Ejected {
						got = append(got, ev)
					}
				},
			})
			s.Update(endpoints(t, 1, 1))
			inst := s.Instances()[0]
			at := 0
			for i, r := range tt.seq {
				k, out := Read, Success
				if r[1] == 'w' {
					k = Write
				}
				if r[2] == '-' {
					out = ServerError
				}
				inst.active.Add(1)
				inst.Done(out, k, Client(r[0]))
				if len(got) > 0 && at == 0 {
					at = i + 1
				}
			}
			switch {
			case tt.want == ReasonNone && len(got) != 0:
				t.Fatalf("ejected for %s after request %d", got[0].Reason, at)
			case tt.want == ReasonNone:
				if st := s.Status()[0]; st.State != "healthy" || st.Requests["server_error"] == 0 {
					t.Errorf("status: %+v", st)
				}
			case len(got) != 1 || got[0].Reason != tt.want || at != tt.after:
				t.Fatalf("ejections %v at request %d, want one for %s at %d", got, at, tt.want, tt.after)
			}
		})
	}
}

// TestFailurePercentageEjection ends requests of several clients at an
// instance, failing some, and checks failure-percentage ejection: an
// instance whose last requests of a kind failed in at least the threshold's
// share is ejected when the failures are not mostly one client's, its
// successes between them notwithstanding (no run of failures would eject
// it); one client's failures, however many, eject nothing.
func TestFailurePercentageEjection(t *testing.T) {
	// cycle repeats the requests of pattern n times.
	cycle := func(n int, pattern ...string) []string { return slices.Repeat(pattern, n) }
	// spread is n requests of kind k from A, B and C in turn, every other
	// one failing (the first failing).
	spread := func(n int, k byte) []string {
		var seq []string
		for i := range n {
			out := byte('+')
			if i%2 == 0 {
				out = '-'
			}
			seq = append(seq, string([]byte{"ABC"[i%3], k, out}))
		}
		return seq
	}
	var interleaved []string // reads of A that succeed between writes failing half
	for _, w := range spread(20, 'w') {
		interleaved = append(interleaved, "Ar+", w)
	}
	tests := []struct {
		name      string
		threshold int
		seq       []string
		want      Reason
		after     int
	}{
		{"half of three clients' orders fail", 50, spread(20, 'w'), ReasonFailurePercentage, 20},
		{"half of their reads fail", 50, spread(20, 'r'), ReasonFailurePercentage, 20},
		{"under the threshold", 60, spread(60, 'w'), ReasonNone, 0},
		{"off", 0, spread(60, 'w'), ReasonNone, 0},
		{"the writes' window apart from the reads'", 50, interleaved, ReasonFailurePercentage, 40},
		{"one client's failed orders alone", 50, cycle(20, "Aw-", "Aw-", "Bw+"), ReasonNone, 0},
		{"one client's and another's few", 50, cycle(20, "Aw-", "Aw-", "Aw-", "Bw-", "Cw+"), ReasonNone, 0},
		{"one client's beside a broken instance's", 50, cycle(4, "Aw-", "Bw-", "Cw+", "Cw-", "Bw+"), ReasonFailurePercentage, 20},
		{"two clients' only, one of them failing", 50, cycle(20, "Aw-", "Bw+"), ReasonNone, 0},
		{"one client's failures past four others'", 50, slices.Concat([]string{"Bw-", "Fw+", "Cw-", "Fw+", "Dw-", "Fw+", "Ew-", "Fw+"},
			cycle(4, "Aw-", "Aw-", "Fw+")), ReasonNone, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Event
			s := NewService("orders", Options{
				Outlier: Outlier{Consecutive5xx: 3, FailurePercentage: tt.threshold, FailurePercentageRequestVolume: 20,
					BaseEjectionTime: time.Hour, MaxEjectionPercent: 50},
				OnChange: func(ev Event) {
					if ev.Kind == Ejected {
						got = append(got, ev)
					}
				},
			})
			s.Update(endpoints(t, 1, 1))
			inst := s.Instances()[0]
			at := 0
			for i, r := range tt.seq {
				k, out := Read, Success
				if r[1] == 'w' {
					k = Write
				}
				if r[2] == '-' {
					out = ServerError
				}
				inst.active.Add(1)
				inst.Done(out, k, Client(r[0]))
				if len(got) > 0 && at == 0 {
					at = i + 1
				}
			}
			switch {
			case tt.want == ReasonNone && len(got) != 0:
				t.Fatalf("ejected for %s after request %d", got[0].Reason, at)
			case tt.want == ReasonNone:
			case len(got) != 1 || got[0].Reason != tt.want || at != tt.after:
				t.Fatalf("ejections %v at request %d, want one for %s at %d", got, at, tt.want, tt.after)
			}
		})
	}
}

// TestLimitWithinConnections checks which instances have their
// concurrency limit kept within upstream.max_conns_per_host: those
// reached over HTTP/1.1 (an http URL, or https without HTTP/2, or an
// https one offered HTTP/2 that answers in HTTP/1.1: ALPN fell back),
// where each connection carries one request; an https instance offered
// HTTP/2 that answers in it carries many on each, and keeps its limit. A
// reload's options are kept within them too.
func TestLimitWithinConnections(t *testing.T) {
	for _, tc := range []struct {
		name     string
		url      string
		maxConns int
		http2    bool
		answered []int // the HTTP major versions of its answers, before the reload
		want     int   // the limit of a fixed 100
		reloaded int   // the limit of a fixed 200
	}{
		{"http, capped", "http://10.0.0.1:9000", 9, true, nil, 8, 8},
		{"https without HTTP/2, capped", "https://10.0.0.1:9443", 9, false, nil, 8, 8},
		{"https offered HTTP/2", "https://10.0.0.1:9443", 9, true, nil, 100, 200},
		{"https offered HTTP/2, answering in it", "https://10.0.0.1:9443", 9, true, []int{2}, 100, 200},
		{"https offered HTTP/2, answering in HTTP/1.1", "https://10.0.0.1:9443", 9, true, []int{1}, 8, 8},
		{"https offered HTTP/2, in HTTP/2 again", "https://10.0.0.1:9443", 9, true, []int{1, 2}, 100, 200},
		{"no cap", "http://10.0.0.1:9000", 0, false, nil, 100, 200},
		{"no cap, answering in HTTP/1.1", "https://10.0.0.1:9443", 0, true, []int{1}, 100, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			s := NewService("md", Options{Overload: overload.Options{Fixed: 100}, MaxConns: tc.maxConns, HTTP2: tc.http2})
			s.Update([]Endpoint{{URL: u}})
			inst := s.Instances()[0]
			for _, major := range tc.answered {
				inst.Answered(major)
			}
			if got := inst.Controller.Limit(); got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
			s.ConfigureOverload(overload.Options{Fixed: 200})
			if got := inst.Controller.Limit(); got != tc.reloaded {
				t.Errorf("limit after a reload %d, want %d", got, tc.reloaded)
			}
		})
	}
}

// TestPickOther moves a request from its instance to the one of the
// rotation with room for it and the fewest requests under way per unit
// of weight, counting it there and no longer at the first; with no other
// instance with room it stays where it is.
func TestPickOther(t *testing.T) {
	for _, tc := range []struct {
		name   string
		room   []bool  // by instance, the first the request's
		active []int64 // requests under way, by instance, besides it
		want   int     // the instance it moves to, -1 none
	}{
		{"the one with room", []bool{false, false, true}, []int64{0, 0, 5}, 2},
		{"the least loaded with room", []bool{false, true, true}, []int64{0, 6, 5}, 2},
		{"fewer per unit of weight", []bool{false, true, true}, []int64{0, 4, 6}, 2},
		{"fewer per unit of weight, the lighter", []bool{false, true, true}, []int64{0, 3, 7}, 1},
		{"none with room", []bool{true, false, false}, []int64{0, 0, 0}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("md", Options{})
			s.Update(endpoints(t, 1, 1, 2)) // the third weighs 2: 6 under way there are 3 a unit
			insts := s.Instances()
			from, err := s.PickPeeked(insts[0])
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range tc.active {
				insts[i].active.Add(n)
				s.active.Add(n)
			}
			room := map[*Instance]bool{}
			for i, r := range tc.room {
				room[insts[i]] = r
			}
			got := s.PickOther(from, func(in *Instance) bool { return room[in] })
			switch {
			case tc.want < 0 && got != nil:
				t.Fatalf("moved to %s, want it to stay", got.Addr)
			case tc.want < 0:
				if from.Active() != 1 {
					t.Errorf("the request no longer counts where it stays")
				}
				return
			case got != insts[tc.want]:
				t.Fatalf("moved elsewhere than instance %d (%s)", tc.want, insts[tc.want].Addr)
			}
			if from.Active() != 0 || got.Active() != tc.active[tc.want]+1 {
				t.Errorf("under way: %d at the first, %d where it went; want 0 and %d", from.Active(), got.Active(), tc.active[tc.want]+1)
			}
		})
	}
}

// TestRetryBudgetCancelsShare: a cancel may be retried past the budget by
// an eighth of it, at least one; other classes stop at the budget, and a
// budget of none retries nothing, cancels included.
func TestRetryBudgetCancelsShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budget   RetryBudget
		under    int64 // retries under way already
		class    overload.Class
		retrying bool
	}{
		{"a read within the budget", RetryBudget{Min: 1}, 0, overload.MarketData, true},
		{"a read past the budget", RetryBudget{Min: 1}, 1, overload.MarketData, false},
		{"a cancel past the budget, within its share", RetryBudget{Min: 1}, 1, overload.Cancel, true},
		{"a cancel past its share", RetryBudget{Min: 1}, 2, overload.Cancel, false},
		{"a cancel past a budget of 16, within its share of 2", RetryBudget{Min: 16}, 17, overload.Cancel, true},
		{"a cancel past a budget of 16 and its share", RetryBudget{Min: 16}, 18, overload.Cancel, false},
		{"no budget", RetryBudget{}, 0, overload.Cancel, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("orders", Options{RetryBudget: tc.budget})
			s.Update(endpoints(t, 1, 1))
			prev, err := s.Pick()
			if err != nil {
				t.Fatal(err)
			}
			s.retries.used += tc.under // other clients' retries
			next := s.Retry(prev, tc.class, 1)
			if got := next != nil; got != tc.retrying {
				t.Fatalf("retried: %v, want %v", got, tc.retrying)
			}
			if want := tc.under + map[bool]int64{true: 1}[tc.retrying]; s.retries.used != want {
				t.Errorf("%d retries under way, want %d", s.retries.used, want)
			}
		})
	}
}

// TestRetryBudgetClientShare: each client may hold fewer retries than are
// left free of the budget, so that one client's failing requests never
// spend the retries of another's; a cancel counts against its client's
// cancels only, and the zero Client (exgate's own requests) has no share.
func TestRetryBudgetClientShare(t *testing.T) {
	type retry struct {
		who   Client
		class overload.Class
	}
	md, cancel := overload.MarketData, overload.Cancel
	for _, tc := range []struct {
		name    string
		min     int
		held    []retry // retries taken first, each allowed
		next    retry
		allowed bool
		why     retryRefusal // when refused
	}{
		{"a client alone takes fewer than are left free", 4, []retry{{1, md}, {1, md}}, retry{1, md}, false, retryOverShare},
		{"another client finds its share", 4, []retry{{1, md}, {1, md}}, retry{2, md}, true, 0},
		{"a third client finds what is left", 4, []retry{{1, md}, {1, md}, {2, md}}, retry{3, md}, true, 0},
		{"a second client past its share", 8, []retry{{1, md}, {1, md}, {1, md}, {1, md}, {2, md}, {2, md}}, retry{2, md}, false, retryOverShare},
		{"a third client within its share", 8, []retry{{1, md}, {1, md}, {1, md}, {1, md}, {2, md}, {2, md}}, retry{3, md}, true, 0},
		{"a cancel past its client's reads", 4, []retry{{1, md}, {1, md}}, retry{1, cancel}, true, 0},
		{"a cancel past its client's cancels", 4, []retry{{1, cancel}, {1, cancel}, {1, cancel}}, retry{1, cancel}, false, retryOverShare},
		{"exgate's own past any share", 4, []retry{{0, md}, {0, md}}, retry{0, md}, true, 0},
		{"a spent budget", 2, []retry{{1, md}, {2, md}}, retry{3, md}, false, retryOverBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("orders", Options{RetryBudget: RetryBudget{Min: tc.min}})
			s.Update(endpoints(t, 2, 1))
			var prev []*Instance
			for i, r := range append(tc.held, tc.next) {
				from, err := s.Pick()
				if err != nil {
					t.Fatal(err)
				}
				prev = append(prev, from)
				next := s.Retry(from, r.class, r.who)
				if i < len(tc.held) {
					if next == nil {
						t.Fatalf("retry %d of %v refused, want it allowed", i, tc.held)
					}
					continue
				}
				if got := next != nil; got != tc.allowed {
					t.Fatalf("retry of client %d (class %v) allowed: %v, want %v", r.who, r.class, got, tc.allowed)
				}
			}
			c := s.Counts()
			refused := [numRetryRefusals]uint64{c.RetriesOverBudget, c.RetriesOverShare}
			if !tc.allowed && (refused[tc.why] != 1 || refused[1-tc.why] != 0) {
				t.Errorf("refusals counted over the budget %d, over the share %d; want 1 of %d", refused[0], refused[1], tc.why)
			}
			for _, r := range tc.held {
				s.EndRetry(r.class, r.who)
			}
			if tc.allowed {
				s.EndRetry(tc.next.class, tc.next.who)
			}
			if s.retries.used != 0 || len(s.retries.held) != 0 {
				t.Errorf("%d retries under way, %d clients holding, after every one ended", s.retries.used, len(s.retries.held))
			}
		})
	}
}

// TestWatchAndTakeOther checks what a cancel waiting at a full instance
// watches and takes: Watch's channel closes when an instance's
// Controller is left with room for a cancel, or an instance joins the
// rotation, and not while room is left unwatched; TakeOther moves the
// request only where take took a slot.
func TestWatchAndTakeOther(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		name  string
		event func(s *Service, insts []*Instance)
		slots int // held where the request went, its own included
	}{
		{"a slot freed", func(s *Service, insts []*Instance) {
			insts[1].Controller.Release(2, overload.Cancel, time.Time{}, 0, false)
		}, 2},
		{"an instance joins", func(s *Service, insts []*Instance) { s.Update(endpoints(t, 1, 1, 1)) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("md", Options{Overload: overload.Options{Fixed: 1}})
			s.Update(endpoints(t, 1, 1))
			insts := s.Instances()
			for i, inst := range insts { // each instance's limit and headroom
				for j := range 2 {
					if !inst.Controller.TryAcquire(overload.Cancel, overload.Client(i+j+1)) {
						t.Fatal("no slot")
					}
				}
			}
			from, err := s.PickPeeked(insts[0])
			if err != nil {
				t.Fatal(err)
			}
			room := func(in *Instance) bool { return in.Controller.Room(overload.Cancel, 9) }
			take := func(in *Instance) bool { return in.Controller.TryAcquire(overload.Cancel, 9) }
			if got := s.TakeOther(from, room, take); got != nil {
				t.Fatalf("took a slot at %s with every instance full", got.Addr)
			}
			ch := s.Watch()
			tc.event(s, insts)
			if !closed(ch) {
				t.Fatal("Watch's channel still open")
			}
			insts[0].Controller.Release(1, overload.Cancel, time.Time{}, 0, false) // unwatched
			if closed(s.Watch()) {
				t.Error("a room unwatched closed the next Watch's channel")
			}
			got := s.TakeOther(from, room, take)
			if got == nil || got == from {
				t.Fatalf("TakeOther moved the request to %v, want the other instance with room", got)
			}
			if from.Active() != 0 || got.Active() != 1 || got.Controller.InFlight() != tc.slots {
				t.Errorf("under way: %d at the first, %d where it went, %d slots there; want 0, 1, %d",
					from.Active(), got.Active(), got.Controller.InFlight(), tc.slots)
			}
		})
	}
}
