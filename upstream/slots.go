package upstream

import (
	"github.com/exgate/exgate/overload"
)

// ConfigureOverload sets the options of every instance's Controller, and
// of those of instances to come.
func (s *Service) ConfigureOverload(o overload.Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.overload = o
	for _, inst := range s.instances {
		inst.Controller.Configure(s.overloadOf(inst.multiplexed.Load()))
	}
}

// overloadOf returns the options of the Controller of an instance: the
// service's, its limit kept within the instance's connections when each
// carries one request (Options.MaxConns): unless multiplexed (an https
// instance offered HTTP/2 that has not answered in HTTP/1.1: Answered).
// s.mu is held.
func (s *Service) overloadOf(multiplexed bool) overload.Options {
	o := s.overload
	o.OnRoom = s.roomFreed
	if s.opts.MaxConns > 0 && !multiplexed {
		o.Conns = s.opts.MaxConns
	}
	return o
}

// Watch returns a channel closed when an instance of the service may
// have a slot free for a cancel (its Controller's OnRoom after Watch: a
// release, or a limit raised by Configure; or an instance entering the
// rotation): for a cancel waiting at a full
// instance, which then tries TakeOther (overload.Elsewhere).
func (s *Service) Watch() <-chan struct{} {
	s.roomMu.Lock()
	defer s.roomMu.Unlock()
	s.watched.Store(true)
	return s.room
}

// roomFreed closes the channel Watch returned, when any request watches
// it: an instance has room for a cancel. Every instance's Controller
// calls it on most releases (overload.Options.OnRoom): unwatched, it
// reads one atomic.
func (s *Service) roomFreed() {
	if !s.watched.Load() {
		return
	}
	s.roomMu.Lock()
	if s.watched.Swap(false) {
		close(s.room)
		s.room = make(chan struct{})
	}
	s.roomMu.Unlock()
}
