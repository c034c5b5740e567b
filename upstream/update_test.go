package upstream

import (
	"net/url"
	"sync"
	"testing"
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
			inst.Done(Success)
		}
	}()
	wg.Wait()
	_ = s.Status()
}
