package idempotency

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/exgate/exgate/internal/redistest"
)

// footprint is what a real redis-server spends on claims, as
// docs/validation.md reports it.
type footprint struct {
	inFlight, done, unknown int64 // MEMORY USAGE of one claim key in each state
	share                   int64 // MEMORY USAGE of the account's share counter
	perClaim                int64 // used_memory growth per done claim, over many accounts
}

// measureFootprint claims n identifiers of 36 characters (a UUID) for
// accounts named like token ids and completes them with a typical order
// response.
func measureFootprint(t *testing.T, n int) footprint {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = "exgate:idem:"
	s := NewRedis(newClient(t, srv.Addr), o)
	ctx := context.Background()
	usage := func(key string) int64 {
		v, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil {
			t.Fatal(err)
		}
		return v.(int64)
	}
	used := func() int64 {
		v, err := srv.Do("INFO", "memory")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v.(string), "\r\n") {
			if n, ok := strings.CutPrefix(line, "used_memory:"); ok {
				u, _ := strconv.ParseInt(n, 10, 64)
				return u
			}
		}
		t.Fatal("INFO memory lacks used_memory")
		return 0
	}
	account := func(i int) string { return strconv.FormatInt(int64(i)*7919+0x1000000000, 16) + strings.Repeat("0", 23) }
	ident := func(i int) string { return "6f1c2a9e-0d4b-4c1e-9a3f-" + strconv.FormatInt(100000000000+int64(i), 10) }
	rec := Record{Status: 201, ContentType: "application/json",
		Body: []byte(`{"id":123456789,"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","base_amount":"0.010000","identifier":"6f1c2a9e-0d4b-4c1e-9a3f-100000000000","state":"active"}`)}

	var f footprint
	k := Key{account(0), ident(0)}
	cl := mustClaim(t, s, k, fpA, Claimed)
	keys := s.keys(k)
	f.inFlight, f.share = usage(keys[0]), usage(keys[1])
	must(t, s.MarkUnknown(ctx, cl))
	f.unknown = usage(keys[0])
	k.Identifier = ident(1)
	cl = mustClaim(t, s, k, fpA, Claimed)
	must(t, s.Complete(ctx, cl, rec))
	f.done = usage(s.keys(k)[0])

	before := used()
	for i := range n {
		// One claim per account: the share counter is counted in.
		k := Key{account(i + 1), ident(i)}
		cl := mustClaim(t, s, k, fpA, Claimed)
		must(t, s.Complete(ctx, cl, rec))
	}
	f.perClaim = (used() - before) / int64(n)
	return f
}

// TestRedisFootprint measures the bytes a claim costs a real
// redis-server and holds them to the numbers docs/validation.md gives.
func TestRedisFootprint(t *testing.T) {
	f := measureFootprint(t, 5000)
	t.Logf("MEMORY USAGE: in flight %d B, unknown %d B, done with a %d-byte response %d B, share counter %d B; used_memory per done claim of its own account %d B",
		f.inFlight, f.unknown, 161, f.done, f.share, f.perClaim)
	for _, c := range []struct {
		name     string
		got, max int64
	}{
		{"in flight", f.inFlight, 160},
		{"unknown", f.unknown, 160},
		{"done", f.done, 360},
		{"share counter", f.share, 160},
		{"per claim, counter included", f.perClaim, 600},
	} {
		if c.got <= 0 || c.got > c.max {
			t.Errorf("%s: %d bytes, want at most %d", c.name, c.got, c.max)
		}
	}
}

// TestMemoryFootprint checks that the memory store's byte bound is
// honest: what an entry really costs the heap (key, entry, list element,
// map slot, per-account count) is within what MaxBytes charges for it
// (its key plus entryOverhead).
func TestMemoryFootprint(t *testing.T) {
	const n = 50000
	s := NewMemory(testOptions(newClock()))
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range n {
		// Each entry of its own account: the per-account count is paid too.
		k := Key{strconv.FormatInt(int64(i)*7919+0x1000000000, 16) + strings.Repeat("0", 23), "6f1c2a9e-0d4b-4c1e-9a3f-" + strconv.FormatInt(100000000000+int64(i), 10)}
		if _, err := s.Claim(context.Background(), k, fpA); err != nil {
			t.Fatal(err)
		}
	}
	real := float64(heap()-before) / n
	charged := float64(32+36) + entryOverhead
	t.Logf("memory store: %.0f B of heap per entry, %.0f B charged against MaxBytes", real, charged)
	if real > charged {
		t.Errorf("an entry costs %.0f B but MaxBytes charges %.0f B: the byte bound undercounts", real, charged)
	}
	runtime.KeepAlive(s)
}
