package logshare

import (
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/exgate/exgate/internal/fakeclock"
	"github.com/exgate/exgate/ratelimit"
	"github.com/exgate/exgate/share"
)

// step is one line of a client at the clock's time, after advancing it.
type step struct {
	advance time.Duration
	client  share.Key
	want    bool // written (within its share)
}

func TestAllowIsATokenBucketPerClient(t *testing.T) {
	a, b := share.AddrKey(netip.MustParseAddr("192.0.2.1")), share.AddrKey(netip.MustParseAddr("192.0.2.2"))
	burst := func(k share.Key, n int, want bool) []step {
		s := make([]step, n)
		for i := range s {
			s[i] = step{client: k, want: want}
		}
		return s
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"burst then refused", append(burst(a, 3, true), burst(a, 2, false)...)},
		{"another client keeps its own", append(append(burst(a, 3, true), burst(a, 1, false)...), burst(b, 3, true)...)},
		{"refills at the rate", append(append(burst(a, 3, true), step{client: a}),
			step{advance: 100 * time.Millisecond, client: a, want: true}, step{client: a})},
		{"refills no more than its burst", append(append(burst(a, 3, true), step{advance: time.Hour, client: a, want: true}),
			append(burst(a, 2, true), step{client: a})...)},
		{"a refused line takes nothing", append(append(burst(a, 3, true), burst(a, 50, false)...),
			step{advance: 100 * time.Millisecond, client: a, want: true})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(time.Unix(1_700_000_000, 0))
			s := New(Options{Rate: 10, Period: time.Second, Burst: 3, AfterFunc: func(time.Duration, func()) {}})
			for i, st := range tc.steps {
				clock.Advance(st.advance)
				if got := s.Allow(st.client, clock.Now()); got != st.want {
					t.Fatalf("line %d: Allow = %v, want %v", i, got, st.want)
				}
			}
		})
	}
}

func TestOff(t *testing.T) {
	for _, o := range []Options{{}, {Rate: 10, Period: time.Second}, {Burst: 5, Period: time.Second}} {
		s := New(o)
		if s != nil {
			t.Fatalf("New(%+v) = %v, want nil (off)", o, s)
		}
		if !s.Allow(1, time.Now()) || s.Flush() {
			t.Fatal("a nil Share must allow every line and have nothing to flush")
		}
		s.Suppress(1, time.Now(), 401, "token_not_valid", netip.Addr{}, "")
	}
}

func TestSummaries(t *testing.T) {
	addr := netip.MustParseAddr("198.51.100.7")
	k := share.AddrKey(addr)
	acct := share.AccountKey("acct")
	t0 := time.Unix(1_700_000_000, 0).UTC()
	cases := []struct {
		name    string
		lines   []reason
		account string
		want    map[string]any // fields of the one summary
	}{
		{"by status and code", []reason{{401, "token_not_valid"}, {401, "token_not_valid"}, {400, "invalid_path"}, {404, "not_found"}}, "",
			map[string]any{"client": addr.String(), "lines_not_written": int64(4)}},
		{"an account as the access log writes it", []reason{{429, "throttled"}}, "a1b2c3d4e5f6",
			map[string]any{"account": "a1b2c3d4e5f6", "lines_not_written": int64(1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			var scheduled []func()
			codes := map[string]int{}
			s := New(Options{Rate: 1, Period: time.Second, Burst: 1, Log: zap.New(core),
				Suppressed: func(code string) { codes[code]++ },
				AfterFunc:  func(_ time.Duration, f func()) { scheduled = append(scheduled, f) }})
			key := k
			if tc.account != "" {
				key = acct
			}
			for i, r := range tc.lines {
				s.Suppress(key, t0.Add(time.Duration(i)*time.Second), r.status, r.code, addr, tc.account)
			}
			if len(scheduled) != 1 {
				t.Fatalf("%d flushes scheduled, want 1", len(scheduled))
			}
			scheduled[0]()
			lines := logs.FilterMessage(SummaryMessage).All()
			if len(lines) != 1 {
				t.Fatalf("%d summaries, want 1", len(lines))
			}
			f := lines[0].ContextMap()
			for name, v := range tc.want {
				if f[name] != v {
					t.Errorf("%s = %v, want %v", name, f[name], v)
				}
			}
			if f["first"] != t0 || f["last"] != t0.Add(time.Duration(len(tc.lines)-1)*time.Second) {
				t.Errorf("first, last = %v, %v", f["first"], f["last"])
			}
			by := f["by"].([]any)
			var sum int64
			for _, r := range by {
				sum += r.(map[string]any)["lines"].(int64)
			}
			if sum != int64(len(tc.lines)) {
				t.Errorf("by %v sums to %d, want %d", by, sum, len(tc.lines))
			}
			total := 0
			for _, n := range codes {
				total += n
			}
			if total != len(tc.lines) {
				t.Errorf("Suppressed called %d times, want %d", total, len(tc.lines))
			}
			// The flood goes on: rescheduled; it ends: one empty flush
			// forgets the client and schedules nothing more.
			if len(scheduled) != 2 {
				t.Fatalf("%d flushes scheduled after the first, want 2", len(scheduled))
			}
			scheduled[1]()
			if len(scheduled) != 2 || len(logs.FilterMessage(SummaryMessage).All()) != 1 {
				t.Fatalf("after the flood ended: %d scheduled, %d summaries; want 2 and 1", len(scheduled), logs.Len())
			}
			s.Suppress(key, t0.Add(time.Minute), 401, "", addr, tc.account)
			if len(scheduled) != 3 {
				t.Fatalf("a new flood scheduled %d flushes in all, want 3", len(scheduled))
			}
		})
	}
}

func TestSuppressingIsBounded(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := New(Options{Rate: 1, Period: time.Second, Burst: 1, Log: zap.New(core), AfterFunc: func(time.Duration, func()) {}})
	now := time.Unix(1_700_000_000, 0)
	for i := range MaxSuppressing + 10 {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		s.Suppress(share.AddrKey(a), now, 401, "not_authenticated", a, "")
	}
	if len(s.over) != MaxSuppressing {
		t.Fatalf("%d clients counted one by one, want %d", len(s.over), MaxSuppressing)
	}
	s.Flush()
	var others int64
	n := 0
	for _, e := range logs.FilterMessage(SummaryMessage).All() {
		n++
		if f := e.ContextMap(); f["other_clients"] == true {
			others = f["lines_not_written"].(int64)
		}
	}
	if n != MaxSuppressing+1 || others != 10 {
		t.Fatalf("%d summaries, %d lines of other clients; want %d and 10", n, others, MaxSuppressing+1)
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	s := New(Options{Rate: 1000, Period: time.Second, Burst: 1 << 30, AfterFunc: func(time.Duration, func()) {}})
	k := share.AddrKey(netip.MustParseAddr("192.0.2.1"))
	now := time.Unix(1_700_000_000, 0)
	s.Allow(k, now)
	if n := testing.AllocsPerRun(1000, func() { s.Allow(k, now) }); n != 0 {
		t.Fatalf("Allow allocates %v times, want 0", n)
	}
}

// BenchmarkAllow is the cost of a refusal line within its share: one
// client's bucket charged again and again.
func BenchmarkAllow(b *testing.B) {
	s := New(Options{Rate: 1 << 30, Period: time.Second, Burst: 1 << 30, AfterFunc: func(time.Duration, func()) {}})
	k := share.AddrKey(netip.MustParseAddr("192.0.2.1"))
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		s.Allow(k, now)
	}
}

// TestAllowIsTheRateLimitersGCRA: a client's share of the lines is
// decided as a limit of the rate limiter is (ratelimit.Memory, the same
// GCRA as Redis), line for line, including a rate that does not divide
// its period, where the interval of one line is rounded up: never more
// lines than the rate.
func TestAllowIsTheRateLimitersGCRA(t *testing.T) {
	k := share.AddrKey(netip.MustParseAddr("192.0.2.9"))
	cases := []struct {
		name  string
		limit ratelimit.Limit
		every []time.Duration // the gaps before each line, cycled
	}{
		{"a rate that divides its period", ratelimit.Limit{Rate: 10, Period: time.Second, Burst: 3}, []time.Duration{0, 0, 0, 0, 100 * time.Millisecond}},
		{"a rate that does not", ratelimit.Limit{Rate: 3, Period: time.Second, Burst: 1}, []time.Duration{333333333}},
		{"a burst, then the rate's gap", ratelimit.Limit{Rate: 7, Period: time.Second, Burst: 4}, []time.Duration{0, 0, 0, 0, 0, 142857142, 142857143}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(time.Unix(1_700_000_000, 0))
			s := New(Options{Rate: tc.limit.Rate, Period: tc.limit.Period, Burst: tc.limit.Burst, AfterFunc: func(time.Duration, func()) {}})
			m := ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})
			for i := range 60 {
				clock.Advance(tc.every[i%len(tc.every)])
				want := m.AllowLocal("client", tc.limit, 1).Allowed
				if got := s.Allow(k, clock.Now()); got != want {
					t.Fatalf("line %d: Allow = %v, the rate limiter's answer %v", i, got, want)
				}
			}
		})
	}
}
