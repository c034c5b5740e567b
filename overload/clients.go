package overload

// Client is who a request counts as in the per-client shares of the
// backend's slots and of the queue: an opaque key the caller derives (the
// gateway's: a verified account, else a client address). The zero Client
// is no client: its requests take slots and wait with no share of their
// own, in one queue (a caller that cannot tell clients apart).
//
// A client may take a slot while it holds fewer slots than are left free
// — the dynamic threshold of shared-memory switch buffers (Choudhury and
// Hahne): n clients taking all they can hold at most 1/(n+1) of the limit
// each and leave as much free, so a client that holds nothing finds a
// slot at once. Past that share a client may still take a slot while no
// other client waits for one and more than a reserve of the limit (a
// quarter, at least one slot) is left free: alone, a client uses the
// backend's room, all but what a newcomer finds free at once, and the
// limit it uses can grow. A request of a client past its share waits for
// a slot it may take, within its class's wait, and freed slots go round
// robin to the clients that wait, most important class first, each
// client's oldest waiter first: a client's queued requests delay
// another's by at most one turn, however many they are.
type Client uint64

// client is the state of one Client that holds slots or has waiters.
type client struct {
	key     Client
	held    int // slots held
	cancels int // of them, cancels'
	waiting int // requests waiting, in queues
	queues  [NumClasses]waitQueue
	// turn links the client into each class's round robin of clients
	// with waiters of that class.
	turn [NumClasses]struct{ prev, next *client }
}

// turns is one class's round robin: the clients with waiters of the
// class, the next to be served first.
type turns struct{ head, tail *client }

func (r *turns) push(cl *client, c Class) {
	t := &cl.turn[c]
	t.prev, t.next = r.tail, nil
	if r.tail != nil {
		r.tail.turn[c].next = cl
	} else {
		r.head = cl
	}
	r.tail = cl
}

func (r *turns) remove(cl *client, c Class) {
	t := &cl.turn[c]
	if t.prev != nil {
		t.prev.turn[c].next = t.next
	} else {
		r.head = t.next
	}
	if t.next != nil {
		t.next.turn[c].prev = t.prev
	} else {
		r.tail = t.prev
	}
	t.prev, t.next = nil, nil
}

// clientOf returns the state of key, made when it holds nothing (or
// taken back from idle); l.mu is held.
func (l *Controller) clientOf(key Client) *client {
	if key == 0 {
		return &l.anon
	}
	if cl := l.clients[key]; cl != nil {
		if cl == l.idle {
			l.idle = nil
		}
		return cl
	}
	var cl *client
	if n := len(l.spare); n > 0 {
		cl, l.spare = l.spare[n-1], l.spare[:n-1]
	} else {
		cl = new(client)
	}
	cl.key = key
	l.clients[key] = cl
	return cl
}

// forget lets go of the state of a client that holds nothing and waits
// for nothing. The last such state stays in clients, as idle, for that
// client's next request: a client whose requests come one at a time
// (each done before the next takes its slot) would otherwise have its
// state made and dropped again for each, a map insert and delete under
// the lock. The one idle before it is dropped. l.mu is held.
func (l *Controller) forget(cl *client) {
	if cl.held != 0 || cl.waiting != 0 || cl.key == 0 || cl == l.idle {
		return
	}
	if old := l.idle; old != nil {
		delete(l.clients, old.key)
		if len(l.spare) < cap(l.spare) {
			*old = client{}
			l.spare = append(l.spare, old)
		}
	}
	l.idle = cl
}

// busy reports whether client who holds slots or waits for one, for a
// request of class c: for a cancel, whether it holds or waits for a
// cancel's, its cancels being counted apart from its other requests
// (may): a client's reads never get its cancel shed on arrival. l.mu is
// held.
func (l *Controller) busy(who Client, c Class) bool {
	cl := l.clients[who]
	if cl == nil || cl == l.idle {
		return false
	}
	return c != Cancel || cl.cancels > 0 || cl.queues[Cancel].head != nil
}

// may reports whether client cl may take a slot for a request of class c
// now: the limit has room for the class, and cl holds fewer slots than
// are left free, or no other client waits and more than the reserve is
// left free (Client). A cancel's share is counted in cancels only, of the
// limit and the cancels' headroom: a client's other requests never keep
// its cancel waiting. l.mu is held.
func (l *Controller) may(cl *client, c Class) bool {
	limit := l.limitFor(c)
	free := limit - l.inflight
	held := cl.held
	if c == Cancel {
		held = cl.cancels
	}
	if free <= 0 {
		return false
	}
	return cl.key == 0 || held < free || (l.waiting == cl.waiting && free > max(limit/shareReserve, 1))
}

// shareReserve is the divisor of the limit that gives the slots a client
// alone leaves free for newcomers (Client).
const shareReserve = 4

// hold counts a slot taken by client cl for a request of class c; l.mu
// is held.
func (l *Controller) hold(cl *client, c Class) {
	cl.held++
	if c == Cancel {
		cl.cancels++
	}
	l.take()
}

// enqueue queues w, a request of class c of client cl; l.mu is held.
func (l *Controller) enqueue(cl *client, w *waiter, c Class) {
	if cl.queues[c].head == nil {
		l.turns[c].push(cl, c)
	}
	cl.queues[c].push(w)
	cl.waiting++
	l.waiting++
	l.waitingNow.Store(int64(l.waiting))
}

// dequeue takes w, a request of class c of client cl, out of the queue;
// l.mu is held.
func (l *Controller) dequeue(cl *client, w *waiter, c Class) {
	cl.queues[c].remove(w)
	if cl.queues[c].head == nil {
		l.turns[c].remove(cl, c)
	}
	cl.waiting--
	l.waiting--
	l.waitingNow.Store(int64(l.waiting))
}

// next returns the client a freed slot goes to: of the most important
// class with a waiter that may take it, the first client in that class's
// round robin that may. Nil when no waiter may take a slot. l.mu is held.
func (l *Controller) next() (*client, Class) {
	for k := range l.turns {
		c := Class(k)
		if l.inflight >= l.limitFor(c) {
			return nil, 0 // a less important class sees no more of the limit
		}
		for cl := l.turns[c].head; cl != nil; cl = cl.turn[c].next {
			if l.may(cl, c) {
				return cl, c
			}
		}
	}
	return nil, 0
}

// grant hands free slots to waiters (next), each client's oldest waiter
// of the class first, the client's turn then moving to the end of the
// class's round robin; l.mu is held.
func (l *Controller) grant() {
	for l.waiting > 0 {
		cl, c := l.next()
		if cl == nil {
			break
		}
		w := cl.queues[c].head
		l.dequeue(cl, w, c)
		if cl.queues[c].head != nil { // its next waiter waits for its next turn
			l.turns[c].remove(cl, c)
			l.turns[c].push(cl, c)
		}
		w.granted = true
		l.hold(cl, c)
		w.ready <- struct{}{}
	}
}
