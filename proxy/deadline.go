package proxy

import (
	"context"
	randv2 "math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// deadlineQueue cancels the backend calls of one route timeout when their
// deadline passes, with one runtime timer for the whole queue instead of
// one per request (context.WithTimeout's timer and context). A call joins
// the queue as it goes to the backend (forward) and leaves it when it
// ends. Calls join in the order of their deadlines, so the head's is the
// earliest: the timer is armed for it, and a call that ends before its
// deadline costs the timer nothing; when the timer fires it cancels the
// calls whose deadline has passed and is armed again for the next one.
// A call cancelled at its deadline fails as under context.WithTimeout,
// with context.DeadlineExceeded (its context's cause, and its Err through
// stateContext): answered 504 gateway_timeout.
type deadlineQueue struct {
	d          time.Duration
	mu         sync.Mutex
	head, tail *deadlineEntry
	timer      *time.Timer
	armedAt    time.Duration // the deadline the timer is armed for; zero when it is not
}

// deadlineEpoch is what deadlines count from: time.Since reads only the
// monotonic clock, half of what time.Now reads.
var deadlineEpoch = time.Now()

// deadlineEntry is a call's place in a deadlineQueue. It lives in the
// request's pooled state; the queue touches it only while it is queued,
// under the queue's lock.
type deadlineEntry struct {
	q          *deadlineQueue // the queue it joined
	prev, next *deadlineEntry
	at         time.Duration // its deadline, as monotonic time since deadlineEpoch
	cancel     context.CancelCauseFunc
	queued     bool
}

// join queues e, whose call is cancelled with cancel once q's timeout has
// passed from now (time.Since(deadlineEpoch), as the caller read it), and
// returns its deadline.
func (q *deadlineQueue) join(e *deadlineEntry, cancel context.CancelCauseFunc, now time.Duration) time.Time {
	at := now + q.d
	q.mu.Lock()
	e.q, e.at, e.cancel, e.queued = q, at, cancel, true
	// After the last call whose deadline is not later: almost always the
	// tail, since calls join as their deadlines come.
	p := q.tail
	for p != nil && p.at > at {
		p = p.prev
	}
	q.insertAfter(p, e)
	if q.armedAt == 0 || at < q.armedAt {
		q.arm(at, at-q.d)
	}
	q.mu.Unlock()
	return deadlineEpoch.Add(at)
}

// leave takes e out of the queue it joined, if the timer has not
// already: after it returns, the queue no longer touches e.
func (e *deadlineEntry) leave() {
	q := e.q
	q.mu.Lock()
	if e.queued {
		q.unlink(e)
	}
	e.cancel = nil
	q.mu.Unlock()
}

// fire cancels the calls whose deadline has passed, outside the lock, and
// arms the timer for the next deadline.
func (q *deadlineQueue) fire() {
	now := time.Since(deadlineEpoch)
	var due []context.CancelCauseFunc
	q.mu.Lock()
	for e := q.head; e != nil && e.at <= now; e = q.head {
		due = append(due, e.cancel)
		q.unlink(e)
		e.cancel = nil
	}
	q.armedAt = 0
	if q.head != nil {
		q.arm(q.head.at, now)
	}
	q.mu.Unlock()
	for _, cancel := range due {
		cancel(context.DeadlineExceeded)
	}
}

// arm sets the timer to fire at at, now being now. q.mu is held.
func (q *deadlineQueue) arm(at, now time.Duration) {
	q.armedAt = at
	if q.timer == nil {
		q.timer = time.AfterFunc(at-now, q.fire)
		return
	}
	q.timer.Reset(at - now)
}

// insertAfter puts e after p, or first when p is nil. q.mu is held.
func (q *deadlineQueue) insertAfter(p, e *deadlineEntry) {
	e.prev = p
	if p == nil {
		e.next, q.head = q.head, e
	} else {
		e.next, p.next = p.next, e
	}
	if e.next == nil {
		q.tail = e
	} else {
		e.next.prev = e
	}
}

// unlink takes e out of the list. q.mu is held.
func (q *deadlineQueue) unlink(e *deadlineEntry) {
	if e.prev == nil {
		q.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		q.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.prev, e.next, e.queued = nil, nil, false
}

// timeoutQueues are the deadline queues of one route timeout: one per
// processor, a call joining one chosen at random, so that calls on many
// cores do not all take one lock.
type timeoutQueues struct {
	shards []paddedQueue
}

// paddedQueue keeps each queue's lock on a cache line of its own.
type paddedQueue struct {
	deadlineQueue
	_ [64]byte
}

// join queues e in one of the queues, as deadlineQueue.join.
func (t *timeoutQueues) join(e *deadlineEntry, cancel context.CancelCauseFunc, now time.Duration) time.Time {
	q := &t.shards[0].deadlineQueue
	if n := uint32(len(t.shards)); n > 1 {
		q = &t.shards[randv2.Uint32N(n)].deadlineQueue
	}
	return q.join(e, cancel, now)
}

// deadlineQueues holds a gateway's queues, one set per route timeout,
// shared by the routes of every plan that have that timeout.
type deadlineQueues struct {
	mu sync.Mutex
	m  map[time.Duration]*timeoutQueues
}

// queue returns the queues of timeout d, made on first use.
func (qs *deadlineQueues) queue(d time.Duration) *timeoutQueues {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	t := qs.m[d]
	if t == nil {
		if qs.m == nil {
			qs.m = map[time.Duration]*timeoutQueues{}
		}
		t = &timeoutQueues{shards: make([]paddedQueue, min(runtime.GOMAXPROCS(0), 64))}
		for i := range t.shards {
			t.shards[i].d = d
		}
		qs.m[d] = t
	}
	return t
}
