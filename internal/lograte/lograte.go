// Package lograte bounds how often a repeated log line is written: a
// failing dependency (the Redis store, a backend) would otherwise log one
// line per request and flood the log while it is down.
package lograte

import (
	"sync/atomic"
	"time"
)

// OncePerSecond lets at most one event a second through. The zero value
// is ready to use and lets the first event through. It is safe for
// concurrent use: of events that race, one passes.
type OncePerSecond struct {
	last atomic.Int64 // when the last event passed, in Unix nanoseconds
}

// Allow reports whether an event at now may pass: at least a second after
// the last one that did.
func (l *OncePerSecond) Allow(now time.Time) bool {
	n := now.UnixNano()
	last := l.last.Load()
	return n-last >= int64(time.Second) && l.last.CompareAndSwap(last, n)
}
