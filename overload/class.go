// Package overload bounds the requests exgate has under way at the backend
// and decides, when the backend is full, which wait and which are shed.
//
// A Controller holds a concurrency limit, adapted from the backend's observed
// latency by a gradient controller (the scheme of Netflix's
// concurrency-limits Gradient2 and Envoy's adaptive concurrency filter):
// every window it compares the latency the backend shows without a queue
// (its minimum round-trip time, measured again at the floor limit every
// probe interval) with the window's average, and moves the limit by their
// ratio plus a headroom of √limit:
//
//	gradient = clamp(max(tolerance × minRTT, minRTT + slack) / avgRTT, 0.5, 1)
//	limit'   = limit + √limit      while gradient = 1 (no queue beyond the tolerance)
//	limit'   = limit × gradient    otherwise, a fifth of that step per window
//
// (so that one slow window costs at most a tenth of the limit): the limit
// settles where the backend's own queue adds about (tolerance − 1) of its
// unloaded latency, or the slack when that is more. While the backend
// shows under half of that queue the limit grows by half every other
// window instead (slow start). A limit the traffic does not use half of
// grows no further, and while the gateway is all but idle (a window takes
// twice its length to gather its samples) it comes down towards three times the most
// requests a window had in flight, so that a surge after a quiet spell
// meets a limit near what the backend last carried rather than letting
// the whole surge in before the first window closes. A fixed limit turns
// adaptation off.
//
// Requests carry a Class. A request that finds the backend full waits for a
// slot, at most its class's wait; a freed slot goes to the most important
// class's oldest waiter. Cancels may go over the limit by an eighth of it,
// so that under a surge most of them find a slot at once. Queue time, not queue length, decides: a burst is
// absorbed within the waits, a standing queue is not, and the least
// important classes, which wait least and are served last, are shed first.
package overload

// Class is a request's priority class; lower values are more important.
type Class uint8

// The classes, most important first.
const (
	// Cancel is an order cancel (single or bulk): served first, shed only
	// when the backend can take nothing at all.
	Cancel Class = iota
	// Status is an order-status or open-orders read.
	Status
	// Place is an order placement (single or bulk).
	Place
	// PrivateRead is any other private read: fills, wallets, sessions.
	PrivateRead
	// MarketData is public market data: markets, tickers, order books.
	MarketData
	// NumClasses is the number of classes.
	NumClasses
)

var classNames = [NumClasses]string{"cancel", "status", "place", "private_read", "market_data"}

// String returns the class's configuration and metric label name.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "unknown"
}

// ParseClass returns the class named s.
func ParseClass(s string) (Class, bool) {
	for i, n := range classNames {
		if n == s {
			return Class(i), true
		}
	}
	return 0, false
}
