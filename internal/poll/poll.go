// Package poll calls a function at a fixed interval, for the watchers
// that notice a change of files by reading them again: the configuration
// files (reload_interval) and the TLS certificate files
// (server.tls.reload_interval).
package poll

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, the first time one
// interval after it is called, and returns when ctx ends. It returns at
// once when interval is not positive (polling off). f runs on the
// caller's goroutine, one call at a time; a call that outlasts the
// interval delays the next rather than overlapping it.
func Every(ctx context.Context, interval time.Duration, f func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
