package ratelimit

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// TestScriptRunMatchesSequential: deciding k requests for each of several
// keys in one script run answers each as deciding them one after another,
// one script run each, does. Redis decides on its own clock, real time:
// the limit refills one request an hour, so no stall of a loaded machine
// refills a key during the sequential requests, and a sequential reset or
// retry is the one run's less at most the time the sequential requests
// took (their key's first was charged that much earlier), where a wrong
// count would move it by an hour.
func TestScriptRunMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	l := Limit{Rate: 5, Period: 5 * time.Hour, Burst: 5}
	r := NewRedis(c, RedisOptions{Timeout: testStoreTimeout, MaxInFlight: 1, MaxBatch: 1})
	defer r.Close()
	counts := []int{7, 1, 3, 6}
	seq := make([][]Result, len(counts))
	seqStart := time.Now()
	for k, n := range counts {
		for i := 0; i < n; i++ {
			res, err := r.Allow(ctx, "seq"+strconv.Itoa(k), l)
			if err != nil {
				t.Fatal(err)
			}
			seq[k] = append(seq[k], res)
		}
	}
	seqTook := time.Since(seqStart)
	// The same requests in one run, interleaved across keys.
	b := runBuilder{d: newDecision("")}
	b.reset()
	var reqs []Request
	for i := 0; i < 7; i++ {
		for k, n := range counts {
			if i < n {
				reqs = append(reqs, Request{Checks: []Check{{Key: "run" + strconv.Itoa(k), Limit: l}}})
			}
		}
	}
	for i := range reqs {
		b.add(&reqs[i], modeDecide, nil, false, false, false)
	}
	cmd := b.cmd(ctx, true, false).(*redis.IntSliceCmd)
	if err := c.Process(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	v, err := cmd.Result()
	if err != nil {
		t.Fatal(err)
	}
	rd := replyReader{v: v}
	seen := make([]int, len(counts))
	for _, q := range reqs {
		k, _ := strconv.Atoi(strings.TrimPrefix(q.Checks[0].Key, "run"))
		allowed, _, _, err := rd.head(false)
		if err != nil {
			t.Fatal(err)
		}
		cr, err := rd.check()
		if err != nil {
			t.Fatal(err)
		}
		want := seq[k][seen[k]]
		got := cr.Result
		if allowed != want.Allowed || got.Allowed != want.Allowed || got.Remaining != want.Remaining {
			t.Errorf("key %d request %d: one run allowed=%v remaining=%d, sequential %+v", k, seen[k], got.Allowed, got.Remaining, want)
		}
		what := fmt.Sprintf("key %d request %d: the sequential", k, seen[k])
		if !got.Allowed {
			lessAtMost(t, what+" retry", want.RetryAfter, got.RetryAfter, seqTook, 100*time.Millisecond)
		}
		lessAtMost(t, what+" reset", want.ResetAfter, got.ResetAfter, seqTook, 100*time.Millisecond)
		seen[k]++
	}
}

// TestScriptRunReadsEveryKey: a run of more keys than one MGET reads
// (decideSrc reads the TATs 1,000 at a time) finds each key's own count:
// key i, charged i mod 3 times by an earlier run, has 3 − i mod 3 − 1
// left after one more request.
func TestScriptRunReadsEveryKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	l := Limit{Rate: 3, Period: time.Hour, Burst: 3}
	const keys = 2500
	run := func(times func(i int) int) []int64 {
		b := runBuilder{d: newDecision("")}
		b.reset()
		var reqs []Request
		for i := 0; i < keys; i++ {
			for j := 0; j < times(i); j++ {
				reqs = append(reqs, Request{Checks: []Check{{Key: "every" + strconv.Itoa(i), Limit: l}}})
			}
		}
		for i := range reqs {
			b.add(&reqs[i], modeDecide, nil, false, false, false)
		}
		cmd := b.cmd(ctx, true, false).(*redis.IntSliceCmd)
		if err := c.Process(ctx, cmd); err != nil {
			t.Fatal(err)
		}
		rd := replyReader{v: cmd.Val()}
		remaining := make([]int64, len(reqs))
		for i := range reqs {
			allowed, _, _, err := rd.head(false)
			if err != nil {
				t.Fatal(err)
			}
			cr, err := rd.check()
			if err != nil || !allowed {
				t.Fatalf("request %d: allowed=%v %+v %v", i, allowed, cr, err)
			}
			remaining[i] = cr.Result.Remaining
		}
		return remaining
	}
	run(func(i int) int { return i % 3 })
	for i, left := range run(func(int) int { return 1 }) {
		if want := int64(3 - i%3 - 1); left != want {
			t.Errorf("key %d: %d left, want %d", i, left, want)
		}
	}
}

// perLimit is the per-limit path AllowAll must agree with: each check
// looked at on its own (Peek), and, when none that counts refuses,
// each charged on its own (AllowN), one call per limit.
func perLimit(ctx context.Context, l interface {
	Store
	Inspector
}, q *Request, ans *Answer) error {
	ans.reset(len(q.Checks))
	for i, c := range q.Checks {
		p, err := l.Peek(ctx, c.Key, c.Limit)
		if err != nil {
			return err
		}
		if p.Allowed { // as it would be answered, were it charged
			p.Remaining--
			p.ResetAfter += time.Duration(c.Limit.emission())
		}
		ans.Results[i] = CheckResult{Applied: true, Result: p}
		if !p.Allowed && !c.Shadow {
			ans.Allowed = false
		}
	}
	if !ans.Allowed {
		return nil
	}
	for i, c := range q.Checks {
		if !ans.Results[i].Result.Allowed {
			continue
		}
		res, err := l.AllowN(ctx, c.Key, c.Limit, 1)
		if err != nil {
			return err
		}
		ans.Results[i].Result = res
	}
	return nil
}

// allowAllStep is one request of an allowAllCase: the time that passes
// before it, the case's checks it carries, and whether it is allowed.
type allowAllStep struct {
	advance time.Duration
	use     []int // the scenario's checks this request carries
	allowed bool
}

// allowAllCase is a sequence of requests on several limits at once.
type allowAllCase struct {
	name   string
	checks []Check
	steps  []allowAllStep
}

// allowAllCases is TestAllowAllMatchesPerLimit's table. Its limits count in
// minutes.
func allowAllCases() []allowAllCase {
	perMinute := Limit{Rate: 2, Period: time.Minute, Burst: 2}
	perHour := Limit{Rate: 5, Period: time.Hour, Burst: 5}
	slow := Limit{Rate: 1, Period: 2 * time.Minute, Burst: 3}
	return []allowAllCase{
		{"a refusal charges no other limit", []Check{{Key: "min", Limit: perMinute}, {Key: "hour", Limit: perHour}}, []allowAllStep{
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: false}, // per minute refuses: the hour keeps 3
			{use: []int{0, 1}, allowed: false},
			{use: []int{1}, allowed: true},
			{advance: 66 * time.Second, use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: false}, // the hour is spent
		}},
		{"the later limit refuses", []Check{{Key: "hour", Limit: perHour}, {Key: "slow", Limit: slow}}, []allowAllStep{
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: false},
			{use: []int{0}, allowed: true},
			{use: []int{0}, allowed: true},
			{use: []int{0, 1}, allowed: false},
		}},
		{"a shadow limit counts but never refuses", []Check{{Key: "min", Limit: perMinute, Shadow: true}, {Key: "slow", Limit: slow}}, []allowAllStep{
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true},
			{use: []int{0, 1}, allowed: true}, // the shadow limit is over
			{use: []int{0, 1}, allowed: false},
			{advance: 36 * time.Second, use: []int{0, 1}, allowed: false},
		}},
	}
}

// allowAllStore is a store TestAllowAllMatchesPerLimit runs on, with the way
// time passes for its keys.
type allowAllStore struct {
	name string
	lim  interface {
		Store
		Inspector
	}
	// advance lets d pass for the given keys.
	advance func(t *testing.T, keys []string, d time.Duration)
	slack   time.Duration
}

// allowAllStores returns the memory limiter on a fake clock and, unless
// testing.Short, Redis and a Redis Cluster, whose time passes by shiftTAT.
func allowAllStores(t *testing.T) []allowAllStore {
	clock := newFakeClock()
	stores := []allowAllStore{{name: "memory", lim: NewMemory(MemoryOptions{Now: clock.Now}),
		advance: func(_ *testing.T, _ []string, d time.Duration) { clock.Advance(d) }}}
	if !testing.Short() {
		shift := func(c redis.Scripter) func(*testing.T, []string, time.Duration) {
			return func(t *testing.T, keys []string, d time.Duration) { shiftTAT(t, c, keys, d) }
		}
		srv := redistest.Start(t)
		rl := NewRedis(srv.Client(), RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		stores = append(stores, allowAllStore{name: "redis", lim: rl, advance: shift(srv.Client()), slack: 50 * time.Millisecond})
		// In a Cluster the keys of a request fall in different slots:
		// its parts are decided apart and a refused request gives back
		// what the others charged.
		cl := redistest.StartCluster(t, 3)
		cc := cl.Client(t)
		crl := NewRedis(cc, RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = crl.Close() })
		stores = append(stores, allowAllStore{name: "redis-cluster", lim: crl, advance: shift(cc), slack: 50 * time.Millisecond})
	}
	return stores
}

// TestAllowAllMatchesPerLimit: for a table of request sequences on
// several limits at once, AllowAll (one script run per request in Redis)
// answers every request and every limit as the per-limit path does
// (allowed, remaining, retry and reset), refusing all or nothing.
//
// The limits count in minutes, so that no stall of a loaded machine
// refills anything between two steps: time passes when a step says so,
// on the memory limiter's fake clock and, for Redis, whose clock is its
// own, by moving the TAT of every key of the case (shiftTAT).
func TestAllowAllMatchesPerLimit(t *testing.T) {
	for _, st := range allowAllStores(t) {
		for _, tc := range allowAllCases() {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) { runAllowAllCase(t, st, tc) })
		}
	}
}

// runAllowAllCase sends each step of tc both through AllowAll and through
// the per-limit path, on keys of their own, and checks that the two answer
// alike.
func runAllowAllCase(t *testing.T, st allowAllStore, tc allowAllCase) {
	ctx := context.Background()
	var keys []string
	for _, c := range tc.checks {
		keys = append(keys, keyPrefix+t.Name()+":"+c.Key, keyPrefix+"per-limit:"+t.Name()+":"+c.Key)
	}
	var got, want Answer
	var maxGap time.Duration
	for i, s := range tc.steps {
		if s.advance > 0 {
			st.advance(t, keys, s.advance)
		}
		var cq, pq Request
		for _, u := range s.use {
			c := tc.checks[u]
			c.Key = t.Name() + ":" + c.Key
			pq.Checks = append(pq.Checks, Check{Key: "per-limit:" + c.Key, Limit: c.Limit, Shadow: c.Shadow})
			cq.Checks = append(cq.Checks, c)
		}
		start := time.Now()
		if err := st.lim.AllowAll(ctx, &cq, &got); err != nil {
			t.Fatal(err)
		}
		if err := perLimit(ctx, st.lim, &pq, &want); err != nil {
			t.Fatal(err)
		}
		// On real time the two paths decide a moment
		// apart: a key's reset counts from the step that
		// last set its TAT, any step before, and the
		// answer from this one, each on either path up
		// to its gap later.
		gap := time.Since(start)
		maxGap = max(maxGap, gap)
		slack := st.slack + gap + maxGap
		if got.Allowed != s.allowed || want.Allowed != s.allowed {
			t.Fatalf("step %d: AllowAll allowed=%v, per limit %v, want %v", i, got.Allowed, want.Allowed, s.allowed)
		}
		for j := range got.Results {
			g, w := got.Results[j], want.Results[j]
			if g.Applied != w.Applied || g.Result.Allowed != w.Result.Allowed || g.Result.Remaining != w.Result.Remaining {
				t.Errorf("step %d check %d: AllowAll %+v, per limit %+v", i, j, g, w)
			}
			approx(t, "retry after", g.Result.RetryAfter, w.Result.RetryAfter, slack)
			approx(t, "reset after", g.Result.ResetAfter, w.Result.ResetAfter, slack)
		}
	}
}

// shiftScript moves the TAT a key holds (decimal seconds, keyPrefix) d
// seconds earlier, keeping its expiry.
var shiftScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v then
  redis.call("SET", KEYS[1], tonumber(v) - tonumber(ARGV[1]), "KEEPTTL")
end
return 0
`)

// shiftTAT lets d pass for the Redis limiter's keys (with keyPrefix),
// whose clock is Redis's own: a key's TAT is all it holds, and d passing
// changes every decision on it as moving its TAT d earlier does (a key
// that would have expired by then holds a TAT in the past, which counts
// as a full burst, as a missing key does).
func shiftTAT(t *testing.T, c redis.Scripter, keys []string, d time.Duration) {
	t.Helper()
	for _, k := range keys {
		if err := shiftScript.Run(context.Background(), c, []string{k}, d.Seconds()).Err(); err != nil {
			t.Fatalf("moving %s's TAT %v back: %v", k, d, err)
		}
	}
}

// TestTATSharedAcrossVersions: the TAT a key holds is written as a
// decimal string of seven decimals (SET given a number, Redis formats it
// with snprintf("%.17g"), which cost it more than the key's GET), and
// replicas of this version and of the last one to write numbers
// (testdata/decide-0b2af22.lua) share every key's count during a rolling
// upgrade: a key decided by the two in turn lets exactly its burst
// through, each answer counting what the other charged.
func TestTATSharedAcrossVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	earlier, current := &decision{src: noClaimFunc + earlierScript(t)}, newDecision("")
	l := Limit{Rate: 6, Period: time.Hour, Burst: 6}
	decide := func(d *decision, key string) CheckResult {
		t.Helper()
		b := runBuilder{d: d}
		b.reset()
		q := Request{Checks: []Check{{Key: key, Limit: l}}}
		b.add(&q, modeDecide, nil, false, false, false)
		cmd := b.cmd(ctx, true, false).(*redis.IntSliceCmd)
		if err := c.Process(ctx, cmd); err != nil {
			t.Fatal(err)
		}
		rd := replyReader{v: cmd.Val()}
		if _, _, _, err := rd.head(false); err != nil {
			t.Fatal(err)
		}
		res, err := rd.check()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	decimal := regexp.MustCompile(`^[0-9]+\.[0-9]{7}$`)
	for k := 0; k < 20; k++ {
		key := "versions" + strconv.Itoa(k)
		first, second := current, earlier
		if k%2 == 1 {
			first, second = earlier, current
		}
		for i := 0; i < 8; i++ {
			d := first
			if i%2 == 1 {
				d = second
			}
			res := decide(d, key)
			if want := i < 6; res.Result.Allowed != want || (want && res.Result.Remaining != int64(5-i)) {
				t.Fatalf("key %d, request %d (by the %s version): allowed=%v remaining=%d, want allowed=%v remaining=%d",
					k, i, map[bool]string{true: "current", false: "earlier"}[d == current], res.Result.Allowed, res.Result.Remaining, want, 5-i)
			}
			if d != current || !res.Result.Allowed {
				continue
			}
			v, err := c.Get(ctx, keyPrefix+key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !decimal.MatchString(v) {
				t.Fatalf("key %d holds %q, want decimal seconds with seven decimals", k, v)
			}
		}
	}
}

// earlierScript returns the decision script of the last version to write
// TATs as numbers (testdata/decide-0b2af22.lua), its reply in the
// current shape (a check allowed or refused answers three numbers, one
// that never passes one), so that this version's reader can read it:
// what it reads and writes in Redis is that version's. Its arguments are
// laid out as this version's for requests without a guard.
func earlierScript(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/decide-0b2af22.lua")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for _, r := range [][2]string{
		{"out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 3, 0, 0, 0\n      n = n + 4\n", "out[n + 1] = 3\n      n = n + 1\n"},
		{"out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, 0, ", "out[n + 1], out[n + 2], out[n + 3] = 2, "},
		{"out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, floor(diff / e * 1000000 + 0.5), 0, ", "out[n + 1], out[n + 2], out[n + 3] = 1, floor(diff / e * 1000000 + 0.5), "},
		{"      n = n + 4\n    end\n  end\n", "      n = n + 3\n    end\n  end\n"},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("testdata/decide-0b2af22.lua: %q not found once", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}
