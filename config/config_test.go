package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// env returns a getenv that reads from m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// errorStrings returns the messages of an Errors value, failing the test
// for any other kind of error.
func errorStrings(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not Errors: %v", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

func mustParse(t *testing.T, yml string, getenv func(string) (string, bool)) *Config {
	t.Helper()
	c, err := Parse("test.yaml", []byte(yml), getenv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

// testInvalidFixtures loads every bad-*.yaml in dir and checks that it
// produces exactly the problems fixtures lists for it, in order, and that
// every such file has a list.
func testInvalidFixtures(t *testing.T, dir string, fixtures map[string][]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "bad-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := fixtures[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expected problems", f)
		}
	}
	for name, want := range fixtures {
		t.Run(name, func(t *testing.T) {
			c, err := Load(filepath.Join(dir, name), nil)
			if c != nil {
				t.Errorf("Load returned a config along with errors")
			}
			if got := errorStrings(t, err); !slices.Equal(got, want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

func TestDefaultIsValidAndNormalised(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("Validate changed Default(); Default() must already be normalised")
	}
	if c.RouteTimeout(&c.Routes[0]) != 10*time.Second {
		t.Errorf("RouteTimeout(place_order) = %v, want upstream.timeout 10s", c.RouteTimeout(&c.Routes[0]))
	}
}

// TestDefaultMatchesSpec pins the defaults to trading-api.md's Limits table.
func TestDefaultMatchesSpec(t *testing.T) {
	type limit struct{ key, when, rate string }
	want := []struct {
		name, match, auth, validate string
		limits                      []limit
	}{
		{"place_order", "POST /api/v1/odr/orders/", "required", "order", []limit{{"token", "always", "5400/1h"}}},
		{"list_markets", "GET /api/v1/mkt/markets/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"list_currencies", "GET /api/v1/mkt/currencies/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"list_matches", "GET /api/v1/mth/matches/{symbol}/", "optional", "", []limit{{"address", "always", "60/1m"}}},
		{"default", "*", "none", "", []limit{{"address", "always", "600/1m"}}},
	}
	// The rest of the family (routes.go): names and matches the spec does
	// not give, with the limits docs/configuration.md documents.
	family := []struct {
		name, match, auth, validate string
		limits                      []limit
	}{
		{"bulk_orders", "POST /api/v1/odr/orders/bulk/", "required", "order_bulk", nil},
		{"bulk_cancel", "DELETE /api/v1/odr/orders/bulk/", "required", "order_bulk", nil},
		{"cancel_order", "DELETE /api/v1/odr/orders/{id}/", "required", "order_ids", []limit{{"token", "always", "16200/1h"}}},
		{"list_orders", "GET /api/v1/odr/orders/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"get_orders", "GET /api/v1/odr/orders/{ids}/", "required", "order_ids", []limit{{"token", "always", "600/1m"}}},
		{"list_fills", "GET /api/v1/odr/fills/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"orders_other", "GET /api/v1/odr/{rest...}", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"orders_refused", "/api/v1/odr/{rest...}", "none", "", nil}, // refuse: true, every other method
		{"list_wallets", "GET /api/v1/wlt/wallets/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"wallets_other", "GET /api/v1/wlt/{rest...}", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"wallets_refused", "/api/v1/wlt/{rest...}", "none", "", nil},
		{"list_tickers", "GET /api/v1/mkt/tickers/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"order_book", "GET /api/v1/mth/orderbook/{symbol}/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"authenticate", "POST /api/v1/usr/authenticate/", "none", "", []limit{{"address", "always", "20/1m"}, {"address", "always", "100/1h"}}},
		{"refresh_token", "POST /api/v1/usr/refresh_token/", "none", "", []limit{{"address", "always", "60/1m"}}},
	}
	want = append(want[:1], append(family[:11], append(want[1:3], append(family[11:13], append(want[3:4], append(family[13:], want[4])...)...)...)...)...)
	c := Default()
	if len(c.Routes) != len(want) {
		t.Fatalf("Default() has %d routes, want %d", len(c.Routes), len(want))
	}
	for i, w := range want {
		r := c.Routes[i]
		t.Run(w.name, func(t *testing.T) {
			if r.Refuse != strings.HasSuffix(w.name, "_refused") {
				t.Errorf("refuse = %v", r.Refuse)
			}
			if r.Name != w.name || r.Match.String() != w.match || r.Auth != w.auth || r.Validate != w.validate || r.Timeout != 0 {
				t.Errorf("route = %s %q auth=%s validate=%q timeout=%v, want %s %q auth=%s validate=%q timeout=0",
					r.Name, r.Match, r.Auth, r.Validate, r.Timeout, w.name, w.match, w.auth, w.validate)
			}
			var got []limit
			for _, l := range r.Limits {
				got = append(got, limit{l.Key, l.When, l.Rate.String()})
				if l.Burst != int(l.Rate.N) || l.Shadow {
					t.Errorf("limit %v: burst=%d shadow=%v, want burst=N, shadow=false", l.Rate, l.Burst, l.Shadow)
				}
			}
			if !reflect.DeepEqual(got, w.limits) {
				t.Errorf("limits = %v, want %v", got, w.limits)
			}
		})
	}
	if len(c.Tiers) != 0 || c.TokensFile != "" {
		t.Errorf("Default() has tiers %v / tokens_file %q, want none", c.Tiers, c.TokensFile)
	}
}

func TestValidateProgrammatic(t *testing.T) {
	t.Run("zero config reports, never panics", func(t *testing.T) {
		var c Config
		got := errorStrings(t, c.Validate())
		for _, want := range []string{
			`listen: want host:port such as ":8080" or "127.0.0.1:9090", got ""`,
			`upstream.url: required, such as "http://127.0.0.1:9000"`,
			`routes: at least one route is required`,
			`limiter.key_secret_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got ""`,
		} {
			if !slices.Contains(got, want) {
				t.Errorf("missing %q in\n%s", want, strings.Join(got, "\n"))
			}
		}
	})
	t.Run("values UnmarshalText would refuse", func(t *testing.T) {
		c := Default()
		c.Routes[0].Match = Match{Method: "GET", Path: "*"}
		c.Routes[1].Match = Match{Method: "FETCH", Path: "/x/"}
		c.Routes[4].Match = Match{Path: "x"}
		c.Routes[3].Limits[0].Rate = Rate{N: 1, Period: time.Millisecond}
		c.Routes[3].Timeout = -time.Second
		c.ClientIP.TrustedProxies = []Prefix{{}}
		c.Tiers = map[string]map[string]TierLimit{"vip": {"place_order": {}}}
		c.TokensFile = "tokens.yaml"
		got := errorStrings(t, c.Validate())
		want := []string{
			`client_ip.trusted_proxies[0]: not a valid IP prefix`,
			`routes[0].match: the default route "*" takes no method`,
			`routes[0].validate: "order" needs a POST route, but the route matches "GET *"`,
			`routes[1].match: unknown method "FETCH"`,
			`routes[1].validate: "order_bulk" needs a POST route (or a DELETE route, which only cancels), but the route matches "FETCH /x/"`,
			`routes[3].timeout: must not be negative (0 means upstream.timeout), got -1s`,
			`routes[3].limits[0].rate: period must be whole seconds from 1s to 366d, got 1ms`,
			`routes[4].match: path "x": must start with /`,
			`routes[19].match: only one default route "*" is allowed; routes[0] is one`,
			`tiers.vip.place_order.rate: required, such as 60/1m`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})
	t.Run("admin listener", func(t *testing.T) {
		c := Default()
		c.Admin.TokenEnv = "exgate-admin-token"
		c.Admin.AllowedHosts = []string{"admin.example.test", "https://admin.example.test", "admin.example.test:9090", "10.0.0.7", "-bad.example", "exgate_admin.internal."}
		c.Admin.MaxConnections = 0
		c.Replica = "exgate 1"
		got := errorStrings(t, c.Validate())
		want := []string{
			`replica: want 1 to 253 letters, digits and . _ : - (such as "exgate-1"), got "exgate 1"`,
			`admin.token_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "exgate-admin-token"`,
			`admin.max_connections: must be at least 1, got 0`,
			`admin.allowed_hosts[1]: want a host name such as "exgate-admin.internal" (no scheme, port or path), got "https://admin.example.test"`,
			`admin.allowed_hosts[2]: want a host name such as "exgate-admin.internal" (no scheme, port or path), got "admin.example.test:9090"`,
			`admin.allowed_hosts[4]: want a host name such as "exgate-admin.internal" (no scheme, port or path), got "-bad.example"`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})
	t.Run("normalises", func(t *testing.T) {
		c := Default()
		def := slices.IndexFunc(c.Routes, func(r Route) bool { return r.Match.IsDefault() })
		c.Routes[def].Auth = ""
		c.Routes[def].Limits[0].When = ""
		c.Routes[def].Limits[0].Burst = 0
		c.Tiers = map[string]map[string]TierLimit{"vip": {"place_order": {Rate: Rate{N: 9, Period: time.Hour}}}}
		c.TokensFile = "tokens.yaml"
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		l := c.Routes[def].Limits[0]
		if c.Routes[def].Auth != AuthNone || l.When != WhenAlways || l.Burst != 600 || c.Tiers["vip"]["place_order"].Burst != 9 {
			t.Errorf("not normalised: %+v %+v", c.Routes[def], c.Tiers)
		}
	})
}

// TestValidateRefusalShare checks log.refusals_per_client's bounds: each
// client's share of the access log's refusal lines.
func TestValidateRefusalShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share RefusalShare
		want  []string
	}{
		{"the default", DefaultLog().RefusalsPerClient, nil},
		{"off", RefusalShare{}, nil},
		{"burst 0: the rate's N", RefusalShare{Rate: Rate{N: 5, Period: time.Second}}, nil},
		{"a negative burst", RefusalShare{Rate: Rate{N: 5, Period: time.Second}, Burst: -1},
			[]string{`log.refusals_per_client.burst: must not be negative (0: the rate's N), got -1`}},
		{"a period under a second", RefusalShare{Rate: Rate{N: 5, Period: time.Millisecond}, Burst: 10},
			[]string{`log.refusals_per_client.rate: period must be whole seconds from 1s to 366d, got 1ms`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Log.RefusalsPerClient = tc.share
			if got := errorStrings(t, c.Validate()); !slices.Equal(got, tc.want) {
				t.Errorf("problems %q, want %q", got, tc.want)
			}
		})
	}
}
