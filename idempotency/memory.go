package idempotency

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// What an entry costs the heap beyond the strings and the response it
// holds, for the MaxBytes and MaxBytesPerAccount bounds (MemoryBytes):
// per request its entry (state, holder, times, response header, list
// links) and per identifier its slot in the index. TestMemoryFootprint
// measures that they cover what an order and a bulk really take.
const (
	memRequestBytes    = 320
	memIdentifierBytes = 128
)

// recordBytes is what keeping rec costs the memory store: its body's and
// headers' allocations and the Content-Type's bytes (MemoryBytes' resp).
func recordBytes(rec *Record) int64 {
	n := allocated(len(rec.Body)) + len(rec.ContentType)
	if rec.Header != nil {
		n += allocated(16 * cap(rec.Header)) // the slice of string headers
		for _, h := range rec.Header {
			n += allocated(len(h))
		}
	}
	if rec.Accept != "" {
		n += allocated(len(rec.Accept))
	}
	return int64(n)
}

// cloneHeader copies the pairs of h a Record keeps (keptPair), and their
// strings: a Record keeps none of its caller's memory (a header value may
// be part of a larger string).
func cloneHeader(h []string) []string {
	n := 0
	for i := 0; i+1 < len(h); i += 2 {
		if keptPair(h[i], h[i+1]) {
			n += 2
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n) // exactly: recordBytes charges its capacity
	for i := 0; i+1 < len(h); i += 2 {
		if keptPair(h[i], h[i+1]) {
			out = append(out, strings.Clone(h[i]), strings.Clone(h[i+1]))
		}
	}
	return out
}

// MemoryBytes is what the memory store charges for one request of n
// identifiers whose names (the account's and its client's once, then
// each identifier)
// take names bytes, holding a response of resp bytes (body, Content-Type
// and the headers kept: recordBytes).
func MemoryBytes(n, names, resp int) int64 {
	return int64(memRequestBytes + n*memIdentifierBytes + names + resp)
}

// Memory is a Store in this process, for dev mode and single-replica
// deployments; it has the Redis store's semantics. Memory is bounded by
// Options.MaxEntries identifiers and Options.MaxBytes (MemoryBytes):
// expired entries are dropped first, and when the store is still full a
// new identifier gets ErrFull (the proxy answers 503) rather than
// evicting a live one, which could let a duplicate through. A response
// that would overflow MaxBytes is recorded as an unknown outcome. Each
// client (an account, or an address for all its opaque tokens: Key)
// holds at most Options.MaxPerAccount identifiers and
// Options.MaxBytesPerAccount bytes, and takes an identifier, and its
// bytes, only while it holds fewer than are left free (take: the dynamic
// threshold of docs/pools.md), so that clients filling the store always
// leave room for one that holds nothing (ErrAccountFull past either
// bound, checked when it claims: the response of a claim it holds is
// kept).
// A request (an order, or a bulk claimed by ClaimAll) is one entry, its
// response kept once, whatever the number of its identifiers.
type Memory struct {
	o          Options
	mu         sync.Mutex
	index      map[idKey]*entry // every identifier held, to its request's entry
	head, tail *entry           // by last write, so by expiry: every write sets now + Retention
	ids        int              // identifiers held (len(index))
	bytes      int64
	accounts   map[string]*memShare // by owner: ClaimAll's client, else the account
}

// idKey names an identifier of an account in the index.
type idKey struct{ account, id string }

// memShare is what one client (an account, or an address for the opaque
// tokens it presents) holds.
type memShare struct {
	ids   int
	bytes int64
}

// entry is one request's state.
type entry struct {
	account    string
	owner      string   // whose share it is charged to: ClaimAll's client, else account
	ids        []string // ids[0] is the first identifier
	state      byte     // 'p' in flight, 'd' done, 'u' unknown
	fp         Fingerprint
	holder     string
	deadline   time.Time // in flight until
	expires    time.Time
	rec        Record
	size       int64
	prev, next *entry
}

// NewMemory returns an empty in-process Store.
func NewMemory(o Options) *Memory {
	return &Memory{o: o.withDefaults(), index: map[idKey]*entry{}, accounts: map[string]*memShare{}}
}

// Len returns the number of identifiers held, expired ones not yet
// dropped included.
func (s *Memory) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids
}

// sweep drops expired entries; the caller holds mu.
func (s *Memory) sweep(now time.Time) {
	for s.head != nil && !now.Before(s.head.expires) {
		s.remove(s.head)
	}
}

// unlink takes en out of the expiry list; the caller holds mu.
func (s *Memory) unlink(en *entry) {
	if en.prev != nil {
		en.prev.next = en.next
	} else {
		s.head = en.next
	}
	if en.next != nil {
		en.next.prev = en.prev
	} else {
		s.tail = en.prev
	}
	en.prev, en.next = nil, nil
}

// remove drops en and its identifiers; the caller holds mu.
func (s *Memory) remove(en *entry) {
	s.unlink(en)
	for _, id := range en.ids {
		delete(s.index, idKey{en.account, id})
	}
	s.ids -= len(en.ids)
	s.bytes -= en.size
	if sh := s.accounts[en.owner]; sh != nil {
		sh.ids -= len(en.ids)
		sh.bytes -= en.size
		if sh.ids <= 0 {
			delete(s.accounts, en.owner)
		}
	}
}

// touch marks en written now, moving it to the end of the expiry list;
// the caller holds mu.
func (s *Memory) touch(en *entry, now time.Time) {
	en.expires = now.Add(s.o.Retention)
	if s.tail == en {
		return
	}
	if en.prev != nil || en.next != nil || s.head == en {
		s.unlink(en)
	}
	en.prev = s.tail
	if s.tail != nil {
		s.tail.next = en
	} else {
		s.head = en
	}
	s.tail = en
}

// take reports whether a client holding held units of a pool of size
// units, used of them taken, may take a claim of n more: the dynamic
// threshold of docs/pools.md, where a client takes while it holds fewer
// than are left free, and a claim, as a packet into a switch's shared
// buffer, is taken whole when its client is under that threshold and it
// fits. It is nil when it may; ErrAccountFull when the client holds
// some and no fewer than are left free (past its share); ErrFull when
// the claim does not fit (the pool is full for everyone).
func take(held, n, used, size int64) error {
	free := size - used
	switch {
	case held > 0 && held >= free:
		return ErrAccountFull
	case n > free:
		return ErrFull
	}
	return nil
}

// shareOf is take of a claim's identifiers and of its bytes: a client
// past its share of either is ErrAccountFull, else a store without room
// for either ErrFull.
func shareOf(heldIDs, ids, usedIDs, maxIDs, heldBytes, bytes, usedBytes, maxBytes int64) error {
	e1, e2 := take(heldIDs, ids, usedIDs, maxIDs), take(heldBytes, bytes, usedBytes, maxBytes)
	if e1 == ErrAccountFull || e2 == ErrAccountFull {
		return ErrAccountFull
	}
	return cmp.Or(e1, e2)
}

// Claim implements Store.
func (s *Memory) Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error) {
	return s.ClaimAll(ctx, key.Account, "", []string{key.Identifier}, fp)
}

// ClaimAll implements Store.
func (s *Memory) ClaimAll(ctx context.Context, account, client string, ids []string, fp Fingerprint) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	c := Claim{Key: Key{Account: account, Identifier: ids[0]}, Fingerprint: fp}
	if en := s.index[idKey{account, ids[0]}]; en != nil {
		switch {
		case en.fp != fp || en.ids[0] != ids[0]:
			c.Outcome = Conflict
		case en.state == 'd':
			rec := en.rec
			rec.Header = slices.Clone(en.rec.Header)
			rec.Body = append([]byte(nil), en.rec.Body...)
			c.Outcome, c.Record = Replay, &rec
		case en.state == 'p' && now.Before(en.deadline):
			c.Outcome = InProgress
		default:
			en.state = 'u'
			c.Outcome = Unknown
		}
		return c, nil
	}
	for i, id := range ids[1:] {
		if s.index[idKey{account, id}] != nil {
			c.Outcome, c.At = Conflict, i+1
			return c, nil
		}
	}
	who := owner(account, client)
	names := len(account) + len(client)
	for _, id := range ids {
		names += len(id)
	}
	size := MemoryBytes(len(ids), names, 0)
	sh := s.accounts[who]
	var held memShare
	if sh != nil {
		held = *sh
	}
	if held.ids+len(ids) > s.o.MaxPerAccount || held.bytes+size > s.o.MaxBytesPerAccount {
		return Claim{}, ErrAccountFull
	}
	if err := shareOf(int64(held.ids), int64(len(ids)), int64(s.ids), int64(s.o.MaxEntries),
		held.bytes, size, s.bytes, s.o.MaxBytes); err != nil {
		return Claim{}, err
	}
	c.Outcome, c.id = Claimed, newID()
	c.more = ids[1:]
	en := &entry{account: account, owner: who, ids: append([]string(nil), ids...), state: 'p', fp: fp, holder: c.id,
		deadline: now.Add(s.o.InFlightTimeout), size: size}
	for _, id := range ids {
		s.index[idKey{account, id}] = en
	}
	if sh == nil {
		sh = &memShare{}
		s.accounts[who] = sh
	}
	sh.ids += len(ids)
	sh.bytes += size
	s.ids += len(ids)
	s.bytes += size
	s.touch(en, now)
	return c, nil
}

// held returns the entry of a claim still held; the caller holds mu.
func (s *Memory) held(c Claim, now time.Time) (*entry, error) {
	if c.Outcome != Claimed || c.id == "" {
		return nil, ErrNotClaimed
	}
	s.sweep(now)
	en := s.index[idKey{c.Key.Account, c.Key.Identifier}]
	if en == nil || en.holder != c.id || en.state == 'd' {
		return nil, ErrClaimLost
	}
	return en, nil
}

// Complete implements Store.
func (s *Memory) Complete(ctx context.Context, c Claim, rec Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	en, err := s.held(c, now)
	if err != nil {
		return err
	}
	grow := recordBytes(&rec)
	if !s.o.keepable(&rec) || s.bytes+grow > s.o.MaxBytes {
		en.state = 'u'
	} else {
		en.state = 'd'
		en.rec = Record{Status: rec.Status, ContentType: rec.ContentType, Header: cloneHeader(rec.Header),
			Accept: strings.Clone(keptValue(rec.Accept)), Body: append([]byte(nil), rec.Body...)}
		en.size += grow
		s.accounts[en.owner].bytes += grow
		s.bytes += grow
	}
	s.touch(en, now)
	return nil
}

// Release implements Store.
func (s *Memory) Release(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	en, err := s.held(c, s.o.Now())
	if err != nil {
		return err
	}
	s.remove(en)
	return nil
}

// MarkUnknown implements Store.
func (s *Memory) MarkUnknown(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	en, err := s.held(c, now)
	if err != nil {
		return err
	}
	en.state = 'u'
	s.touch(en, now)
	return nil
}
