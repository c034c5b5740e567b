package upstream

import (
	"context"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/exgate/exgate/overload"
)

// TestUpdateWhilePicking changes the weights of instances a source names
// again (a DNS source's SRV records) while requests pick: the race
// detector finds no unguarded access.
func TestUpdateWhilePicking(t *testing.T) {
	s := NewService("orders", Options{})
	a, _ := url.Parse("http://10.0.0.1:80")
	b, _ := url.Parse("http://10.0.0.2:80")
	s.Update([]Endpoint{{URL: a, Weight: 1}, {URL: b, Weight: 1}})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 2000 {
			s.Update([]Endpoint{{URL: a, Weight: uint32(1 + i%5)}, {URL: b, Weight: 1}})
		}
	}()
	go func() {
		defer wg.Done()
		for range 2000 {
			inst, err := s.Pick()
			if err != nil {
				t.Error(err)
				return
			}
			inst.Done(Success, Read, 0)
		}
	}()
	wg.Wait()
	_ = s.Status()
}

// TestUpdateNamedAgainWhileDraining removes an instance from the list
// (a pod whose readiness probe failed, gone from its headless Service's
// DNS answer) while a request is under way at it, and names it again
// (the pod ready again) before that request ends: it is the same
// instance, whose request still counts — against its concurrency limit,
// in its load for the balancer — and whose ejection still holds. Before,
// it came back as a new instance, idle, with a fresh limit: a backend
// with a limit of one was sent a second request at once, and an
// overloaded instance whose readiness flapped drew the requests of its
// peers (it looked idle to the two choices).
func TestUpdateNamedAgainWhileDraining(t *testing.T) {
	cases := []struct {
		name string
		// ended ends the request under way before the instance is named
		// again; eject ejects the instance for server errors first.
		ended, eject bool
	}{
		{name: "request under way"},
		{name: "ejected, request under way", eject: true},
		{name: "request ended", ended: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService("orders", Options{
				Outlier:  Outlier{Consecutive5xx: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 100},
				Overload: overload.Options{Fixed: 1},
			})
			eps := endpoints(t, 1, 1)
			s.Update(eps)
			a := s.Instances()[0]
			held, err := s.PickPeeked(a)
			if err != nil || held != a {
				t.Fatalf("PickPeeked(a) = %v, %v", held, err)
			}
			if ok, _ := a.Controller.Acquire(context.Background(), overload.Place, 1); !ok {
				t.Fatal("the first request found no slot at a")
			}
			if tc.eject {
				for who := range Client(2) { // two clients' requests fail there
					failed, _ := s.PickPeeked(a)
					failed.Done(ServerError, Read, who+1)
				}
				if st := s.State(); st.Ejected != 1 {
					t.Fatalf("after two clients' 5xx with consecutive_5xx 1: %+v, want 1 ejected", st)
				}
			}
			s.Update(eps[1:]) // a leaves the answer
			if tc.ended {
				a.Controller.Release(1, overload.Place, time.Time{}, 0, false)
				a.Done(Success, Read, 0)
			}
			s.Update(eps) // and is named again
			again := s.Instances()[0]
			if again.Addr != a.Addr {
				t.Fatalf("first instance %s, want %s", again.Addr, a.Addr)
			}
			if tc.ended {
				if again.Active() != 0 || again.Controller.InFlight() != 0 {
					t.Errorf("named again after its request ended: %d under way, %d slots taken, want 0",
						again.Active(), again.Controller.InFlight())
				}
				return
			}
			if again != a {
				t.Fatal("named again while its request is under way: a new instance, want the same")
			}
			if again.Active() != 1 {
				t.Errorf("requests under way at it: %d, want 1", again.Active())
			}
			if ok, _ := again.Controller.Acquire(context.Background(), overload.Place, 2); ok {
				t.Error("a second request took a slot of an instance whose limit of one is held")
			}
			if got, want := s.State().Ejected, map[bool]int{true: 1}[tc.eject]; got != want {
				t.Errorf("ejected instances: %d, want %d", got, want)
			}
			if tc.eject && slices.Contains(s.Rotation(), again) {
				t.Error("an instance ejected for an hour is back in the rotation")
			}
			held.Done(Success, Read, 0)
		})
	}
}
