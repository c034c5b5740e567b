package upstream

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/exgate/exgate/config"
)

// maxHealthBody bounds what is read of a health check's answer before
// its connection is reused.
const maxHealthBody = 64 << 10

// runHealthChecks checks every instance each interval until ctx ends: an
// instance failing UnhealthyThreshold checks in a row is marked down (out
// of the rotation, and not sent requests even in panic mode), and one
// marked down passing HealthyThreshold in a row comes back.
func (s *Service) runHealthChecks(ctx context.Context, rt http.RoundTripper, hc config.HealthCheck) {
	t := time.NewTicker(hc.Interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, inst := range s.Instances() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.recordCheck(inst, checkOnce(ctx, rt, inst, hc), hc)
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkOnce sends one health check to inst and reports whether it passed:
// a 2xx answer within the timeout.
func checkOnce(ctx context.Context, rt http.RoundTripper, inst *Instance, hc config.HealthCheck) bool {
	ctx, cancel := context.WithTimeout(ctx, hc.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, instanceURL(inst, hc.Path).String(), nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "exgate-health-check")
	res, err := rt.RoundTrip(req)
	if err != nil {
		return false
	}
	_, _ = io.CopyN(io.Discard, res.Body, maxHealthBody)
	_ = res.Body.Close()
	return res.StatusCode >= 200 && res.StatusCode < 300
}

// recordCheck counts a check's result and marks inst down or up when a
// run of results against its state reaches the threshold.
func (s *Service) recordCheck(inst *Instance, passed bool, hc config.HealthCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst.removed {
		return
	}
	if passed != inst.checkFailed { // the result agrees with the state
		inst.checkRun = 0
		return
	}
	inst.checkRun++
	threshold := hc.UnhealthyThreshold
	if passed {
		threshold = hc.HealthyThreshold
	}
	if inst.checkRun < threshold {
		return
	}
	inst.checkFailed, inst.checkRun = !passed, 0
	s.rebuild()
	kind := MarkedDown
	if passed {
		kind = MarkedUp
	}
	s.notify(Event{Kind: kind, Instance: inst})
}
