package idempotency

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/exgate/exgate/internal/redistest"
)

// The requests the footprint tests store: orders tagged with a UUID
// identifier, answered as the spec's Order object (docs/api.md), one at a
// time and in bulks of 10 (a bulk's answer lists its orders).
const footprintBulk = 10

func footprintAccount(i int) string {
	return strconv.FormatInt(int64(i)*7919+0x1000000000, 16) + strings.Repeat("0", 23)
}

func footprintIdentifier(i int) string {
	return "6f1c2a9e-0d4b-4c1e-9a3f-" + strconv.FormatInt(100000000000+int64(i), 10)
}

// orderJSON is the backend's answer to a placed order.
func orderJSON(i int) string {
	return `{"id":` + strconv.Itoa(123456789+i) + `,"symbol":"BTC_USDT","type":"limit","side":"buy","price":"65000.00","stop_price":null,` +
		`"oco_target_price":null,"base_amount":"0.010000","quote_amount":"650.00","identifier":"` + footprintIdentifier(i) +
		`","state":"active","created_at":"2026-03-01T12:00:00.123456+00:00","closed_at":null,"dealed_base_amount":"0",` +
		`"dealed_quote_amount":"0","req_to_cancel":false,"commission":"0"}`
}

// footprintRecord is the response of a request of n orders from the i-th.
func footprintRecord(i, n int) Record {
	if n == 1 {
		return Record{Status: 201, ContentType: "application/json", Body: []byte(orderJSON(i))}
	}
	var b strings.Builder
	b.WriteString(`{"orders":[`)
	for j := range n {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(orderJSON(i + j))
	}
	b.WriteString(`]}`)
	return Record{Status: 201, ContentType: "application/json", Body: []byte(b.String())}
}

// footprintIDs returns the identifiers of a request of n orders from the i-th.
func footprintIDs(i, n int) []string {
	ids := make([]string, n)
	for j := range ids {
		ids[j] = footprintIdentifier(i + j)
	}
	return ids
}

// redisUsed returns used_memory of srv.
func redisUsed(t *testing.T, srv *redistest.Server) int64 {
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

// redisFootprint is what a real redis-server spends on claims.
type redisFootprint struct {
	inFlight, done, unknown, mark int64 // MEMORY USAGE of a key in each state
	share                         int64 // MEMORY USAGE of an account's share counter
	used, charged                 int64 // used_memory growth, and bytes charged, per order placed
}

// measureRedis places and completes orders in requests of n (1: single
// orders; footprintBulk: bulks) for accounts of perAccount requests, and
// measures them on a fresh redis-server.
func measureRedis(t *testing.T, n, requests, perAccount int) redisFootprint {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix, o.MaxResponseBytes = "exgate:idem:", 64<<10
	s := NewRedis(newClient(t, srv.Addr), o)
	ctx := context.Background()
	usage := func(key string) int64 {
		v, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil {
			t.Fatal(err)
		}
		return v.(int64)
	}
	var f redisFootprint
	ids := footprintIDs(0, max(n, 2))
	cl := mustClaimAll(t, s, "probe", ids, fpA, Claimed)
	keys := s.keys("probe", "", ids)
	f.inFlight, f.share, f.mark = usage(keys[0]), usage(keys[1]), usage(keys[3])
	must(t, s.MarkUnknown(ctx, cl))
	f.unknown = usage(keys[0])
	cl = mustClaimAll(t, s, "probe2", ids[:1], fpA, Claimed)
	must(t, s.Complete(ctx, cl, footprintRecord(0, 1)))
	f.done = usage(s.keys("probe2", "", ids[:1])[0])

	before := redisUsed(t, srv)
	for r := range requests {
		i := r * n
		cl := mustClaimAll(t, s, footprintAccount(r/perAccount), footprintIDs(i, n), fpA, Claimed)
		must(t, s.Complete(ctx, cl, footprintRecord(i, n)))
	}
	orders := int64(requests * n)
	f.used = (redisUsed(t, srv) - before) / orders
	// What the accounts' shares were charged, as the counters hold it.
	charged, err := srv.Do("EVAL", `local n = 0
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local f = redis.call('HGETALL', k)
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 1) == 'b' then n = n + tonumber(f[i + 1]) end
  end
end
return n`, 0, "exgate:idem:%{*")
	if err != nil {
		t.Fatal(err)
	}
	f.charged = charged.(int64) / orders // the probes' few hundred bytes are lost in the division
	return f
}

// TestRedisFootprint measures the bytes orders cost a real redis-server,
// placed one at a time and in bulks, holds them to the numbers
// docs/validation.md gives, and checks that the bytes charged to an
// account's share (RedisBytes) are not less than what Redis spends.
func TestRedisFootprint(t *testing.T) {
	single := measureRedis(t, 1, 5000, 50)
	bulk := measureRedis(t, footprintBulk, 500, 5)
	t.Logf("MEMORY USAGE: first identifier in flight %d B, unknown %d B, done with a %d-byte order response %d B; "+
		"a bulk's other identifier %d B; share counter %d B",
		single.inFlight, single.unknown, len(footprintRecord(0, 1).Body), single.done, single.mark, single.share)
	t.Logf("used_memory per order: single %d B (charged %d B); in bulks of %d with a %d-byte response, %d B (charged %d B)",
		single.used, single.charged, footprintBulk, len(footprintRecord(0, footprintBulk).Body), bulk.used, bulk.charged)
	for _, c := range []struct {
		name     string
		got, max int64
	}{
		{"in flight", single.inFlight, 160},
		{"unknown", single.unknown, 160},
		{"done", single.done, 640},
		{"a bulk's other identifier", single.mark, 150},
		{"share counter", single.share, 200},
		{"per order, placed alone", single.used, 800},
		{"per order, placed in a bulk", bulk.used, 700},
	} {
		if c.got <= 0 || c.got > c.max {
			t.Errorf("%s: %d bytes, want at most %d", c.name, c.got, c.max)
		}
	}
	for _, f := range []struct {
		name string
		redisFootprint
	}{{"single", single}, {"bulk", bulk}} {
		if f.used > f.charged {
			t.Errorf("%s: an order costs Redis %d B but its account is charged %d B: the share undercounts", f.name, f.used, f.charged)
		}
	}
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measureMemory places and completes requests of n orders in a memory
// store, each of its own account, and returns what they cost the heap
// and what MaxBytes charges, per order.
func measureMemory(t *testing.T, n, requests int, headed bool) (real, charged float64) {
	o := testOptions(newClock())
	o.MaxResponseBytes = 64 << 10
	s := NewMemory(o)
	before := heapInUse()
	for r := range requests {
		// Made here, as the proxy makes them for each request: the
		// store keeps the account's and identifiers' strings, and a
		// copy of the response.
		cl, err := s.ClaimAll(context.Background(), footprintAccount(r), "", footprintIDs(r*n, n), fpA)
		if err != nil {
			t.Fatal(err)
		}
		rec := footprintRecord(r*n, n)
		if headed { // as the proxy keeps a DRF answer's headers and a versioned Accept
			loc := "/api/v1/odr/orders/" + strconv.Itoa(123456789+r*n) + "/"
			rec.Header = []string{"Location", loc, "Etag", `W/"` + strconv.Itoa(r) + `"`, "Link", "<" + loc + ">; rel=self"}
			rec.Accept = "application/json; version=2.0"
		}
		must(t, s.Complete(context.Background(), cl, rec))
	}
	real = float64(heapInUse()-before) / float64(requests*n)
	h, _ := s.Health(context.Background())
	charged = float64(h.Bytes) / float64(requests*n)
	runtime.KeepAlive(s)
	return real, charged
}

// TestMemoryFootprint checks that the memory store's byte bounds are
// honest: what an order really costs the heap (entry, index slots,
// per-account count, the stored response and the headers kept with it),
// placed alone or in a bulk, is
// within what MaxBytes and MaxBytesPerAccount charge for it
// (MemoryBytes).
func TestMemoryFootprint(t *testing.T) {
	for _, c := range []struct {
		name        string
		n, requests int
		headed      bool // the response kept with headers and an Accept
	}{{"single", 1, 20000, false}, {"single, with headers", 1, 20000, true}, {"bulk", footprintBulk, 2000, false}} {
		real, charged := measureMemory(t, c.n, c.requests, c.headed)
		t.Logf("memory store, %s: %.0f B of heap per order, %.0f B charged", c.name, real, charged)
		if real > charged {
			t.Errorf("%s: an order costs %.0f B but the store charges %.0f B: the byte bound undercounts", c.name, real, charged)
		}
	}
}

func mustClaimAll(t *testing.T, s Store, account string, ids []string, fp Fingerprint, want Outcome) Claim {
	t.Helper()
	c, err := s.ClaimAll(context.Background(), account, "", ids, fp)
	if err != nil {
		t.Fatalf("ClaimAll(%s, %q): %v", account, ids, err)
	}
	if c.Outcome != want {
		t.Fatalf("ClaimAll(%s, %q) = %s (at %d), want %s", account, ids, c.Outcome, c.At, want)
	}
	return c
}
