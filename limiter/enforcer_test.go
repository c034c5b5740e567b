package limiter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/fakeclock"
	"github.com/exgate/exgate/internal/redistest"
	"github.com/exgate/exgate/ratelimit"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// newFakeClock returns a clock standing still until a test advances it.
func newFakeClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_800_000_000, 0)) }

// newTestEnforcer returns an Enforcer on a memory store with a fake clock.
func newTestEnforcer(t *testing.T, store ratelimit.Store, clock *fakeclock.Clock) *Enforcer {
	t.Helper()
	k, err := NewKeyer(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now})
	}
	e, err := NewEnforcer(EnforcerOptions{Store: store, Keyer: k, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// mustLoad parses a configuration over the defaults.
func mustLoad(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// count sends n requests and returns how many were allowed.
func count(e *Enforcer, rr *RouteRules, req Request, n int) int {
	var d Decision
	ok := 0
	for i := 0; i < n; i++ {
		e.Decide(context.Background(), rr, req, &d)
		if d.Allowed {
			ok++
		}
	}
	return ok
}

func TestDefaultLimitsFollowTheSpec(t *testing.T) {
	cfg := config.Default()
	cfg.Limiter.TokenSpray.MaxTokens = 0
	rs := Compile(cfg, nil)
	cases := []struct {
		route string
		token string
		want  int // allowed of want+5 requests from one client in an instant
		limit string
	}{
		{"place_order", "tok-a", 5400, "token"},
		{"list_markets", "", 10000, "address"},
		{"list_markets", "tok-a", 200, "token"},
		{"list_currencies", "", 10000, "address"},
		{"list_currencies", "tok-a", 200, "token"},
		{"list_matches", "", 60, "address"},
		{"list_matches", "tok-a", 60, "address"},
		{"default", "", 600, "address"},
	}
	for _, tc := range cases {
		t.Run(tc.route+"/"+tc.token, func(t *testing.T) {
			e := newTestEnforcer(t, nil, newFakeClock())
			rr := rs.Route(tc.route)
			req := Request{Token: tc.token, Addr: addr("198.51.100.7")}
			if got := count(e, rr, req, tc.want+5); got != tc.want {
				t.Errorf("allowed %d of %d, want %d", got, tc.want+5, tc.want)
			}
			var d Decision
			e.Decide(context.Background(), rr, req, &d)
			if d.Allowed || d.N != 1 || d.Outcomes[0].Limit != tc.limit || d.Outcomes[0].Decision != Limited {
				t.Errorf("decision after the limit = %+v", d)
			}
		})
	}
}

func TestKeysSeparateClients(t *testing.T) {
	cfg := config.Default()
	cfg.Limiter.TokenSpray.MaxTokens = 0
	rs := Compile(cfg, nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	matches := rs.Route("list_matches")
	// Exhaust one address.
	if got := count(e, matches, Request{Addr: addr("198.51.100.7")}, 61); got != 60 {
		t.Fatalf("allowed %d, want 60", got)
	}
	cases := []struct {
		name string
		addr string
		more int
	}{
		{"another IPv4 address has its own allowance", "198.51.100.8", 60},
		{"IPv4-mapped IPv6 is the same client", "::ffff:198.51.100.7", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := count(e, matches, Request{Addr: addr(tc.addr)}, 60); got != tc.more {
				t.Errorf("allowed %d, want %d", got, tc.more)
			}
		})
	}
	// IPv6: one /64 is one client by default.
	if got := count(e, matches, Request{Addr: addr("2001:db8:1:2::1")}, 60); got != 60 {
		t.Fatalf("first IPv6 address: allowed %d", got)
	}
	if got := count(e, matches, Request{Addr: addr("2001:db8:1:2:ffff::9")}, 5); got != 0 {
		t.Errorf("another address in the same /64 allowed %d, want 0", got)
	}
	if got := count(e, matches, Request{Addr: addr("2001:db8:1:3::1")}, 5); got != 5 {
		t.Errorf("an address in another /64 allowed %d, want 5", got)
	}

	// Tokens: each its own allowance, whatever the address.
	markets := rs.Route("list_markets")
	if got := count(e, markets, Request{Token: "t1", Addr: addr("203.0.113.1")}, 201); got != 200 {
		t.Fatalf("token t1: %d", got)
	}
	if got := count(e, markets, Request{Token: "t1", Addr: addr("203.0.113.2")}, 5); got != 0 {
		t.Errorf("token t1 from another address allowed %d, want 0 (limits follow the token)", got)
	}
	if got := count(e, markets, Request{Token: "t2", Addr: addr("203.0.113.1")}, 5); got != 5 {
		t.Errorf("token t2 allowed %d, want 5", got)
	}
	// A token's id carried from an earlier decision of the request counts
	// on the token's own key.
	if got := count(e, markets, Request{Token: "t1", TokenID: e.TokenID("t1"), Addr: addr("203.0.113.1")}, 5); got != 0 {
		t.Errorf("token t1 with its id carried allowed %d, want 0 (t1's allowance is spent)", got)
	}
	if got := count(e, markets, Request{Token: "t2", TokenID: e.TokenID("t2"), Addr: addr("203.0.113.1")}, 196); got != 195 {
		t.Errorf("token t2 with its id carried allowed %d, want the 195 t2 has left", got)
	}
}

func TestIPv6PrefixConfigurable(t *testing.T) {
	cfg := mustLoad(t, "client_ip: {ipv6_prefix: 128}\n")
	rs := Compile(cfg, nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_matches")
	count(e, rr, Request{Addr: addr("2001:db8::1")}, 60)
	if got := count(e, rr, Request{Addr: addr("2001:db8::2")}, 5); got != 5 {
		t.Errorf("with ipv6_prefix 128 another address allowed %d, want 5", got)
	}
}

func TestRefillOverTime(t *testing.T) {
	rs := Compile(config.Default(), nil)
	clock := newFakeClock()
	e := newTestEnforcer(t, nil, clock)
	rr := rs.Route("list_matches") // 60/1m: one a second
	req := Request{Addr: addr("198.51.100.7")}
	count(e, rr, req, 60)
	clock.Advance(2500 * time.Millisecond)
	if got := count(e, rr, req, 5); got != 2 {
		t.Errorf("after 2.5s allowed %d, want 2", got)
	}
	var d Decision
	e.Decide(context.Background(), rr, req, &d)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Errorf("retry after = %v (allowed %v), want 500ms", d.RetryAfter, d.Allowed)
	}
}

func TestTiers(t *testing.T) {
	cfg := mustLoad(t, `
tokens_file: tokens.yaml
tiers:
  vip:
    place_order: { rate: 20000/1h }
    list_markets: { rate: 1000/1m, burst: 300 }
`)
	cfg.Limiter.TokenSpray.MaxTokens = 0
	k, _ := NewKeyer(testSecret)
	vip := "vip-token"
	rs := Compile(cfg, map[string]string{k.ID(vip): "vip"})
	e := newTestEnforcer(t, nil, newFakeClock())
	cases := []struct {
		route, token string
		want         int
		tier         string
	}{
		{"place_order", vip, 20000, "vip"},
		{"place_order", "plain", 5400, ""},
		{"list_markets", vip, 300, "vip"},
		{"list_markets", "plain", 200, ""},
		// The caller's tier, as the access log says, also where the tier
		// overrides nothing of the route.
		{"list_orders", vip, 600, "vip"},
		{"list_matches", vip, 60, ""}, // a limit by address: no tier
	}
	for _, tc := range cases {
		t.Run(tc.route+"/"+tc.token, func(t *testing.T) {
			rr := rs.Route(tc.route)
			req := Request{Token: tc.token, Addr: addr("198.51.100.9")}
			if got := count(e, rr, req, tc.want+3); got != tc.want {
				t.Errorf("allowed %d, want %d", got, tc.want)
			}
			var d Decision
			e.Decide(context.Background(), rr, req, &d)
			if d.Outcomes[0].Tier != tc.tier {
				t.Errorf("outcome tier %q, want %q", d.Outcomes[0].Tier, tc.tier)
			}
			if tc.token == vip && d.Tier != "vip" {
				t.Errorf("decision tier %q, want vip", d.Tier)
			}
		})
		e = newTestEnforcer(t, nil, newFakeClock()) // the matches case shares an address
	}
	// The metrics count each limit under the tiers its outcomes can
	// carry: every tier for a limit by token, none for one by address.
	for route, want := range map[string][]string{"list_orders": {"", "vip"}, "list_matches": {""}} {
		if got := rs.Route(route).LimitTiers(0); !slices.Equal(got, want) {
			t.Errorf("%s: LimitTiers(0) = %q, want %q", route, got, want)
		}
	}
}

func TestShadowLimitRejectsNothing(t *testing.T) {
	cfg := mustLoad(t, `
routes:
  - name: quotes
    match: GET /q/
    limits:
      - { key: address, rate: 5/1m, shadow: true }
`)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := Compile(cfg, nil).Route("quotes")
	req := Request{Addr: addr("198.51.100.7")}
	if got := count(e, rr, req, 20); got != 20 {
		t.Fatalf("shadow limit let %d of 20 through, want all", got)
	}
	var d Decision
	e.Decide(context.Background(), rr, req, &d)
	if !d.Allowed || d.Outcomes[0].Decision != ShadowLimited {
		t.Errorf("decision %+v, want allowed with a shadow_limited outcome", d)
	}
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"address";r=0;t=`) {
		t.Errorf("RateLimit = %q, want the shadow limit reported with r=0", got)
	}
}

func TestLimitsCheckedInOrderFirstDenialStops(t *testing.T) {
	cfg := mustLoad(t, `
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { name: per_second, key: address, rate: 2/1s }
      - { name: per_hour, key: address, rate: 100/1h }
`)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := Compile(cfg, nil).Route("r")
	req := Request{Addr: addr("198.51.100.7")}
	var d Decision
	for i := 0; i < 2; i++ {
		e.Decide(context.Background(), rr, req, &d)
	}
	if !d.Allowed || d.N != 2 {
		t.Fatalf("second request: %+v", d)
	}
	e.Decide(context.Background(), rr, req, &d)
	if d.Allowed || d.N != 1 || d.Outcomes[0].Limit != "per_second" {
		t.Fatalf("third request: %+v, want denied by per_second alone", d)
	}
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if h.Get("RateLimit-Policy") != `"per_second";q=2;w=1` || h.Get("RateLimit") != `"per_second";r=0;t=1` {
		t.Errorf("headers %v", h)
	}
}

// TestTokenSprayDoesNotMultiplyAllowances: 1,000 invented tokens from one
// address get no more than the allowance of max_tokens tokens plus the
// address's anonymous allowance.
func TestTokenSprayDoesNotMultiplyAllowances(t *testing.T) {
	cfg := mustLoad(t, `
limiter:
  token_spray: { max_tokens: 20, window: 1h }
routes:
  - name: list_markets
    match: GET /api/v1/mkt/markets/
    auth: optional
    limits:
      - { key: address, when: anonymous, rate: 100/24h }
      - { key: token, when: token, rate: 10/1m }
`)
	rs := Compile(cfg, nil)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_markets")
	allowed := 0
	var d Decision
	for i := 0; i < 1000; i++ {
		tok := fmt.Sprintf("invented-%04d", i)
		for j := 0; j < 3; j++ {
			e.Decide(context.Background(), rr, Request{Token: tok, Addr: addr("198.51.100.66")}, &d)
			if d.Allowed {
				allowed++
			}
		}
	}
	// 20 admitted tokens × 3 requests (each within its 10) + 100 anonymous.
	if want := 20*3 + 100; allowed != want {
		t.Errorf("1,000 tokens × 3 requests from one address: %d allowed, want exactly %d", allowed, want)
	}
	// The admitted tokens keep their own allowance; another address is
	// unaffected.
	e.Decide(context.Background(), rr, Request{Token: "invented-0000", Addr: addr("198.51.100.66")}, &d)
	if !d.Allowed || d.Demoted {
		t.Errorf("an admitted token: %+v", d)
	}
	e.Decide(context.Background(), rr, Request{Token: "invented-0999", Addr: addr("198.51.100.67")}, &d)
	if !d.Allowed || d.Demoted {
		t.Errorf("a token from a fresh address: %+v", d)
	}
}

func TestTokenSprayTierTokensExempt(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 1, window: 1h } }
tiers: { vip: { list_markets: { rate: 500/1m } } }
tokens_file: tokens.yaml
`)
	k, _ := NewKeyer(testSecret)
	rs := Compile(cfg, map[string]string{k.ID("v1"): "vip", k.ID("v2"): "vip"})
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := rs.Route("list_markets")
	var d Decision
	for _, tok := range []string{"plain", "v1", "v2"} {
		e.Decide(context.Background(), rr, Request{Token: tok, Addr: addr("198.51.100.1")}, &d)
		if d.Demoted {
			t.Errorf("token %s demoted", tok)
		}
	}
	e.Decide(context.Background(), rr, Request{Token: "plain2", Addr: addr("198.51.100.1")}, &d)
	if !d.Demoted || d.Outcomes[0].Limit != "address" {
		t.Errorf("a second plain token: %+v, want demoted to the anonymous address limit", d)
	}
}

// TestTokenSprayOnRequiredRoute: on a route whose only limit counts by
// token, demoted tokens share one bucket keyed by their address.
func TestTokenSprayOnRequiredRoute(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 2, window: 1h } }
routes:
  - name: place_order
    match: POST /api/v1/odr/orders/
    auth: required
    limits: [ { key: token, rate: 5/1h } ]
`)
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := Compile(cfg, nil).Route("place_order")
	allowed := 0
	var d Decision
	for i := 0; i < 100; i++ {
		e.Decide(context.Background(), rr, Request{Token: fmt.Sprint("t", i), Addr: addr("198.51.100.2")}, &d)
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2+5 {
		t.Errorf("100 tokens allowed %d, want 7 (2 admitted tokens + one shared bucket of 5)", allowed)
	}
}

// TestTokenSprayNewcomerIsToldWhy: when the bucket shared by an address's
// excess tokens is spent, a newcomer behind that address is refused as
// such (TooManyTokens), never as if its own token's limit were spent, and
// is asked to wait at most until the address's window ends; after it the
// newcomer counts as its own token again.
func TestTokenSprayNewcomerIsToldWhy(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 2, window: 10m } }
routes:
  - name: place_order
    match: POST /api/v1/odr/orders/
    auth: required
    limits: [ { key: token, rate: 5/1h } ]
`)
	clk := newFakeClock()
	e := newTestEnforcer(t, nil, clk)
	rr := Compile(cfg, nil).Route("place_order")
	from := addr("198.51.100.9")
	var d Decision
	for i := range 10 { // an abuser: 2 tokens of its own, then the shared bucket drained
		e.Decide(context.Background(), rr, Request{Token: fmt.Sprint("abuser-", i), Addr: from}, &d)
	}
	// A token's own limit spent: throttled as usual.
	for range 6 {
		e.Decide(context.Background(), rr, Request{Token: "abuser-0", Addr: from}, &d)
	}
	if d.Allowed || d.TooManyTokens || d.Demoted {
		t.Errorf("an admitted token past its own limit: %+v", d)
	}
	e.Decide(context.Background(), rr, Request{Token: "newcomer", Addr: from}, &d)
	if d.Allowed || !d.Demoted || !d.TooManyTokens {
		t.Fatalf("a newcomer behind the abuser's address: allowed %v demoted %v too many tokens %v", d.Allowed, d.Demoted, d.TooManyTokens)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > 10*time.Minute {
		t.Errorf("newcomer told to wait %v, want at most the window's 10m (the shared bucket refills in ~12m)", d.RetryAfter)
	}
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if want := fmt.Sprintf(`"token";r=0;t=%d`, Seconds(d.RetryAfter)); h.Get("RateLimit") != want {
		t.Errorf("newcomer's RateLimit %q, want %q: t is the Retry-After", h.Get("RateLimit"), want)
	}
	clk.Advance(10*time.Minute + time.Second)
	e.Decide(context.Background(), rr, Request{Token: "newcomer", Addr: from}, &d)
	if !d.Allowed || d.Demoted || d.TooManyTokens {
		t.Errorf("the newcomer after the window: %+v, want its own token's allowance", d)
	}
}

// failing is a store that always fails, as Redis does when it is down.
type failing struct{}

func (failing) Allow(context.Context, string, ratelimit.Limit) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("connection refused")
}

func (failing) AllowN(context.Context, string, ratelimit.Limit, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("connection refused")
}

func (failing) AllowAll(context.Context, *ratelimit.Request, *ratelimit.Answer) error {
	return errors.New("connection refused")
}

func (failing) Refund(context.Context, *ratelimit.Request) error {
	return errors.New("connection refused")
}

func TestStoreFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode        string
		allowed     int // of 10 requests against a 6/1m limit, replicas 3
		unavailable bool
	}{
		{config.StoreOpen, 10, false},
		{config.StoreClosed, 0, true},
		{config.StoreLocal, 2, false}, // 6 / 3 replicas
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := mustLoad(t, fmt.Sprintf(`
limiter: { replicas: 3, on_store_error: %s }
routes:
  - name: r
    match: /r/
    limits: [ { key: address, rate: 6/1m } ]
`, tc.mode))
			e := newTestEnforcer(t, failing{}, newFakeClock())
			rr := Compile(cfg, nil).Route("r")
			req := Request{Addr: addr("198.51.100.3")}
			if got := count(e, rr, req, 10); got != tc.allowed {
				t.Errorf("allowed %d, want %d", got, tc.allowed)
			}
			var d Decision
			e.Decide(context.Background(), rr, req, &d)
			if d.Unavailable != tc.unavailable || d.Outcomes[0].Fallback != tc.mode {
				t.Errorf("decision %+v", d)
			}
		})
	}
}

func TestRouteOverridesStoreErrorMode(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { on_store_error: open }
routes:
  - name: strict
    match: /s/
    on_store_error: closed
    limits: [ { key: address, rate: 6/1m } ]
  - name: lax
    match: /l/
    limits: [ { key: address, rate: 6/1m } ]
`)
	rs := Compile(cfg, nil)
	e := newTestEnforcer(t, failing{}, newFakeClock())
	req := Request{Addr: addr("198.51.100.3")}
	if got := count(e, rs.Route("strict"), req, 3); got != 0 {
		t.Errorf("strict route allowed %d, want 0", got)
	}
	if got := count(e, rs.Route("lax"), req, 3); got != 3 {
		t.Errorf("lax route allowed %d, want 3", got)
	}
}

func TestUnlimitedRoute(t *testing.T) {
	cfg := mustLoad(t, "routes: [ { name: free, match: \"*\" } ]\n")
	e := newTestEnforcer(t, nil, newFakeClock())
	rr := Compile(cfg, nil).Route("free")
	var d Decision
	e.Decide(context.Background(), rr, Request{}, &d)
	h := http.Header{}
	d.SetHeaders(h, config.HeadersIETF)
	if !d.Allowed || d.N != 0 || len(h) != 0 {
		t.Errorf("unlimited route: %+v headers %v", d, h)
	}
	e.Decide(context.Background(), nil, Request{}, &d)
	if !d.Allowed {
		t.Error("nil route rules denied")
	}
}

// TestAccountLimits: with verification on, the built-in table counts its
// token limits per account: every token of one account draws on one
// bucket, the account's tier comes from the users file, then from the
// token's claim, and an account is never demoted by the spray guard.
func TestAccountLimits(t *testing.T) {
	cfg := mustLoad(t, `
identity: { verify: true, users_file: users.yaml, jwt: { tier_claim: tier } }
tiers: { vip: { list_markets: { rate: 400/1m } }, pro: { list_markets: { rate: 300/1m } } }
limiter: { token_spray: { max_tokens: 1 } }
`)
	for _, r := range cfg.Routes {
		for _, l := range r.Limits {
			if l.Key == "token" || l.Key == "account" && l.Name != "account" {
				t.Fatalf("built-in table with verification: route %s limit %+v", r.Name, l)
			}
		}
	}
	k, _ := NewKeyer(testSecret)
	rs := Compile(cfg, nil).WithUsers(map[string]string{"7": "vip"})
	markets := rs.Route("list_markets")
	a := addr("198.51.100.7")
	tests := []struct {
		name string
		reqs []Request // sent in turn, each until the bucket is empty
		want int
		tier string
	}{
		{"one account, two tokens: one bucket", []Request{
			{Token: "token-1", Account: k.AccountID("42"), User: "42", Addr: a},
			{Token: "token-2", Account: k.AccountID("42"), User: "42", Addr: a},
		}, 200, ""},
		{"users file tier", []Request{{Account: k.AccountID("7"), User: "7", Tier: "pro", Addr: a}}, 400, "vip"},
		{"claim tier", []Request{{Account: k.AccountID("8"), User: "8", Tier: "pro", Addr: a}}, 300, "pro"},
		{"unknown claim tier ignored", []Request{{Account: k.AccountID("9"), User: "9", Tier: "gold", Addr: a}}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnforcer(t, nil, newFakeClock())
			got := 0
			for _, r := range tt.reqs {
				got += count(e, markets, r, 450)
			}
			if got != tt.want {
				t.Fatalf("allowed %d, want %d", got, tt.want)
			}
			var d Decision
			e.Decide(context.Background(), markets, tt.reqs[0], &d)
			if d.Tier != tt.tier || d.Demoted || d.TokenID != "" || d.Identity() != tt.reqs[0].Account {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	if k.AccountID("42") == k.ID("42") || len(k.AccountID("42")) != TokenIDLen {
		t.Fatal("an account key equals the token id of the same string")
	}
}

// TestUsersFileTiersOnlyAccounts backs the configuration check that
// refuses identity.users_file without identity.verify: the users file is
// looked up by a verified account's user claim, and a request without a
// verified account (what the gateway sends without verification: a token
// and an address) never gets its tier.
func TestUsersFileTiersOnlyAccounts(t *testing.T) {
	cfg := mustLoad(t, `
identity: { verify: true, users_file: users.yaml }
tiers: { vip: { list_markets: { rate: 400/1m } } }
`)
	k, _ := NewKeyer(testSecret)
	rr := Compile(cfg, nil).WithUsers(map[string]string{"7": "vip"}).Route("list_markets")
	e := newTestEnforcer(t, nil, newFakeClock())
	var d Decision
	e.Decide(context.Background(), rr, Request{Account: k.AccountID("7"), User: "7", Addr: addr("198.51.100.7")}, &d)
	if d.Tier != "vip" {
		t.Fatalf("verified account 7: tier %q, want vip", d.Tier)
	}
	e.Decide(context.Background(), rr, Request{Token: "7", Addr: addr("198.51.100.8")}, &d)
	if d.Tier != "" {
		t.Fatalf("token request: tier %q, want none", d.Tier)
	}
}

// BenchmarkDecide measures the whole decision of a request on the memory
// store: the token's HMAC id, the tier lookup, the key and the limit.
func BenchmarkDecide(b *testing.B) {
	cfg := config.Default()
	cfg.Limiter.TokenSpray.MaxTokens = 0
	cfg.Route("list_markets").Limits[1].Rate = config.Rate{N: 1 << 40, Period: time.Hour}
	cfg.Route("list_markets").Limits[1].Burst = 1 << 40
	cfg.Route("list_markets").Limits[0].Rate = config.Rate{N: 1 << 40, Period: time.Hour}
	cfg.Route("list_markets").Limits[0].Burst = 1 << 40
	rs := Compile(cfg, nil)
	k, _ := NewKeyer(testSecret)
	e, _ := NewEnforcer(EnforcerOptions{Store: ratelimit.NewMemory(ratelimit.MemoryOptions{}), Keyer: k})
	rr := rs.Route("list_markets")
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"address", Request{Addr: netip.MustParseAddr("198.51.100.7")}},
		{"token", Request{Token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", Addr: netip.MustParseAddr("198.51.100.7")}},
		// A verified account: its key comes with the verified token (from
		// the identity cache), so no HMAC per request.
		{"account", Request{Account: k.AccountID("42"), User: "42", Addr: netip.MustParseAddr("198.51.100.7")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rr := rr
			if tc.req.Account != "" {
				cfg.Route("list_markets").Limits[1].Key = config.KeyAccount
				rr = Compile(cfg, nil).Route("list_markets")
			}
			var d Decision
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(context.Background(), rr, tc.req, &d)
			}
			if d.N == 0 || !d.Allowed {
				b.Fatalf("decision %+v", d)
			}
		})
	}
}

// TestOneRoundTripPerRequest: against Redis, the token-spray guard and
// every limit of the route are decided in one round trip per request, a
// request one limit refuses is charged in none, and with Redis paused a
// request makes one round trip, ended by its deadline, not one per limit.
func TestOneRoundTripPerRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 5, window: 1h } }
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { name: hourly, key: address, rate: 100/1h }
      - { name: token, key: token, rate: 2/1h }
      - { name: anonymous, key: address, when: anonymous, rate: 100/1h }
`)
	rr := Compile(cfg, nil).Route("r")
	k, _ := NewKeyer(testSecret)
	var trips atomic.Int64
	const timeout = time.Second // the most it may be: far beyond a loaded machine's stalls while Redis answers
	client, err := NewRedisClient(config.Redis{Addrs: []string{srv.Addr}, Timeout: timeout}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rl := ratelimit.NewRedis(client, ratelimit.RedisOptions{
		Timeout: timeout, MaxInFlight: 1,
		Observe: func(time.Duration, int, error) { trips.Add(1) },
	})
	t.Cleanup(func() { _ = rl.Close() })
	e, err := NewEnforcer(EnforcerOptions{Store: rl, Keyer: k})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var d Decision
	for i := 0; i < 3; i++ {
		before := trips.Load()
		e.Decide(ctx, rr, Request{Token: "tok-a", Addr: addr("192.0.2.1")}, &d)
		if n := trips.Load() - before; n != 1 {
			t.Errorf("request %d: %d round trips, want 1 (spray guard and limits at once)", i, n)
		}
		if d.Allowed != (i < 2) {
			t.Errorf("request %d: allowed %v", i, d.Allowed)
		}
	}
	// The third request was refused by the token limit: the address's
	// hourly limit was charged twice, not three times.
	states, err := e.Inspect(ctx, Compile(cfg, nil), Subject{Addr: addr("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.Limit == "hourly" && st.Remaining != 98 {
			t.Errorf("hourly: %d remaining, want 98 (the refused request charged nothing)", st.Remaining)
		}
	}

	srv.Freeze()
	defer srv.Thaw()
	start := time.Now()
	before := trips.Load()
	e.Decide(ctx, rr, Request{Token: "tok-b", Addr: addr("192.0.2.2")}, &d)
	took := time.Since(start)
	if n := trips.Load() - before; n != 1 {
		t.Errorf("with Redis paused a request made %d round trips, want 1 (ended by its deadline)", n)
	}
	t.Logf("with Redis paused a request with the spray check and three limits took %v (deadline %v)", took, timeout)
	if !d.Allowed || d.Outcomes[0].Fallback != config.StoreLocal {
		t.Errorf("with Redis paused: %+v, want the local fallback", d)
	}
}

// BenchmarkDecideRedis measures the whole decision of a request against
// Redis with 64 concurrent callers, each request with a token of its own
// from one address: the token-spray guard and the route's limits in one
// round trip.
func BenchmarkDecideRedis(b *testing.B) {
	srv := redistest.Start(b)
	cfg := config.Default()
	cfg.Limiter.TokenSpray.MaxTokens = 1 << 30
	for i := range cfg.Route("list_markets").Limits {
		cfg.Route("list_markets").Limits[i].Rate = config.Rate{N: 1 << 40, Period: time.Hour}
		cfg.Route("list_markets").Limits[i].Burst = 1 << 40
	}
	rr := Compile(cfg, nil).Route("list_markets")
	k, _ := NewKeyer(testSecret)
	rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
	defer rl.Close()
	e, _ := NewEnforcer(EnforcerOptions{Store: rl, Keyer: k})
	tokens := make([]string, 1<<14)
	for i := range tokens {
		tokens[i] = "token-" + strconv.Itoa(i)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // GOMAXPROCS is 2 here: 64 goroutines
	b.RunParallel(func(pb *testing.PB) {
		var d Decision
		for pb.Next() {
			i := n.Add(1)
			e.Decide(context.Background(), rr, Request{Token: tokens[i&(1<<14-1)], Addr: netip.MustParseAddr("198.51.100.7")}, &d)
			if !d.Allowed {
				b.Errorf("decision %+v", d)
				return
			}
		}
	})
}

// TestRefundGivesBackEveryLimit: a request decided and then refunded costs
// its client nothing in any limit of the route, on the memory store and on
// Redis alike, with the token-spray guard deciding which keys apply: a
// client whose allowance is N has every one of N requests refunded and
// can then still make N. A shadow limit that refused charged nothing, and
// nothing is given back for it.
func TestRefundGivesBackEveryLimit(t *testing.T) {
	cfg := mustLoad(t, `
limiter: { token_spray: { max_tokens: 1, window: 1h } }
routes:
  - name: r
    match: /r/
    auth: optional
    limits:
      - { name: address, key: address, rate: 5/1h }
      - { name: token, key: token, rate: 3/1h }
      - { name: watch, key: address, rate: 1/1h, shadow: true }
`)
	rr := Compile(cfg, nil).Route("r")
	stores := map[string]func(t *testing.T, clock *fakeclock.Clock) ratelimit.Store{
		"memory": func(t *testing.T, clock *fakeclock.Clock) ratelimit.Store {
			return ratelimit.NewDenyCache(ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now}), 100, clock.Now)
		},
	}
	if !testing.Short() {
		stores["redis"] = func(t *testing.T, _ *fakeclock.Clock) ratelimit.Store {
			srv := redistest.Start(t)
			rl := ratelimit.NewRedis(srv.Client(), ratelimit.RedisOptions{Timeout: testStoreTimeout})
			t.Cleanup(func() { _ = rl.Close() })
			return ratelimit.NewDenyCache(rl, 100, nil)
		}
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			e := newTestEnforcer(t, store(t, clock), clock)
			ctx := context.Background()
			owner := Request{Token: "tok-a", Addr: addr("192.0.2.1")}
			var d Decision
			for i := 0; i < 3; i++ { // the token's allowance, every request shed
				e.Decide(ctx, rr, owner, &d)
				if !d.Allowed {
					t.Fatalf("request %d refused: %+v", i, d)
				}
				if err := e.Refund(ctx, rr, owner, &d); err != nil {
					t.Fatal(err)
				}
			}
			if got := count(e, rr, owner, 4); got != 3 {
				t.Errorf("after three refunded requests the token made %d of 4, want its whole allowance of 3", got)
			}
			// The address has 2 left of 5; the shadow limit refused the
			// last three requests, so it was charged once.
			anon := Request{Addr: addr("192.0.2.1")}
			e.Decide(ctx, rr, anon, &d)
			if !d.Allowed || d.Outcomes[1].Decision != ShadowLimited {
				t.Fatalf("anonymous request: %+v, want allowed with the shadow limit refusing", d)
			}
			if err := e.Refund(ctx, rr, anon, &d); err != nil {
				t.Fatal(err)
			}
			e.Decide(ctx, rr, anon, &d)
			if !d.Allowed || d.Outcomes[0].Result.Remaining != 1 || d.Outcomes[1].Decision != ShadowLimited {
				t.Errorf("after a refund: %+v, want the address at 1 left and the shadow limit still refusing", d)
			}
			// A second token from the address is demoted by the spray
			// guard (max_tokens 1): it is charged, and refunded, on the
			// address's shared bucket of excess tokens.
			sprayed := Request{Token: "tok-b", Addr: addr("192.0.2.1")}
			e.Decide(ctx, rr, sprayed, &d)
			if !d.Allowed || !d.Demoted {
				t.Fatalf("second token: %+v, want allowed and demoted", d)
			}
			if err := e.Refund(ctx, rr, sprayed, &d); err != nil {
				t.Fatal(err)
			}
			if got := count(e, rr, sprayed, 5); got != 1 {
				t.Errorf("demoted token after a refund: %d of 5 allowed, want the address's last 1", got)
			}
		})
	}
}

// TestRefundFollowsTheFallback: a request the local fallback decided is
// given back in process; one the store could not decide (open) charged
// nothing and the refund does nothing.
func TestRefundFollowsTheFallback(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want int // allowed of 3 after two refunded requests, against 2/1m (replicas 1)
	}{
		{config.StoreLocal, 2},
		{config.StoreOpen, 3},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := mustLoad(t, fmt.Sprintf(`
limiter: { on_store_error: %s }
routes:
  - name: r
    match: /r/
    limits: [ { key: address, rate: 2/1m } ]
`, tc.mode))
			e := newTestEnforcer(t, failing{}, newFakeClock())
			rr := Compile(cfg, nil).Route("r")
			req := Request{Addr: addr("198.51.100.3")}
			var d Decision
			for i := 0; i < 2; i++ {
				e.Decide(context.Background(), rr, req, &d)
				if err := e.Refund(context.Background(), rr, req, &d); err != nil {
					t.Fatalf("refund: %v", err)
				}
			}
			if got := count(e, rr, req, 3); got != tc.want {
				t.Errorf("allowed %d of 3 after two refunded requests, want %d", got, tc.want)
			}
		})
	}
}

// keysSeen is a limit store that records the keys of each request it
// decides, as the strings it was given, and whether it came CacheAsked.
type keysSeen struct {
	ratelimit.Store
	mu    sync.Mutex
	seen  [][]string
	asked []bool
}

func (k *keysSeen) AllowAll(ctx context.Context, q *ratelimit.Request, ans *ratelimit.Answer) error {
	k.mu.Lock()
	var keys []string
	for _, c := range q.Checks {
		keys = append(keys, c.Key)
	}
	k.seen = append(k.seen, keys)
	k.asked = append(k.asked, q.CacheAsked)
	k.mu.Unlock()
	return k.Store.AllowAll(ctx, q, ans)
}

// TestUndecidedPlanDecidedOnce: a request the deny cache could not decide
// (CacheOnly) is then decided from the plan built for the lookup — the
// same keys, not built again — with the same caller, and is not looked
// up in the deny cache again (CacheAsked); a Decide of another route, or
// another lookup, builds its own.
func TestUndecidedPlanDecidedOnce(t *testing.T) {
	clock := newFakeClock()
	store := &keysSeen{Store: ratelimit.NewDenyCache(ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now}), 100, nil)}
	e := newTestEnforcer(t, store, clock)
	cfg := config.Default()
	cfg.Tiers = map[string]map[string]config.TierLimit{"mm": {"place_order": {Rate: config.Rate{N: 54000, Period: time.Hour}}}}
	k, _ := NewKeyer(testSecret)
	rs := Compile(cfg, map[string]string{k.ID("tok-mm"): "mm"})
	place, cancel := rs.Route("place_order"), rs.Route("cancel_order")
	req := Request{Token: "tok-mm", Addr: addr("198.51.100.7")}
	var d Decision
	look := req
	look.CacheOnly = true
	e.Decide(context.Background(), place, look, &d)
	if !d.Undecided || d.TokenID == "" || d.Tier != "mm" {
		t.Fatalf("lookup: %+v", d)
	}
	e.Decide(context.Background(), place, req, &d)
	if !d.Allowed || d.Undecided || d.TokenID == "" || d.Tier != "mm" || d.N != 1 || d.Outcomes[0].Tier != "mm" {
		t.Fatalf("decision after the lookup: %+v", d)
	}
	// The lookup's plan holds the allowance of duplicate answers (an
	// order's claim may follow), which a decision without a claim drops.
	same := func(a, b []string) bool {
		return len(a) >= 1 && len(b) == 1 && unsafe.StringData(a[0]) == unsafe.StringData(b[0])
	}
	if len(store.seen) != 2 || !same(store.seen[0], store.seen[1]) || len(store.seen[0]) != 2 ||
		!strings.Contains(store.seen[0][1], ":"+config.DuplicateAnswersLimit+":") {
		t.Fatalf("keys of the lookup and the decision: %q, want the lookup's plan decided, without its allowance of duplicate answers", store.seen)
	}
	if store.asked[0] || !store.asked[1] {
		t.Fatalf("CacheAsked of the lookup and the decision: %v, want false then true", store.asked)
	}
	// A lookup, then a decision of another route: its own plan.
	e.Decide(context.Background(), place, look, &d)
	e.Decide(context.Background(), cancel, req, &d)
	if !d.Allowed || len(store.seen) != 4 || store.seen[3][0] == store.seen[2][0] || store.asked[3] {
		t.Fatalf("another route after a lookup: %+v, keys %q, CacheAsked %v", d, store.seen, store.asked)
	}
	// Two lookups: each its own.
	e.Decide(context.Background(), place, look, &d)
	e.Decide(context.Background(), place, look, &d)
	if !d.Undecided || same(store.seen[4], store.seen[5]) {
		t.Fatalf("two lookups share a plan: %q", store.seen)
	}
}

// TestEveryLimitOfARouteIsReported: a route with as many limits as
// configuration allows (config.MaxRouteLimits) has every one recorded in
// the Decision, so that each is counted, told in the headers and given
// back by Refund; the last one is the one that refuses.
func TestEveryLimitOfARouteIsReported(t *testing.T) {
	var b strings.Builder
	b.WriteString("routes:\n  - name: r\n    match: /r/\n    auth: optional\n    limits:\n")
	for i := range config.MaxRouteLimits {
		rate := 100 + i
		if i == config.MaxRouteLimits-1 {
			rate = 2 // the last limit refuses the third request
		}
		fmt.Fprintf(&b, "      - { name: l%d, key: address, rate: %d/1h }\n", i, rate)
	}
	cfg := mustLoad(t, b.String())
	rr := Compile(cfg, nil).Route("r")
	clock := newFakeClock()
	e := newTestEnforcer(t, ratelimit.NewMemory(ratelimit.MemoryOptions{Now: clock.Now}), clock)
	ctx := context.Background()
	req := Request{Addr: addr("192.0.2.1")}
	var d Decision
	e.Decide(ctx, rr, req, &d)
	if !d.Allowed || d.N != config.MaxRouteLimits {
		t.Fatalf("decision recorded %d outcomes (allowed %v), want all %d", d.N, d.Allowed, config.MaxRouteLimits)
	}
	if err := e.Refund(ctx, rr, req, &d); err != nil {
		t.Fatal(err)
	}
	if got := count(e, rr, req, 3); got != 2 {
		t.Errorf("after a refunded request %d of 3 passed, want the last limit's 2: its charge was not given back", got)
	}
	e.Decide(ctx, rr, req, &d)
	if d.Allowed || d.N != config.MaxRouteLimits || d.Outcomes[d.N-1].Limit != "l7" || d.Outcomes[d.N-1].Decision != Limited {
		t.Errorf("refusal by the last limit recorded as %d outcomes, last %+v", d.N, d.Outcomes[max(d.N-1, 0)])
	}
}

// TestDecisionReset: Reset leaves every field of a Decision zero, those
// added after it was written too (each is set here through reflection).
func TestDecisionReset(t *testing.T) {
	var d Decision
	v := reflect.ValueOf(&d).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := reflect.NewAt(v.Field(i).Type(), v.Field(i).Addr().UnsafePointer()).Elem()
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.String:
			f.SetString("x")
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Struct:
			f.Field(0).Set(reflect.ValueOf(true).Convert(f.Field(0).Type()))
		case reflect.Array:
			for j := 0; j < f.Len(); j++ {
				f.Index(j).FieldByName("Limit").SetString("x")
			}
		default:
			t.Fatalf("field %s of kind %s: set it here", v.Type().Field(i).Name, f.Kind())
		}
		if f.IsZero() {
			t.Fatalf("field %s was not set", v.Type().Field(i).Name)
		}
	}
	d.N = maxOutcomes
	d.Reset()
	if !v.IsZero() {
		t.Errorf("after Reset: %+v, want the zero Decision", d)
	}
}

// TestPlanAddrKeyNeverAnotherClients holds the address text a plan
// remembers (chargePlan.addrKey) to the text made afresh for each
// request: one plan serving addresses one after the other, IPv4, mapped,
// zoned, under two IPv6 prefixes, and none, never answers one request
// with the text of another's.
func TestPlanAddrKeyNeverAnotherClients(t *testing.T) {
	r64 := Compile(config.Default(), nil)
	r128 := Compile(mustLoad(t, "client_ip: {ipv6_prefix: 128}\n"), nil)
	p := new(chargePlan)
	for _, tc := range []struct {
		name string
		rs   *Rules
		addr netip.Addr
	}{
		{"first IPv4", r64, netip.MustParseAddr("203.0.113.1")},
		{"same IPv4", r64, netip.MustParseAddr("203.0.113.1")},
		{"another IPv4", r64, netip.MustParseAddr("203.0.113.2")},
		{"mapped", r64, netip.MustParseAddr("::ffff:203.0.113.3")},
		{"IPv6", r64, netip.MustParseAddr("2001:db8::1")},
		{"IPv6 same /64", r64, netip.MustParseAddr("2001:db8::2")},
		{"IPv6 under /128", r128, netip.MustParseAddr("2001:db8::2")},
		{"IPv6 under /64 again", r64, netip.MustParseAddr("2001:db8::2")},
		{"zoned", r128, netip.MustParseAddr("fe80::1%eth0")},
		{"none", r64, netip.Addr{}},
		{"IPv4 after none", r64, netip.MustParseAddr("203.0.113.2")},
		{"none again", r128, netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.rs.addrKey(tc.addr, nil)
			got := p.addrKey(tc.rs, tc.addr)
			if string(got) != string(want) || (got == nil) != (want == nil) {
				t.Errorf("addrKey(%v) = %q, want %q", tc.addr, got, want)
			}
		})
	}
}
