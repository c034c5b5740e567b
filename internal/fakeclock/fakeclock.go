// Package fakeclock is a clock that tests move by hand, for the stores,
// limiters and controllers that take a now func() time.Time: what they
// decide is then exact however slowly a loaded machine runs the test.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a clock that stands still until Advance moves it. It is safe
// for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock standing at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the time the clock stands at.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
