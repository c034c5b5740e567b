package upstream

import (
	"github.com/exgate/exgate/overload"
)

// RetryBudget bounds the retries under way at a service at once.
type RetryBudget struct {
	// Percent is the share of the service's requests under way that may
	// be retries.
	Percent int
	// Min is how many retries may be under way whatever the share.
	Min int
}

// Retry moves a request of class c from prev, which failed it, to
// another instance of the rotation, within the retry budget: at most
// RetryBudget.Percent of the service's requests under way may be retries
// at once, and RetryBudget.Min whatever the share; a cancel may go over
// it by an eighth of it, at least one (cancelRetries), so that other
// requests' retries (a surge of reads moved off a failing instance) never
// leave a cancel that reached no instance refused. It returns nil when
// the budget is spent or no other instance is in the rotation; otherwise
// the request counts as a retry until EndRetry, and as under way at the
// instance returned until Done is called on it (as it must still be on
// prev).
func (s *Service) Retry(prev *Instance, c overload.Class) *Instance {
	b := s.opts.RetryBudget
	allowed := max(int64(b.Min), s.active.Load()*int64(b.Percent)/100)
	if c == overload.Cancel && allowed > 0 { // a budget of 0 retries nothing, cancels included
		allowed += max((allowed+cancelRetries-1)/cancelRetries, 1)
	}
	if s.retries.Add(1) > allowed {
		s.retries.Add(-1)
		return nil
	}
	inst := s.picks.Load().choose(prev)
	if inst == nil || inst == prev {
		s.retries.Add(-1)
		return nil
	}
	s.retried.Add(1)
	inst.active.Add(1)
	s.active.Add(1)
	return inst
}

// cancelRetries is the divisor of the retry budget that gives the
// retries only cancels take, over it: as the overload limit's cancels'
// headroom, an eighth.
const cancelRetries = 8

// EndRetry ends a retry Retry allowed, once its round trip has ended.
func (s *Service) EndRetry() { s.retries.Add(-1) }
