package upstream

import (
	"sync"

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

// cancelRetries is the divisor of the retry budget that gives the
// retries only cancels take, over it: as the overload limit's cancels'
// headroom, an eighth.
const cancelRetries = 8

// retryShares are the retries under way at a service, in all and by
// client: a pool shared between clients (docs/pools.md), each client's
// share the dynamic threshold the backend's slots use (overload.Client):
// a client may take a retry while it holds fewer than are left free of
// the budget, so that one client's failing requests (reads moved off a
// refusing instance and held by a slow one) never spend the retries
// another client's requests need. A cancel's share is counted in its
// client's cancels only, against the budget and the cancels' part over
// it, as the backend's slots count them: a client's other retries never
// keep its cancel from moving.
type retryShares struct {
	mu   sync.Mutex
	used int64 // retries under way
	held map[Client]retryHeld
}

// retryHeld is what one client holds of the retry budget.
type retryHeld struct{ all, cancels int64 }

// retryRefusal is why Retry refused to move a request.
type retryRefusal uint8

const (
	// retryOverBudget: the service's retries under way fill the budget.
	retryOverBudget retryRefusal = iota
	// retryOverShare: the request's client holds its share of the budget.
	retryOverShare
	numRetryRefusals
)

// take charges a retry of class c to client who against a budget of
// allowed retries (of c's: a cancel's includes its part over the
// budget); the zero Client has no share of its own. It reports why when
// there is no room.
func (b *retryShares) take(who Client, c overload.Class, allowed int64) (retryRefusal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	free := allowed - b.used
	if free <= 0 {
		return retryOverBudget, false
	}
	h := b.held[who]
	mine := h.all
	if c == overload.Cancel {
		mine = h.cancels
	}
	if who != 0 && mine >= free {
		return retryOverShare, false
	}
	b.used++
	if who != 0 {
		if b.held == nil {
			b.held = map[Client]retryHeld{}
		}
		h.all++
		if c == overload.Cancel {
			h.cancels++
		}
		b.held[who] = h
	}
	return 0, true
}

// give gives back a retry of class c take charged to who.
func (b *retryShares) give(who Client, c overload.Class) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used--
	if who == 0 {
		return
	}
	h := b.held[who]
	h.all--
	if c == overload.Cancel {
		h.cancels--
	}
	if h.all <= 0 {
		delete(b.held, who)
	} else {
		b.held[who] = h
	}
}

// Retry moves a request of class c of client who from prev, which
// failed it, to another instance of the rotation, within the retry
// budget: at most RetryBudget.Percent of the service's requests under
// way may be retries at once, and RetryBudget.Min whatever the share; a
// cancel may go over it by an eighth of it, at least one
// (cancelRetries), so that other requests' retries (a surge of reads
// moved off a failing instance) never leave a cancel that reached no
// instance refused. Within the budget, each client has its share
// (retryShares): one past it is refused its retry, the others' are not.
// It returns nil when the budget or the client's share is spent, or no
// other instance is in the rotation; otherwise the request counts as a
// retry until EndRetry, and as under way at the instance returned until
// Done is called on it (as it must still be on prev).
func (s *Service) Retry(prev *Instance, c overload.Class, who Client) *Instance {
	b := s.opts.RetryBudget
	allowed := max(int64(b.Min), s.active.Load()*int64(b.Percent)/100)
	if c == overload.Cancel && allowed > 0 { // a budget of 0 retries nothing, cancels included
		allowed += max((allowed+cancelRetries-1)/cancelRetries, 1)
	}
	if why, ok := s.retries.take(who, c, allowed); !ok {
		s.retryRefused[why].Add(1)
		return nil
	}
	inst := s.picks.Load().choose(prev)
	if inst == nil || inst == prev {
		s.retries.give(who, c)
		return nil
	}
	s.retried.Add(1)
	inst.active.Add(1)
	s.active.Add(1)
	return inst
}

// EndRetry ends a retry Retry allowed the request of class c of client
// who, once its round trip has ended.
func (s *Service) EndRetry(c overload.Class, who Client) { s.retries.give(who, c) }
