package idempotency

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// entryOverhead is what an entry costs the heap beyond its key and
// response (entry, list element, map slots, the per-account count), for
// the MaxBytes bound; TestMemoryFootprint measures it (~380 B).
const entryOverhead = 448

// Memory is a Store in this process, for dev mode and single-replica
// deployments; it has the Redis store's semantics. Memory is bounded by
// Options.MaxEntries and Options.MaxBytes: expired entries are dropped
// first, and when the store is still full a new identifier gets ErrFull
// (the proxy answers 503) rather than evicting a live one, which could
// let a duplicate through. A response that would overflow MaxBytes is
// recorded as an unknown outcome. Each account holds at most
// Options.MaxPerAccount entries (ErrAccountFull past it).
type Memory struct {
	o         Options
	mu        sync.Mutex
	entries   map[Key]*list.Element // of *entry
	order     *list.List            // by last write, so by expiry: every write sets now + Retention
	bytes     int64
	byAccount map[string]int // entries held per account
}

// entry is one key's state.
type entry struct {
	key      Key
	state    byte // 'p' in flight, 'd' done, 'u' unknown
	fp       Fingerprint
	id       string
	deadline time.Time // in flight until
	expires  time.Time
	rec      Record
	size     int64
}

// NewMemory returns an empty in-process Store.
func NewMemory(o Options) *Memory {
	return &Memory{o: o.withDefaults(), entries: map[Key]*list.Element{}, order: list.New(), byAccount: map[string]int{}}
}

// sweep drops expired entries; the caller holds mu.
func (s *Memory) sweep(now time.Time) {
	for e := s.order.Front(); e != nil; e = s.order.Front() {
		en := e.Value.(*entry)
		if now.Before(en.expires) {
			return
		}
		s.remove(e)
	}
}

func (s *Memory) remove(e *list.Element) {
	en := e.Value.(*entry)
	s.order.Remove(e)
	delete(s.entries, en.key)
	s.bytes -= en.size
	if n := s.byAccount[en.key.Account] - 1; n > 0 {
		s.byAccount[en.key.Account] = n
	} else {
		delete(s.byAccount, en.key.Account)
	}
}

// touch marks en written now; the caller holds mu.
func (s *Memory) touch(e *list.Element, now time.Time) {
	en := e.Value.(*entry)
	en.expires = now.Add(s.o.Retention)
	s.order.MoveToBack(e)
}

// Len returns the number of entries, expired ones not yet dropped
// included.
func (s *Memory) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Claim implements Store.
func (s *Memory) Claim(ctx context.Context, key Key, fp Fingerprint) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	c := Claim{Key: key, Fingerprint: fp}
	if e, ok := s.entries[key]; ok {
		en := e.Value.(*entry)
		switch {
		case en.fp != fp:
			c.Outcome = Conflict
		case en.state == 'd':
			rec := en.rec
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
	if s.byAccount[key.Account] >= s.o.MaxPerAccount {
		return Claim{}, ErrAccountFull
	}
	size := int64(len(key.Account)+len(key.Identifier)) + entryOverhead
	if len(s.entries) >= s.o.MaxEntries || s.bytes+size > s.o.MaxBytes {
		return Claim{}, ErrFull
	}
	c.Outcome, c.id = Claimed, newID()
	en := &entry{key: key, state: 'p', fp: fp, id: c.id, deadline: now.Add(s.o.InFlightTimeout), size: size}
	e := s.order.PushBack(en)
	s.entries[key] = e
	s.bytes += size
	s.byAccount[key.Account]++
	s.touch(e, now)
	return c, nil
}

// held returns the element of a claim still held; the caller holds mu.
func (s *Memory) held(c Claim, now time.Time) (*list.Element, error) {
	if c.Outcome != Claimed || c.id == "" {
		return nil, ErrNotClaimed
	}
	s.sweep(now)
	e, ok := s.entries[c.Key]
	if !ok {
		return nil, ErrClaimLost
	}
	if en := e.Value.(*entry); en.id != c.id || en.state == 'd' {
		return nil, ErrClaimLost
	}
	return e, nil
}

// Complete implements Store.
func (s *Memory) Complete(ctx context.Context, c Claim, rec Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(c, now)
	if err != nil {
		return err
	}
	en := e.Value.(*entry)
	grow := int64(len(rec.Body) + len(rec.ContentType))
	if len(rec.Body) > s.o.MaxResponseBytes || s.bytes+grow > s.o.MaxBytes {
		en.state = 'u'
	} else {
		en.state = 'd'
		en.rec = Record{Status: rec.Status, ContentType: rec.ContentType, Body: append([]byte(nil), rec.Body...)}
		en.size += grow
		s.bytes += grow
	}
	s.touch(e, now)
	return nil
}

// Release implements Store.
func (s *Memory) Release(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(c, s.o.Now())
	if err != nil {
		return err
	}
	s.remove(e)
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
	e, err := s.held(c, now)
	if err != nil {
		return err
	}
	e.Value.(*entry).state = 'u'
	s.touch(e, now)
	return nil
}
