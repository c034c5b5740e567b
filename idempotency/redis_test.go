package idempotency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// prefixes keeps the keys of each test apart on a shared server.
var prefixCounter atomic.Int64

func uniquePrefix() string { return "t" + strconv.FormatInt(prefixCounter.Add(1), 10) + ":" }

// newClient returns a client as the proxy should build it: context
// deadlines bound socket I/O.
func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisHarness(srv *redistest.Server) harness {
	return harness{name: "redis", replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			out[i] = NewRedis(newClient(t, srv.Addr), o) // one client per replica
		}
		return out
	}}
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	runStoreCases(t, redisHarness(srv))
}

func TestRedisClusterStore(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	runStoreCases(t, harness{name: "cluster", accountShares: true, replicas: func(t *testing.T, n int, o Options) []Store {
		o.KeyPrefix = uniquePrefix()
		out := make([]Store, n)
		for i := range out {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			out[i] = NewRedis(c, o)
		}
		return out
	}})

	// Accounts spread over the masters, and each works.
	c := cl.Client(t)
	s := NewRedis(c, testOptions(newClock()))
	for i := range 30 {
		mustClaim(t, s, Key{"tok" + strconv.Itoa(i), "a"}, fpA, Claimed)
	}
	used := 0
	for _, node := range cl.Servers {
		v, err := node.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if v.(int64) > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("keys landed on %d of 3 masters", used)
	}
}

func TestRedisKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := newClock()
	o := testOptions(c)
	o.KeyPrefix = "exgate:idem:"
	s := NewRedis(newClient(t, srv.Addr), o)
	key := Key{"0123456789abcdef0123456789abcdef", "ord-1"}
	cl := mustClaim(t, s, key, fpA, Claimed)

	tag := accountTag(key.Account)
	full, share := "exgate:idem:{"+tag+"}ord-1", "exgate:idem:%{"+tag+"}"
	if got := s.keyOf(key); got[0] != full || got[1] != share || len(tag) != 16 {
		t.Fatalf("keys = %q", got)
	}
	ttl, err := srv.Do("PTTL", full)
	if err != nil {
		t.Fatal(err)
	}
	if ms := ttl.(int64); ms <= 0 || ms > retention.Milliseconds() {
		t.Errorf("PTTL after claim = %dms, want within the retention", ms)
	}
	v, _ := srv.Do("GET", full)
	want := "p" + string(fpA[:16]) + cl.id + strconv.FormatInt(c.Now().Add(inFlight).UnixMilli(), 10)
	if v != want || len(want) > 44 { // 44: the longest string Redis keeps embedded in its object
		t.Errorf("in-flight entry %q, want %q", v, want)
	}
	slots, _ := srv.Do("HGETALL", share)
	slot := c.Now().UnixMilli() / (retention / 24).Milliseconds()
	if fmt.Sprint(slots) != fmt.Sprintf("map[b%d:%d n%d:1]", slot, RedisBytes(len(full), len(v.(string))), slot) {
		t.Errorf("share counter %v", slots)
	}

	// Completing restarts the retention and keeps only the response.
	_, _ = srv.Do("PEXPIRE", full, 1000)
	must(t, s.Complete(context.Background(), cl, Record{Status: 201, ContentType: "application/json", Body: []byte("{}")}))
	ttl, _ = srv.Do("PTTL", full)
	if ms := ttl.(int64); ms < retention.Milliseconds()-60_000 {
		t.Errorf("PTTL after complete = %dms, want the retention again", ms)
	}
	if v, _ := srv.Do("GET", full); v != "d"+string(fpA[:16])+"201application/json\n{}" {
		t.Errorf("done entry %q", v)
	}
}

// TestRedisRetention lets Redis itself expire an entry.
func TestRedisRetention(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Retention = 100 * time.Millisecond
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(newClient(t, srv.Addr), o)
	cl := mustClaim(t, s, k("k"), fpA, Claimed)
	must(t, s.Complete(context.Background(), cl, Record{Status: 201}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := srv.Do("EXISTS", s.keyOf(k("k"))[0])
		if err != nil {
			t.Fatal(err)
		}
		if v == int64(0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis never expired the entry")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustClaim(t, s, k("k"), fpA, Claimed)
}

func TestRedisStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.Timeout = 500 * time.Millisecond
	s := NewRedis(newClient(t, srv.Addr), o)
	cl := mustClaim(t, s, k("k"), fpA, Claimed)

	srv.Stop()
	if c, err := s.Claim(context.Background(), k("other"), fpA); err == nil {
		t.Fatalf("Claim with Redis down = %+v, want an error", c)
	}
	if err := s.Complete(context.Background(), cl, Record{Status: 201}); err == nil || errors.Is(err, ErrClaimLost) {
		t.Errorf("Complete with Redis down = %v, want a store error", err)
	}
	if err := s.Release(context.Background(), cl); err == nil {
		t.Error("Release with Redis down succeeded")
	}

	// Back up (empty, as after a failover without persistence).
	srv.Restart()
	mustClaim(t, s, k("k"), fpA, Claimed)
}

// TestRedisDeadline: a Redis that stops answering makes calls fail at
// the per-call deadline instead of hanging.
func TestRedisDeadline(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	// The script is loaded and a connection open, by a store whose
	// deadline a loaded machine meets: the one under test has 100ms.
	warm := o
	warm.Timeout = 5 * time.Second
	mustClaim(t, NewRedis(newClient(t, srv.Addr), warm), k("warm"), fpA, Claimed)
	o.Timeout = 100 * time.Millisecond
	s := NewRedis(newClient(t, srv.Addr), o)
	if _, err := s.Claim(context.Background(), k("warm2"), fpA); err != nil {
		t.Logf("the store's own first call missed its deadline (%v): a busy machine; its calls below are what count", err)
	}
	if _, err := srv.Do("CLIENT", "PAUSE", "1000", "ALL"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(context.Background(), k("k"), fpA)
	if err == nil {
		t.Fatal("Claim on a paused Redis succeeded")
	}
	if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	// After the pause the store works again; whatever the abandoned call
	// did, the identifier is never free twice.
	// (A try that misses its 100ms on a busy machine is tried again.)
	var c Claim
	for range 50 {
		if c, err = s.Claim(context.Background(), k("k"), fpA); err == nil {
			break
		}
	}
	if err != nil || (c.Outcome != Claimed && c.Outcome != InProgress) {
		t.Errorf("after the pause: %+v, %v", c, err)
	}
}

func TestRedisRejectsMalformedEntries(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = "p:"
	s := NewRedis(newClient(t, srv.Addr), o)
	fp := string(fpA[:16])
	for id, stored := range map[string]any{
		"short":     "x",
		"state":     "x" + fp + "12345678",
		"status":    "d" + fp + "abc\n",
		"no-ct-end": "d" + fp + "201",
		// The headed form: no Accept line, headers not ended, a header
		// line without a colon, no status.
		"h-no-accept":   "d" + fp + "h201application/json",
		"h-headers-end": "d" + fp + "h201application/json\n\nLocation:/o/1\n",
		"h-no-colon":    "d" + fp + "h201application/json\n\nLocation\n\n{}",
		"h-no-status":   "d" + fp + "h",
	} {
		if _, err := srv.Do("SET", s.keyOf(k(id))[0], stored); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Claim(context.Background(), k(id), fpA); err == nil {
			t.Errorf("Claim over %q = %+v, want an error", stored, c)
		}
	}
	if _, err := srv.Do("HSET", s.keyOf(k("hash"))[0], "st", "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), k("hash"), fpA); err == nil {
		t.Error("Claim over a hash succeeded")
	}
}

// TestRedisFull: Redis refusing writes at maxmemory is ErrFull, and what
// is stored still answers; the same when claims ride in the limits'
// round trip.
func TestRedisFull(t *testing.T) {
	srv := redistest.Start(t)
	stores := map[string]func(o Options) Store{
		"redis":  func(o Options) Store { return NewRedis(newClient(t, srv.Addr), o) },
		"joined": func(o Options) Store { return newJoined(t, newClient(t, srv.Addr), o, generous) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix = uniquePrefix()
			s := open(o)
			cl := mustClaim(t, s, k("done"), fpA, Claimed)
			must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("{}")}))
			if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = srv.Do("CONFIG", "SET", "maxmemory", "0") }()
			if c, err := s.Claim(context.Background(), k("new"), fpA); !errors.Is(err, ErrFull) {
				t.Errorf("Claim at maxmemory = %+v, %v; want ErrFull", c, err)
			}
			mustClaim(t, s, k("done"), fpA, Replay)
			mustClaim(t, s, k("done"), fpB, Conflict)
		})
	}
}

// TestRedisKeysOneString checks the keys of a claim, a bulk's with a
// long identifier hashed among them, written as Redis.keys spells them,
// in at most two allocations (the string holding them all and the slice);
// and that a claim taken keeps its keys, so that settling it does not
// write them again. Outside a Cluster the third is the store's counter;
// in one, where a claim's keys share a slot, the share counter again.
func TestRedisKeysOneString(t *testing.T) {
	s := NewRedis(nil, Options{KeyPrefix: "exgate:idem:"})
	long := "0123456789abcdef-a-uuid-long-one"
	ids := []string{"ord-1", long, "ord-3"}
	tag := accountTag("acct")
	want := []string{"exgate:idem:{" + tag + "}ord-1", "exgate:idem:%{" + tag + "}", "exgate:idem:%store",
		"exgate:idem:{" + tag + "}" + accountTag(long), "exgate:idem:{" + tag + "}ord-3"}
	if got := s.keys("acct", "", ids); !slices.Equal(got, want) {
		t.Errorf("keys = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { s.keys("acct", "", ids) }); n > 2 {
		t.Errorf("%v allocations per keys, want at most 2", n)
	}
	var p Prepared
	s.prepare(&p, "acct", "", ids, Fingerprint{})
	if c, err := p.outcome([]any{"claimed"}); err != nil || !slices.Equal(c.keys, want) {
		t.Errorf("claim keys %q (%v), want %q", c.keys, err, want)
	}

	// A client's claim outside a Cluster: its identifiers' keys are the
	// account's own, where an exgate before per-client shares kept them
	// (want), and only the share counter is the client's. In a Cluster
	// every key carries the account's tag, the counter too (one slot): an
	// identifier is its account's from every address.
	const addr = "addr 198.51.100.7"
	ctag := accountTag(addr)
	standalone := slices.Clone(want)
	standalone[1] = "exgate:idem:%{" + ctag + "}"
	if got := s.keys("acct", addr, ids); !slices.Equal(got, standalone) {
		t.Errorf("a client's keys = %q, want %q", got, standalone)
	}
	if n := testing.AllocsPerRun(100, func() { s.keys("acct", addr, ids) }); n > 2 {
		t.Errorf("%v allocations per client's keys, want at most 2", n)
	}
	s.prepare(&p, "acct", addr, ids, Fingerprint{})
	if c, err := p.outcome([]any{"claimed"}); err != nil || !slices.Equal(c.keys, standalone) || c.charge != charge(standalone) {
		t.Errorf("a client's claim keys %q (%v), want %q", c.keys, err, standalone)
	}
	s.cluster = true // no store counter: the share counter again, in the account's slot
	want[2] = want[1]
	if got := s.keys("acct", addr, ids); !slices.Equal(got, want) {
		t.Errorf("a client's keys in a Cluster = %q, want %q", got, want)
	}
}

// TestRedisClientKeysAreOldExgates: outside a Cluster an opaque token's
// identifiers, charged to its address's share, live at the keys and in
// the values an exgate before per-client shares used (the token's own
// tag), so that replicas of both kinds answer each other's claims in a
// rolling upgrade: entries written by hand as the old exgate wrote them
// answer the new claims, alone and riding with the limits, for an order
// and a bulk; a claim, a bulk's marks and a completed answer of the new
// code are found at the old keys, in the old form, and an old-style
// claim (no client) sees them.
func TestRedisClientKeysAreOldExgates(t *testing.T) {
	srv := redistest.Start(t)
	for _, h := range []harness{redisHarness(srv), joinedHarness(srv)} {
		t.Run(h.name, func(t *testing.T) {
			c := newClock()
			o := testOptions(c)
			rs := h.replicas(t, 1, o)
			switch s := rs[0].(type) {
			case *Redis:
				o.KeyPrefix = s.o.KeyPrefix
			case *joinedStore:
				o.KeyPrefix = s.o.KeyPrefix
			}
			rdb := newClient(t, srv.Addr)
			ctx := context.Background()
			const addr = "addr 198.51.100.7"
			old := func(id string) string { return o.KeyPrefix + "{" + accountTag("tok") + "}" + id }
			fp := string(fpA[:fpLen])
			deadline := strconv.FormatInt(c.Now().Add(inFlight).UnixMilli(), 10)
			for id, v := range map[string]string{
				"done": "d" + fp + "201application/json\n{}", "unknown": "u" + fp + "holder01",
				"flying": "p" + fp + "holder02" + deadline, "b1": "p" + fp + "holder03" + deadline, "b2": "m" + fp,
			} {
				must(t, rdb.Set(ctx, old(id), v, time.Hour).Err())
			}
			for _, tc := range []struct {
				ids  []string
				fp   Fingerprint
				want Outcome
				at   int
			}{
				{[]string{"done"}, fpA, Replay, 0},
				{[]string{"done"}, fpB, Conflict, 0},
				{[]string{"unknown"}, fpA, Unknown, 0},
				{[]string{"flying"}, fpA, InProgress, 0},
				{[]string{"b1", "b2"}, fpA, InProgress, 0},
				{[]string{"new", "b2"}, fpB, Conflict, 1},
			} {
				cl, err := rs[0].ClaimAll(ctx, "tok", addr, tc.ids, tc.fp)
				if err != nil || cl.Outcome != tc.want || cl.At != tc.at {
					t.Errorf("ClaimAll(%q) of an old entry = %s at %d, %v; want %s at %d", tc.ids, cl.Outcome, cl.At, err, tc.want, tc.at)
				}
			}
			// The new code's claims, at the old keys in the old form.
			one, err := rs[0].ClaimAll(ctx, "tok", addr, []string{"new"}, fpA)
			if err != nil || one.Outcome != Claimed {
				t.Fatalf("a new identifier: %+v, %v", one, err)
			}
			bulk, err := rs[0].ClaimAll(ctx, "tok", addr, []string{"n1", "n2"}, fpA)
			if err != nil || bulk.Outcome != Claimed {
				t.Fatalf("a new bulk: %+v, %v", bulk, err)
			}
			for _, e := range []struct {
				id, start string
				n         int
			}{{"new", "p" + fp, inFlightLen}, {"n1", "p" + fp, inFlightLen}, {"n2", "m" + fp, markLen}} {
				v, err := rdb.Get(ctx, old(e.id)).Result()
				if err != nil || !strings.HasPrefix(v, e.start) || len(v) != e.n {
					t.Errorf("the new code's %s at its old key = %q, %v; want %d bytes from %q", e.id, v, err, e.n, e.start)
				}
			}
			if n, err := rdb.Exists(ctx, o.KeyPrefix+"%{"+accountTag(addr)+"}").Result(); err != nil || n != 1 {
				t.Errorf("the address's share counter: %d, %v; want it kept", n, err)
			}
			before := NewRedis(newClient(t, srv.Addr), o) // claims with no client, as exgate did
			mustClaim(t, before, Key{"tok", "new"}, fpA, InProgress)
			mustClaimAll(t, before, "tok", []string{"x", "n2"}, fpB, Conflict)
			must(t, rs[0].Complete(ctx, one, Record{Status: 201, ContentType: "application/json", Body: []byte("{}")}))
			if v, err := rdb.Get(ctx, old("new")).Result(); err != nil || v != "d"+fp+"201application/json\n{}" {
				t.Errorf("the new code's answer at its old key = %q, %v", v, err)
			}
			mustClaim(t, before, Key{"tok", "new"}, fpA, Replay)
			// Another token's identifiers are its own.
			mustClaimAll(t, rs[0], "other", []string{"done"}, fpA, Claimed)
		})
	}
}

// TestRedisCallDeadline checks that a call is bounded by
// Options.Timeout, or by its context's deadline when that comes first:
// then the context is the caller's own, not another one wrapping it (the
// gateway gives each store call its deadline).
func TestRedisCallDeadline(t *testing.T) {
	s := NewRedis(nil, Options{Timeout: time.Second})
	for _, tt := range []struct {
		name  string
		in    time.Duration // the caller's deadline from now, 0 for none
		reuse bool
	}{
		{"no deadline", 0, false},
		{"a later deadline", time.Hour, false},
		{"a sooner deadline", 100 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent, cancelParent := context.Background(), context.CancelFunc(func() {})
			if tt.in > 0 {
				parent, cancelParent = context.WithTimeout(parent, tt.in)
			}
			defer cancelParent()
			before := time.Now()
			ctx, cancel := s.within(parent)
			after := time.Now()
			defer cancel()
			d, ok := ctx.Deadline()
			if (ctx == parent) != tt.reuse {
				t.Errorf("the caller's context reused: %v, want %v", ctx == parent, tt.reuse)
			}
			if !tt.reuse && (!ok || d.Before(before.Add(time.Second)) || d.After(after.Add(time.Second))) {
				t.Errorf("deadline %v (%v), want Options.Timeout from the call", d, ok)
			}
			if tt.reuse {
				if n := testing.AllocsPerRun(100, func() { _, c := s.within(parent); c() }); n != 0 {
					t.Errorf("%v allocations for a call within its caller's deadline, want 0", n)
				}
			}
		})
	}
}

// TestRedisPrepareAllocations gates a claim's preparation at four
// allocations (its keys' string and slice, its arguments, the
// fingerprint's and the holder's string; one more under the race
// detector): its arguments point into one claimArgs instead of each
// boxing a value of its own.
func TestRedisPrepareAllocations(t *testing.T) {
	s := NewRedis(nil, Options{KeyPrefix: "exgate:idem:"})
	ids := []string{"ord-1"}
	var p Prepared
	want := 4.0
	if raceBuild {
		want++ // crypto/rand's buffer
	}
	if n := leastAllocsPerRun(100, func() { s.prepare(&p, "acct", "", ids, Fingerprint{}) }); n > want {
		t.Errorf("%v allocations per prepare, want at most %v", n, want)
	}
	for i, a := range p.Args {
		switch a.(type) {
		case *string, *int64, string, int64, int:
		default:
			t.Errorf("ARGV[%d] is a %T, which go-redis does not write as its value", i+1, a)
		}
	}
}

// TestRedisRecordForms: a response kept with headers or an Accept is
// written in the headed form; one without either in the form exgate
// wrote before it kept headers, and entries of that form, written by an
// exgate of before, still replay after the upgrade, in a Cluster too.
func TestRedisRecordForms(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	clients := map[string]redis.Scripter{"standalone": newClient(t, srv.Addr), "cluster": cl.Client(t)}
	cases := []struct {
		name    string
		rec     Record
		encoded string // the value after the state and fingerprint
	}{
		{"no headers", Record{Status: 201, ContentType: "application/json", Body: []byte(`{"id":7}`)}, "201application/json\n{\"id\":7}"},
		{"no Content-Type, body of lines", Record{Status: 200, Body: []byte("a\nb\n")}, "200\na\nb\n"},
		{"Location", Record{Status: 201, ContentType: "application/json", Header: []string{"Location", "/o/7/"}, Body: []byte(`{"id":7}`)},
			"h201application/json\n\nLocation:/o/7/\n\n{\"id\":7}"},
		{"Accept and two Links", Record{Status: 201, ContentType: "text/html", Accept: "text/html", Header: []string{"Link", "<a>", "Link", "<b>"}, Body: []byte("\n")},
			"h201text/html\ntext/html\nLink:<a>\nLink:<b>\n\n\n"},
	}
	for cname, c := range clients {
		for i, tc := range cases {
			t.Run(cname+"/"+tc.name, func(t *testing.T) {
				o := testOptions(newClock())
				o.KeyPrefix = uniquePrefix()
				s := NewRedis(c, o)
				key := k("r" + strconv.Itoa(i))
				claim := mustClaim(t, s, key, fpA, Claimed)
				must(t, s.Complete(context.Background(), claim, tc.rec))
				full := s.keyOf(key)[0]
				v, err := c.(redis.Cmdable).Get(context.Background(), full).Result()
				if err != nil || v != "d"+string(fpA[:16])+tc.encoded {
					t.Fatalf("done entry %q (%v), want d, the fingerprint and %q", v, err, tc.encoded)
				}
				// The entry replays; so does the same value written by hand
				// under an identifier this exgate never claimed, as an
				// exgate of before wrote it (the forms without h).
				old := k("old" + strconv.Itoa(i))
				if err := c.(redis.Cmdable).Set(context.Background(), s.keyOf(old)[0], v, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				for _, key := range []Key{key, old} {
					got := mustClaim(t, s, key, fpA, Replay).Record
					if got.Status != tc.rec.Status || got.ContentType != tc.rec.ContentType || got.Accept != tc.rec.Accept ||
						!slices.Equal(got.Header, tc.rec.Header) || string(got.Body) != string(tc.rec.Body) {
						t.Errorf("%s replayed %+v, want %+v", key.Identifier, got, tc.rec)
					}
				}
			})
		}
	}
}
