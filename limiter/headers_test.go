package limiter

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/fakeclock"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

func TestHeaderStyles(t *testing.T) {
	rs := Compile(config.Default(), nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_matches")
	req := Request{Addr: addr("198.51.100.7")}
	var d Decision
	e.Decide(context.Background(), rr, req, &d)
	cases := []struct {
		style string
		want  map[string]string
	}{
		{config.HeadersIETF, map[string]string{"RateLimit-Policy": `"address";q=60;w=60`, "RateLimit": `"address";r=59;t=1`}},
		{config.HeadersLegacy, map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59", "X-RateLimit-Reset": "1"}},
		{config.HeadersNone, map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.style, func(t *testing.T) {
			h := http.Header{}
			d.SetHeaders(h, tc.style)
			if len(h) != len(tc.want) {
				t.Errorf("headers %v, want %v", h, tc.want)
			}
			for k, v := range tc.want {
				if h.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, h.Get(k), v)
				}
			}
		})
	}
	// Denied: t is the Retry-After.
	count(e, rr, req, 60)
	e.Decide(context.Background(), rr, req, &d)
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if d.Allowed || h.Get("RateLimit") != `"address";r=0;t=1` {
		t.Errorf("denied: %v %v", d.Allowed, h)
	}
}

func TestSecondsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {59*time.Second + 1, 60},
		{366 * 24 * time.Hour, MaxWaitSeconds}, {366*24*time.Hour + 1, MaxWaitSeconds}, {ratelimit.Never, MaxWaitSeconds}} {
		if got := Seconds(tc.d); got != tc.want {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// refundFails is a store whose decisions are its memory's and whose
// refunds fail, as Redis's do when it goes away between the two.
type refundFails struct{ *ratelimit.Memory }

func (refundFails) Refund(context.Context, *ratelimit.Request) error {
	return errors.New("connection refused")
}

// headerStep is one request: its cost, whether its charge is given back, and
// what its answer tells.
type headerStep struct {
	cost    int64
	refund  bool   // give the charge back after the decision (a shed request)
	allowed bool   // the decision
	fields  string // the RateLimit field of the answer; its limit's name, r and t
	hourly  int64  // the first limit's remaining, where its outcome is recorded
}

// headerCase is a sequence of requests from one address and what each one's
// answer tells.
type headerCase struct {
	name  string
	steps []headerStep
}

// headerCases is TestHeadersTellTheStateAfterTheAnswer's table, for a route
// limited to 10 an hour and 3 an hour.
var headerCases = []headerCase{
	{"refused by the second limit charges the first nothing", []headerStep{
		{1, false, true, `"short";r=2;t=1200`, 9},
		{1, false, true, `"short";r=1;t=2400`, 8},
		{1, false, true, `"short";r=0;t=3600`, 7},
		{1, false, false, `"short";r=0;t=1200`, 7},
		{1, false, false, `"short";r=0;t=1200`, 7},
		{1, true, false, `"short";r=0;t=1200`, 7}, // refused: nothing to give back
	}},
	{"a bulk above a burst tells the limit ahead uncharged", []headerStep{
		{1, false, true, `"short";r=2;t=1200`, 9},
		{4, false, false, `"hourly";r=9;t=360`, 9},
		{4, false, false, `"hourly";r=9;t=360`, 9},
		{2, false, true, `"short";r=0;t=3600`, 7},
	}},
	{"a bulk refused for its size leaves what it did not take", []headerStep{
		{1, false, true, `"short";r=2;t=1200`, 9},
		{3, false, false, `"short";r=2;t=1200`, 9},
		{2, false, true, `"short";r=0;t=3600`, 7},
	}},
	{"a shed request tells the state before it", []headerStep{
		{1, false, true, `"short";r=2;t=1200`, 9},
		{1, true, true, `"short";r=2;t=1200`, 9},
		{2, true, true, `"short";r=2;t=1200`, 9},
		{2, false, true, `"short";r=0;t=3600`, 7},
		{1, false, false, `"short";r=0;t=1200`, 7},
	}},
}

// TestHeadersTellTheStateAfterTheAnswer checks that the rate-limit fields
// of every answer describe the limits as the store holds them after it,
// in both styles and on every store: limits are all or nothing, so a
// refused request was charged in none — not in a limit ahead of the one
// that refused it, and not in the refusing one (a bulk refused for its
// size leaves what it did not take) — and a request whose charge was
// given back (shed) tells the state before it, unless the refund failed.
func TestHeadersTellTheStateAfterTheAnswer(t *testing.T) {
	cfg := mustLoad(t, `
routes:
  - name: r
    match: /r/
    limits:
      - { name: hourly, key: address, rate: 10/1h, burst: 10 }
      - { name: short, key: address, rate: 3/1h, burst: 3 }
`)
	rr := Compile(cfg, nil).Route("r")
	stores := []struct {
		name  string
		store func(clock *fakeclock.Clock) ratelimit.Store
	}{
		{"memory", func(clock *fakeclock.Clock) ratelimit.Store {
			return ratelimit.NewDenyCache(ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now}), 100, clock.Now)
		}},
	}
	if !testing.Short() {
		srv := redistest.Start(t)
		rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
		t.Cleanup(func() { _ = rl.Close() })
		stores = append(stores, struct {
			name  string
			store func(clock *fakeclock.Clock) ratelimit.Store
		}{"redis", func(*fakeclock.Clock) ratelimit.Store { return ratelimit.NewDenyCache(rl, 100, nil) }})
	}
	for _, st := range stores {
		for i, tc := range headerCases {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				clock := newFakeClock()
				e := newTestEnforcer(t, st.store(clock), clock)
				req := Request{Addr: netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)})}
				runHeaderSteps(t, e, rr, req, tc.steps)
			})
		}
	}
	t.Run("memory/a failed refund tells the charge that stands", func(t *testing.T) {
		clock := newFakeClock()
		e := newTestEnforcer(t, refundFails{ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})}, clock)
		req := Request{Addr: addr("198.51.100.99")}
		var d Decision
		e.Decide(context.Background(), rr, req, &d)
		if err := e.Refund(context.Background(), rr, req, &d); err == nil {
			t.Fatal("refund succeeded")
		}
		checkFields(t, 0, &d, `"short";r=2;t=1200`)
	})
}

// runHeaderSteps decides and, where a step says so, refunds each step's
// request in turn, and checks what its answer tells.
func runHeaderSteps(t *testing.T, e *Enforcer, rr *RouteRules, req Request, steps []headerStep) {
	t.Helper()
	for k, s := range steps {
		req.Cost = s.cost
		var d Decision
		e.Decide(context.Background(), rr, req, &d)
		if s.refund {
			if err := e.Refund(context.Background(), rr, req, &d); err != nil {
				t.Fatal(err)
			}
		}
		if d.Allowed != s.allowed {
			t.Fatalf("step %d (cost %d): allowed %v, want %v", k, s.cost, d.Allowed, s.allowed)
		}
		checkFields(t, k, &d, s.fields)
		// The deny cache refuses a known denial before the
		// limits ahead of it are decided: they are then not
		// reported.
		if o := d.Outcomes[0]; o.Limit == "hourly" && o.Result.Remaining != s.hourly {
			t.Errorf("step %d: the first limit reports %d remaining, want %d", k, o.Result.Remaining, s.hourly)
		}
	}
}

// checkFields checks the rate-limit fields d writes in both styles
// against the RateLimit field want (`"name";r=R;t=T`).
func checkFields(t *testing.T, step int, d *Decision, want string) {
	t.Helper()
	name, rest, _ := strings.Cut(strings.TrimPrefix(want, `"`), `";r=`)
	r, tt, _ := strings.Cut(rest, ";t=")
	quota := map[string]string{"hourly": "10", "short": "3"}[name]
	ietf, legacy := http.Header{}, http.Header{}
	d.SetHeaders(ietf, config.HeadersIETF)
	d.SetHeaders(legacy, config.HeadersLegacy)
	if got := ietf.Get("RateLimit"); got != want {
		t.Errorf("step %d: RateLimit %q, want %q", step, got, want)
	}
	if got := ietf.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+name+`";q=`+quota+";") {
		t.Errorf("step %d: RateLimit-Policy %q, want the %s limit's", step, got, name)
	}
	if l, rem, reset := legacy.Get("X-RateLimit-Limit"), legacy.Get("X-RateLimit-Remaining"), legacy.Get("X-RateLimit-Reset"); l != quota || rem != r || reset != tt {
		t.Errorf("step %d: X-RateLimit-Limit/Remaining/Reset %s/%s/%s, want %s/%s/%s", step, l, rem, reset, quota, r, tt)
	}
	if !d.Allowed && !d.ExceedsBurst && strconv.FormatInt(Seconds(d.RetryAfter), 10) != tt {
		t.Errorf("step %d: Retry-After %d, t=%s: they differ", step, Seconds(d.RetryAfter), tt)
	}
}

// TestRateLimitFieldOfLongName checks the RateLimit field of a limit
// whose name does not fit the field's inline buffer, and that a field
// already sent is not changed by the next one.
func TestRateLimitFieldOfLongName(t *testing.T) {
	cfg := config.Default()
	name := strings.Repeat("n", 80)
	cfg.Route("list_matches").Limits[0].Name = name
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rs := Compile(cfg, nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_matches")
	req := Request{Addr: addr("198.51.100.7")}
	var d Decision
	var sent []string
	for i := 0; i < 2; i++ {
		e.Decide(context.Background(), rr, req, &d)
		h := http.Header{}
		d.SetHeaders(h, config.HeadersIETF)
		want := `"` + name + `";r=` + strconv.Itoa(59-i) + ";t=" + strconv.Itoa(i+1)
		if got := h.Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		sent = append(sent, h.Get("RateLimit"))
	}
	if want := `"` + name + `";r=59;t=1`; sent[0] != want {
		t.Errorf("the first field became %q, want %q", sent[0], want)
	}
}

// TestRateLimitValueReused checks that a RateLimit value made before is
// reused only when it says the same limit, count and wait, and that a
// slot taken by another count gives that count's own text.
func TestRateLimitValueReused(t *testing.T) {
	v := newVariant("k:", "", "token", config.Rate{N: 10, Period: time.Second}, 10, 1)
	tests := []struct {
		name  string
		limit string
		r, t  int64
		want  string
		same  bool // the value is the one the step before returned
	}{
		{name: "first", limit: "token", r: 9, t: 1, want: `"token";r=9;t=1`},
		{name: "repeated", limit: "token", r: 9, t: 1, want: `"token";r=9;t=1`, same: true},
		{name: "other wait", limit: "token", r: 9, t: 2, want: `"token";r=9;t=2`},
		{name: "same slot, other count", limit: "token", r: 9 + rateLimitValues, t: 2, want: `"token";r=265;t=2`},
		{name: "other name", limit: "order", r: 9 + rateLimitValues, t: 2, want: `"order";r=265;t=2`},
		{name: "other slot", limit: "order", r: 8, t: 2, want: `"order";r=8;t=2`},
	}
	var last []string
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := v.rateLimitValue(tc.limit, tc.r, tc.t)
			if len(got) != 1 || got[0] != tc.want || cap(got) != 1 {
				t.Fatalf("value %q (cap %d), want [%q] of capacity 1", got, cap(got), tc.want)
			}
			if same := last != nil && &got[0] == &last[0]; same != tc.same {
				t.Errorf("reused the value before: %v, want %v", same, tc.same)
			}
			last = got
		})
	}
}

// FuzzLegacyRateLimit: whatever legacy rate-limit fields a backend sends,
// the client's answer holds one value of each of exgate's three fields,
// whole numbers, and nothing of the backend's is left to append.
func FuzzLegacyRateLimit(f *testing.F) {
	f.Add("10", "3", "7", false)
	f.Add("1000", "500", "7", false)
	f.Add("10", "-1", "7", true)
	f.Add("", "0", "", false)
	f.Add("99999999999999999999", "0", "1", true)
	f.Fuzz(func(t *testing.T, limit, remaining, reset string, twice bool) {
		backend := http.Header{}
		for i, v := range []string{limit, remaining, reset} {
			if v != "" {
				backend[legacyRateLimitFields[i]] = []string{v}
			}
		}
		if twice {
			backend["X-Ratelimit-Remaining"] = append(backend["X-Ratelimit-Remaining"], "0")
		}
		out := http.Header{"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"99"}, "X-Ratelimit-Reset": {"36"}}
		MergeLegacyFields(backend, out)
		for _, k := range legacyRateLimitFields {
			if _, ok := backend[k]; ok {
				t.Errorf("the backend's %s left to append: %q", k, backend[k])
			}
			vs := out[k]
			if len(vs) != 1 {
				t.Fatalf("%s: %q, want one value", k, vs)
			}
			if n, err := strconv.ParseInt(vs[0], 10, 64); err != nil || n < 0 || strconv.FormatInt(n, 10) != vs[0] {
				t.Errorf("%s: %q, want a whole number in canonical form", k, vs[0])
			}
		}
	})
}
