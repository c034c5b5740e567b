package idempotency

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

func memoryHarness() harness {
	return harness{name: "memory", replicas: func(t *testing.T, n int, o Options) []Store {
		s := NewMemory(o)
		out := make([]Store, n)
		for i := range out {
			out[i] = s
		}
		return out
	}}
}

func TestMemoryStore(t *testing.T) { runStoreCases(t, memoryHarness()) }

func TestMemoryRetention(t *testing.T) {
	c := newClock()
	s := NewMemory(testOptions(c))
	cl := mustClaim(t, s, k("done"), fpA, Claimed)
	must(t, s.Complete(context.Background(), cl, Record{Status: 201}))
	c.Advance(time.Hour)
	mustClaim(t, s, k("unknown"), fpA, Claimed)
	c.Advance(retention - time.Hour - time.Second)
	mustClaim(t, s, k("done"), fpA, Replay)
	c.Advance(time.Second)
	mustClaim(t, s, k("done"), fpA, Claimed) // retention is over: the identifier is free again
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2", s.Len())
	}
	c.Advance(retention)
	mustClaim(t, s, k("other"), fpA, Claimed)
	if s.Len() != 1 {
		t.Errorf("Len after everything expired = %d, want 1 (expired entries are dropped)", s.Len())
	}
}

func TestMemoryBounds(t *testing.T) {
	c := newClock()
	o := testOptions(c)
	o.MaxEntries = 3
	s := NewMemory(o)
	acct := func(i int) Key { return Key{"acct" + strconv.Itoa(i), "a"} } // one alone may take half the store
	for i := range 3 {
		mustClaim(t, s, acct(i), fpA, Claimed)
	}
	if _, err := s.Claim(context.Background(), acct(3), fpA); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth entry: %v, want ErrFull", err)
	}
	mustClaim(t, s, acct(0), fpA, InProgress) // existing keys still answer
	c.Advance(retention)
	mustClaim(t, s, acct(3), fpA, Claimed) // expired entries make room

	// Byte bound: responses that do not fit are recorded as unknown.
	o = testOptions(c)
	one := MemoryBytes(1, len("acct")+1, 0)         // an entry of an account of 4 letters with a one-letter identifier
	o.MaxBytes = 2*one + int64(allocated(int(one))) // a, b, and a's response
	o.MaxResponseBytes = 1 << 20
	s = NewMemory(o)
	a := mustClaim(t, s, Key{"acct", "a"}, fpA, Claimed)
	must(t, s.Complete(context.Background(), a, Record{Status: 201, Body: bytes.Repeat([]byte("x"), int(one))}))
	mustClaim(t, s, Key{"acct", "a"}, fpA, Replay)
	b := mustClaim(t, s, Key{"accu", "b"}, fpA, Claimed)
	must(t, s.Complete(context.Background(), b, Record{Status: 201, Body: bytes.Repeat([]byte("x"), 2*int(one))}))
	mustClaim(t, s, Key{"accu", "b"}, fpA, Unknown)
	if _, err := s.Claim(context.Background(), Key{"accv", "c"}, fpA); !errors.Is(err, ErrFull) {
		t.Errorf("claim past MaxBytes: %v, want ErrFull", err)
	}
}

func TestMemoryHonoursContext(t *testing.T) {
	s := NewMemory(testOptions(newClock()))
	ctx, cancel := context.WithCancel(context.Background())
	cl := mustClaim(t, s, k("k"), fpA, Claimed)
	cancel()
	if _, err := s.Claim(ctx, k("x"), fpA); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context: %v", err)
	}
	if err := s.Complete(ctx, cl, Record{Status: 201}); !errors.Is(err, context.Canceled) {
		t.Errorf("Complete with a cancelled context: %v", err)
	}
	mustClaim(t, s, k("k"), fpA, InProgress)
}
