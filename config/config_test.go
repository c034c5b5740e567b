package config

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
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
		{"cancel_order", "DELETE /api/v1/odr/orders/{id}/", "required", "", []limit{{"token", "always", "16200/1h"}}},
		{"list_orders", "GET /api/v1/odr/orders/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"get_orders", "GET /api/v1/odr/orders/{ids}/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"list_fills", "GET /api/v1/odr/fills/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"orders_other", "/api/v1/odr/{rest...}", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"list_wallets", "GET /api/v1/wlt/wallets/", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"wallets_other", "/api/v1/wlt/{rest...}", "required", "", []limit{{"token", "always", "600/1m"}}},
		{"list_tickers", "GET /api/v1/mkt/tickers/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"order_book", "GET /api/v1/mth/orderbook/{symbol}/", "optional", "", []limit{{"address", "anonymous", "10000/24h"}, {"token", "token", "200/1m"}}},
		{"authenticate", "POST /api/v1/usr/authenticate/", "none", "", []limit{{"address", "always", "20/1m"}, {"address", "always", "100/1h"}}},
		{"refresh_token", "POST /api/v1/usr/refresh_token/", "none", "", []limit{{"address", "always", "60/1m"}}},
	}
	want = append(want[:1], append(family[:8], append(want[1:3], append(family[8:10], append(want[3:4], append(family[10:], want[4])...)...)...)...)...)
	c := Default()
	if len(c.Routes) != len(want) {
		t.Fatalf("Default() has %d routes, want %d", len(c.Routes), len(want))
	}
	for i, w := range want {
		r := c.Routes[i]
		t.Run(w.name, func(t *testing.T) {
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

func TestLoadWithoutFileIsDefault(t *testing.T) {
	for _, getenv := range []func(string) (string, bool){nil, env(nil)} {
		c, err := Load("", getenv)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Load(\"\") differs from Default()")
		}
	}
}

// defaultRoutesNamed returns the named routes of the default table, in
// the order named.
func defaultRoutesNamed(names ...string) []Route {
	var out []Route
	for _, n := range names {
		for _, r := range DefaultRoutes() {
			if r.Name == n {
				out = append(out, r)
			}
		}
	}
	return out
}

// fullConfig is what testdata/full.yaml must load as.
func fullConfig() *Config {
	c := Default()
	c.ClientIP.TrustedProxies = []Prefix{
		{netip.MustParsePrefix("10.0.0.0/8")},
		{netip.MustParsePrefix("192.168.1.7/32")},
		{netip.MustParsePrefix("fd00::/8")},
	}
	c.Limiter.Backend = BackendRedis
	c.Limiter.Replicas = 3
	c.Limiter.Redis.Addrs = []string{"127.0.0.1:6379"}
	c.Limiter.Redis.Username = "exgate"
	c.Tiers = map[string]map[string]TierLimit{"vip": {
		"place_order":  {Rate: Rate{N: 20000, Period: time.Hour}, Burst: 20000},
		"list_markets": {Rate: Rate{N: 1000, Period: time.Minute}, Burst: 100},
	}}
	c.TokensFile = "tiers.yaml"
	c.Routes = defaultRoutesNamed("place_order", "list_markets", "list_currencies", "list_matches", "default")
	c.Routes[0].Timeout = 5 * time.Second
	c.Routes[3].Limits[0].Burst = 10
	c.Routes[3].Limits[0].Shadow = true
	return c
}

func TestValidFixtures(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, c *Config)
	}{
		{"full.yaml", func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c, fullConfig()) {
				t.Errorf("full.yaml loaded as\n%+v\nwant\n%+v", c, fullConfig())
			}
		}},
		{"design-sketch.yaml", func(t *testing.T, c *Config) {
			// The sketch gives the spec's limits table but no auth for the
			// list routes, so only limits and matches are compared.
			d := defaultRoutesNamed("place_order", "list_markets", "list_currencies", "list_matches", "default")
			if len(c.Routes) != len(d) {
				t.Fatalf("%d routes, want %d", len(c.Routes), len(d))
			}
			for i := range d {
				if c.Routes[i].Name != d[i].Name || c.Routes[i].Match != d[i].Match || !reflect.DeepEqual(c.Routes[i].Limits, d[i].Limits) {
					t.Errorf("routes[%d] = %+v, want the default %+v", i, c.Routes[i], d[i])
				}
			}
			if c.Limiter.Backend != BackendRedis || c.Tiers["vip"]["place_order"].Rate.String() != "20000/1h" || c.TokensFile != "tiers.yaml" {
				t.Errorf("limiter = %+v, tiers = %v", c.Limiter, c.Tiers)
			}
		}},
		{"minimal.yaml", func(t *testing.T, c *Config) {
			want := Default()
			want.Upstream.URL = MustURL("http://backend:9000/")
			if !reflect.DeepEqual(c, want) {
				t.Errorf("minimal.yaml must change only upstream.url")
			}
		}},
		{"empty.yaml", func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("empty file must give Default()")
			}
		}},
		{"comments.yaml", func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("comment-only file must give Default()")
			}
		}},
		{"null-sections.yaml", func(t *testing.T, c *Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("null sections must leave Default() alone")
			}
		}},
		{"anchors.yaml", func(t *testing.T, c *Config) {
			if len(c.Routes) != 3 {
				t.Fatalf("routes = %d, want 3 (a sequence replaces the defaults)", len(c.Routes))
			}
			if !reflect.DeepEqual(c.Routes[0].Limits, c.Routes[1].Limits) {
				t.Errorf("aliased limits differ: %+v vs %+v", c.Routes[0].Limits, c.Routes[1].Limits)
			}
			want := Limit{Name: KeyAddress, Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 600, Period: time.Minute}, Burst: 600}
			if got := c.Routes[2].Limits[0]; got != want {
				t.Errorf("merged limit = %+v, want %+v", got, want)
			}
			if c.Routes[2].Auth != AuthNone {
				t.Errorf("auth of new route = %q, want normalised to none", c.Routes[2].Auth)
			}
		}},
		{"memory.yaml", func(t *testing.T, c *Config) {
			if c.Limiter.Backend != BackendMemory || c.Limiter.OnStoreError != StoreOpen {
				t.Errorf("limiter = %+v", c.Limiter)
			}
			r := c.Routes[1]
			if r.Match.Method != "" || r.Match.Path != "/api/v1/mkt/orderbook/{symbol}/" || r.Timeout != 2*time.Second {
				t.Errorf("order_book route = %+v", r)
			}
			if l := r.Limits[0]; l.Rate != (Rate{N: 2, Period: 24 * time.Hour}) || l.When != WhenAlways || l.Burst != 2 {
				t.Errorf("order_book limit = %+v", l)
			}
			if c.Server.ReadTimeout != 30*time.Second {
				t.Errorf("unset server keys must keep defaults")
			}
		}},
	}
	checked := map[string]bool{}
	for _, tt := range tests {
		checked[tt.file] = true
	}
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		if base := filepath.Base(f); !strings.HasPrefix(base, "bad-") && !checked[base] {
			t.Errorf("%s is not checked by TestValidFixtures", f)
		}
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", tt.file), nil)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c)
		})
	}
}

// invalidFixtures lists, for every testdata/bad-*.yaml, exactly the
// problems it must produce, in order.
var invalidFixtures = map[string][]string{
	"bad-method.yaml": {
		`routes[1].match: unknown method "GTE" (line 7)`,
	},
	"bad-unknown-keys.yaml": {
		`listn: unknown key "listn"; did you mean "listen"? (line 1)`,
		`upstream.ulr: unknown key "ulr"; did you mean "url"? (line 3)`,
		`frobnicate: unknown key "frobnicate" (line 5)`,
		`routes[0].limts: unknown key "limts"; did you mean "limits"? (line 9)`,
	},
	"bad-removed-transport.yaml": {
		`upstream.transport: removed: exgate always forwards through Go's net/http Transport (its own HTTP/1.1 client is gone, it could hand a client a response a backend sent unasked on a keep-alive connection); remove this key (line 3)`,
	},
	"bad-types.yaml": {
		`listen: want a string, got a sequence (line 1)`,
		`server: want a mapping, got the integer 5 (line 2)`,
		`upstream.max_idle_conns: want an integer, got the string "512" (line 4)`,
		`upstream.timeout: want a duration such as 10s, 250ms or 1m30s, got "10" (line 5)`,
		`limiter.replicas: want an integer, got the number 2.5 (line 7)`,
		`limiter.redis.tls: want a boolean (true or false), got the string "yes" (line 9)`,
		`limiter.redis.addrs: want a sequence, got the string "127.0.0.1:6379" (line 10)`,
		`limiter.redis.db: integer 99999999999999999999 is out of range (line 11)`,
		`log.access: want a boolean (true or false), got the string "true" (line 13)`,
		`routes: want a sequence, got a mapping (line 14)`,
	},
	"bad-many.yaml": {
		`routes[0].limits[0].rate: rate "5400/1hr": period "1hr": want a duration such as 1s, 1m, 1h, 24h or 1d (line 16)`,
		`listen: port "80800" must be a number from 0 to 65535 (line 2)`,
		`server.max_header_bytes: must be from 1KiB to 1MiB, got 100 (line 5)`,
		`limiter.redis.addrs: required when limiter.backend is "redis" (line 6)`,
		`limiter.on_store_error: want "open", "closed" or "local", got "fail" (line 8)`,
		`log.level: want "debug", "info", "warn" or "error", got "verbose" (line 10)`,
		`routes[0].name: "Place Order" must be lower-case letters, digits and _ (line 12)`,
		`routes[0].auth: want "none", "optional" or "required", got "requird"; did you mean "required"? (line 14)`,
	},
	"bad-routes.yaml": {
		`routes[0].validate: "order" needs a POST route, but the route matches "GET /api/v1/odr/orders/" (line 4)`,
		`routes[0].limits[0].key: want "token", "account" or "address", got "ip" (line 6)`,
		`routes[0].limits[1].when: a token limit cannot apply to anonymous requests (line 7)`,
		`routes[0].limits[2].when: want "always", "token" or "anonymous", got "never" (line 8)`,
		`routes[0].limits[2].rate: required, such as 60/1m (line 8)`,
		`routes[0].limits[2].burst: must be from 0 to 1099511627776 (0 means the rate's N), got -1 (line 8)`,
		`routes[1].name: "place_order" is already the name of routes[0] (line 9)`,
		`routes[1].match: "GET /api/v1/odr/orders/" matches the same requests as routes[0] ("GET /api/v1/odr/orders/") (line 10)`,
		`routes[3].match: "GET /api/v1/mth/matches/{market}/" matches the same requests as routes[2] ("GET /api/v1/mth/matches/{symbol}/") (line 14)`,
		`routes[4].name: required (line 15)`,
		`routes[5].match: only one default route "*" is allowed; routes[4] is one (line 17)`,
		`routes[5].validate: want "", "order" or "order_bulk", got "schema" (line 18)`,
		`routes[6].match: required, such as "GET /api/v1/mkt/markets/" or "*" (line 19)`,
		`routes[0].auth: duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection) (line 2)`,
	},
	"bad-tiers.yaml": {
		`tiers.gold: want a mapping, got a sequence (line 8)`,
		`tiers.VIP: tier name "VIP" must be lower-case letters, digits and _ (line 6)`,
		`tiers.vip.list_markets.rate: required, such as 60/1m (line 5)`,
		`tiers.vip.list_matches: route "list_matches" has no token or account limit for a tier to override (line 4)`,
		`tiers.vip.place_ordr: no such route; did you mean "place_order"? (line 3)`,
	},
	"bad-limiter.yaml": {
		`client_ip.trusted_proxies[0]: prefix "10.0.0.0/33": not a CIDR prefix (line 2)`,
		`client_ip.trusted_proxies[1]: prefix "fe80::1%eth0": an address with a zone cannot be a prefix (line 2)`,
		`client_ip.ipv6_prefix: must be from 1 to 128, got 129 (line 3)`,
		`limiter.redis.addrs: required when limiter.backend is "redis" (line 8)`,
		`limiter.replicas: must be at least 1, got 0 (line 6)`,
		`limiter.key_secret_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "exgate-key" (line 7)`,
		`limiter.redis.password_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "1PASSWORD" (line 9)`,
		`limiter.redis.timeout: must be greater than 0 and at most 1s, got 2s (line 10)`,
	},
	"bad-redis.yaml": {
		`limiter.backend: want "", "redis" or "memory", got "redsi"; did you mean "redis"? (line 2)`,
		`limiter.redis.addrs[1]: want host:port such as "127.0.0.1:6379", got "redis-b" (line 4)`,
		`limiter.redis.addrs[2]: want host:port such as "127.0.0.1:6379", got ":6379" (line 4)`,
		`limiter.redis.addrs[3]: port "0" must be a number from 1 to 65535 (line 4)`,
		`limiter.redis.timeout: must be greater than 0 and at most 1s, got 0s (line 6)`,
		`limiter.redis.db: must be 0 with Redis Cluster (several addrs and no master_name), got 3 (line 5)`,
	},
	"bad-redis-tls.yaml": {
		`limiter.redis.tls_ca_file: requires limiter.redis.tls: true (line 4)`,
		`limiter.redis.tls_key_file: requires limiter.redis.tls: true (line 5)`,
		`limiter.redis.tls_cert_file: required with limiter.redis.tls_key_file (line 2)`,
	},
	"bad-server.yaml": {
		`server.idle_timeout: duration -5s must not be negative (line 6)`,
		`upstream.url: url "ftp://backend/": scheme must be http or https (line 10)`,
		`listen: want host:port such as ":8080" or "127.0.0.1:9090", got "localhost" (line 1)`,
		`server.read_header_timeout: must be greater than 0, got 0s (line 4)`,
		`server.max_header_bytes: must be from 1KiB to 1MiB, got 2MiB (line 7)`,
		`server.max_body_bytes: must be at least 1, got 0 (line 8)`,
		`upstream.dial_timeout: must be greater than 0, got 0s (line 11)`,
		`upstream.max_idle_conns: must not be negative, got -1 (line 12)`,
		`upstream.max_conns_per_host: must not be negative (0 means no cap), got -2 (line 13)`,
		// Problems between sections come after each section's own.
		`server.write_timeout: 10s must exceed upstream.timeout (10s), the timeout of routes[0] ("place_order"), routes[1] ("bulk_orders"), routes[2] ("cancel_order") and 14 more (line 5)`,
	},
	"bad-write-timeout.yaml": {
		`admin_listen: must differ from listen (":8080") (line 2)`,
		`server.write_timeout: 10s must exceed routes[0].timeout (15s, route "slow") (line 4)`,
		`server.write_timeout: 10s must exceed upstream.timeout (10s), the timeout of routes[1] ("default") (line 4)`,
	},
	"bad-rates.yaml": {
		`routes[0].limits[0].rate: rate "5400/1hr": period "1hr": want a duration such as 1s, 1m, 1h, 24h or 1d (line 5)`,
		`routes[0].limits[1].rate: rate "0/1m": N must be a whole number from 1 to 1099511627776 (line 6)`,
		`routes[0].limits[2].rate: rate "60": want N/period, such as 60/1m (line 7)`,
		`routes[0].limits[3].rate: rate "1/500ms": period "500ms": must be at least 1s (line 8)`,
		`routes[0].limits[4].rate: rate "1/400d": period "400d": days must be 1 to 366 (line 9)`,
		`routes[0].limits[5].rate: want a rate (N/period), got a sequence (line 10)`,
		`routes[0].limits[6].rate: required, such as 60/1m (line 11)`,
	},
	"bad-upstream.yaml": {
		`upstream.url: url "https://user:xxxxx@backend:9000/api": credentials do not belong in the URL (line 2)`,
		`upstream.timeout: duration -1s must not be negative (line 3)`,
		`upstream.idle_conn_timeout: want a duration such as 10s, 250ms or 1m30s, got "soon" (line 4)`,
	},
	"bad-syntax.yaml": {
		`testdata/bad-syntax.yaml: invalid YAML: did not find expected ',' or ']' (line 3)`,
	},
	"bad-multidoc.yaml": {
		`testdata/bad-multidoc.yaml: more than one YAML document; a configuration is one document (line 2)`,
	},
	"bad-duplicate-key.yaml": {
		`listen: key "listen" given twice (first on line 1) (line 5)`,
		`log.level: key "level" given twice (first on line 3) (line 4)`,
	},
	"bad-empty-routes.yaml": {
		`routes: at least one route is required (line 1)`,
	},
	"bad-toplevel.yaml": {
		`testdata/bad-toplevel.yaml: want a mapping, got a sequence (line 1)`,
	},
	"bad-merge.yaml": {
		`server: merge key "<<" merges a mapping into itself (line 1)`,
	},
}

func TestInvalidFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/bad-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := invalidFixtures[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expected problems in invalidFixtures", f)
		}
	}
	for name, want := range invalidFixtures {
		t.Run(name, func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", name), nil)
			if c != nil {
				t.Errorf("Load returned a config along with errors")
			}
			got := errorStrings(t, err)
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

func TestManyIndependentErrorsReportedTogether(t *testing.T) {
	_, err := Load("testdata/bad-many.yaml", nil)
	if got := errorStrings(t, err); len(got) < 5 {
		t.Fatalf("got %d problems, want at least 5: %v", len(got), got)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path == "" || fe.Line == 0 {
		t.Errorf("errors.As(*FieldError) = %+v", fe)
	}
}

func TestParseRules(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		errs  []string                      // exact problems; nil means valid
		check func(t *testing.T, c *Config) // run when valid
	}{
		{name: "struct keys merge into defaults",
			yaml: "server:\n  read_timeout: 7s\n",
			check: func(t *testing.T, c *Config) {
				want := Default()
				want.Server.ReadTimeout = 7 * time.Second
				if !reflect.DeepEqual(c, want) {
					t.Errorf("only server.read_timeout may change")
				}
			}},
		{name: "routes replace the default table",
			yaml: "routes:\n  - {name: only, match: '*'}\n",
			check: func(t *testing.T, c *Config) {
				want := []Route{{Name: "only", Match: Match{Path: "*"}, Auth: AuthNone, Priority: PriorityMarketData}}
				if !reflect.DeepEqual(c.Routes, want) {
					t.Errorf("routes = %+v, want %+v", c.Routes, want)
				}
			}},
		{name: "null keeps the default",
			yaml: "listen: ~\nupstream:\n  url: null\nclient_ip: {trusted_proxies: }\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c, Default()) {
					t.Errorf("nulls must keep defaults")
				}
			}},
		{name: "empty sequence empties a list",
			yaml: "client_ip: {trusted_proxies: ['10.0.0.0/8']}\nlimiter: {redis: {addrs: []}}\n",
			check: func(t *testing.T, c *Config) {
				if c.Limiter.Redis.Addrs != nil || len(c.ClientIP.TrustedProxies) != 1 {
					t.Errorf("addrs = %#v, proxies = %v", c.Limiter.Redis.Addrs, c.ClientIP.TrustedProxies)
				}
			}},
		{name: "normalisation of new routes",
			yaml: "routes:\n  - {name: a, match: GET /a/, limits: [{key: address, rate: 5/1s}]}\n",
			check: func(t *testing.T, c *Config) {
				r := c.Routes[0]
				if r.Auth != AuthNone || r.Limits[0].When != WhenAlways || r.Limits[0].Burst != 5 {
					t.Errorf("route not normalised: %+v", r)
				}
			}},
		{name: "scalar types from YAML",
			yaml: "server: {max_header_bytes: 8192, max_body_bytes: 64KiB}\nlog: {access: False}\nupstream: {max_idle_conns: 0x10}\nlimiter: {redis: {db: 2}}\n",
			check: func(t *testing.T, c *Config) {
				if c.Server.MaxHeaderBytes != 8192 || c.Server.MaxBodyBytes != 64<<10 || c.Log.Access || c.Upstream.MaxIdleConns != 16 || c.Limiter.Redis.DB != 2 {
					t.Errorf("got %+v %+v %+v", c.Server, c.Log, c.Upstream)
				}
			}},
		{name: "tier entries merge into the map",
			yaml: "tokens_file: tokens.yaml\ntiers:\n  vip: {place_order: {rate: 1/1s}}\n  pro: {list_markets: {rate: 2/1s, burst: 1}}\n",
			check: func(t *testing.T, c *Config) {
				want := map[string]map[string]TierLimit{
					"vip": {"place_order": {Rate: Rate{N: 1, Period: time.Second}, Burst: 1}},
					"pro": {"list_markets": {Rate: Rate{N: 2, Period: time.Second}, Burst: 1}},
				}
				if !reflect.DeepEqual(c.Tiers, want) {
					t.Errorf("tiers = %+v", c.Tiers)
				}
			}},
		{name: "alias cycle in a sequence",
			yaml: "routes: &r [*r]\n",
			errs: []string{"routes[0]: want a mapping, got a sequence (line 1)"}},
		{name: "merge keys: explicit keys win",
			yaml: "server: {<<: [{read_timeout: 1s}, {read_timeout: 2s, idle_timeout: 3s}], idle_timeout: 4s}\n",
			check: func(t *testing.T, c *Config) {
				if c.Server.ReadTimeout != time.Second || c.Server.IdleTimeout != 4*time.Second {
					t.Errorf("server = %+v", c.Server)
				}
			}},
		{name: "merge of a scalar",
			yaml: "server: {<<: 5}\n",
			errs: []string{`server: merge key "<<" wants a mapping or a sequence of mappings, got the integer 5 (line 1)`}},
		{name: "non-scalar mapping key",
			yaml: "? [a]\n: 1\n",
			errs: []string{`test.yaml: mapping keys must be plain strings, got a sequence (line 1)`}},
		{name: "odd key characters are quoted in paths",
			yaml: "tiers: {\"a.b\": {\"x y\": {rate: 1/1s}}}\ntokens_file: t.yaml\n",
			errs: []string{
				`tiers["a.b"]: tier name "a.b" must be lower-case letters, digits and _ (line 1)`,
				`tiers["a.b"]["x y"]: no such route (line 1)`,
			}},
		{name: "integer range",
			yaml: "upstream: {max_idle_conns: 9223372036854775808}\n",
			errs: []string{`upstream.max_idle_conns: integer 9223372036854775808 is out of range (line 1)`}},
		{name: "route name and pattern errors do not cascade",
			yaml: "routes:\n  - {name: a, match: 'GET /a/{x'}\n",
			errs: []string{`routes[0].match: path "/a/{x": parameter "{x" must be a whole segment {name} (or a last {name...}) of a-z, 0-9 and _ (line 2)`}},
		{name: "any-method and one-method routes may share a pattern",
			yaml: "routes:\n  - {name: a, match: '/a/{x}/'}\n  - {name: b, match: 'GET /a/{y}/'}\n  - {name: c, match: 'POST /a/{z}/'}\n"},
		{name: "validate order needs POST, not any method",
			yaml: "routes:\n  - {name: a, match: /a/, validate: order}\n",
			errs: []string{`routes[0].validate: "order" needs a POST route, but the route matches "/a/" (line 2)`,
				`routes[0].auth: duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection) (line 2)`}},
		{name: "listeners on different hosts may share a port",
			yaml: "listen: 10.0.0.1:8080\nadmin_listen: 127.0.0.1:8080\n"},
		{name: "wildcard listener conflicts",
			yaml: "listen: 0.0.0.0:9090\n",
			errs: []string{`admin_listen: must differ from listen ("0.0.0.0:9090")`}},
		{name: "port 0 never conflicts",
			yaml: "listen: :0\nadmin_listen: :0\n"},
		{name: "sentinel may use a db",
			yaml: "limiter: {redis: {addrs: [a:26379, b:26379], master_name: mymaster, db: 3}}\n"},
		{name: "redis backend is fine with addrs",
			yaml: "limiter: {backend: redis, redis: {addrs: ['[::1]:6379']}}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.yaml), nil)
			got := errorStrings(t, err)
			if !slices.Equal(got, tt.errs) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.errs, "\n  "))
			}
			if err == nil && tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestTooManyProblemsAreSummarised(t *testing.T) {
	_, err := Parse("test.yaml", []byte("routes:\n"+strings.Repeat("  - {name: X}\n", 120)), nil)
	got := errorStrings(t, err)
	if len(got) != maxErrors+1 || got[maxErrors] != "140 more problems not shown" {
		t.Errorf("got %d problems, last %q", len(got), got[len(got)-1])
	}
}

func TestLoadFileProblems(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{filepath.Join(dir, "missing.yaml"), "no such file or directory"},
		{big, "big.yaml: larger than 1048576 bytes"},
		{dir, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			_, err := Load(tt.path, nil)
			got := errorStrings(t, err)
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Errorf("problems = %q, want one containing %q", got, tt.want)
			}
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		errs  []string
		check func(t *testing.T, c *Config)
	}{
		{name: "strings", env: map[string]string{"EXGATE_LISTEN": ":9000", "EXGATE_ADMIN_LISTEN": "127.0.0.1:9001", "EXGATE_TOKENS_FILE": "/etc/exgate/tokens.yaml", "EXGATE_LOG_LEVEL": "debug"},
			check: func(t *testing.T, c *Config) {
				if c.Listen != ":9000" || c.AdminListen != "127.0.0.1:9001" || c.TokensFile != "/etc/exgate/tokens.yaml" || c.Log.Level != "debug" {
					t.Errorf("got %q %q %q %q", c.Listen, c.AdminListen, c.TokensFile, c.Log.Level)
				}
			}},
		{name: "url", env: map[string]string{"EXGATE_UPSTREAM_URL": "https://backend.internal:8443/base"},
			check: func(t *testing.T, c *Config) {
				if c.Upstream.URL.String() != "https://backend.internal:8443/base" {
					t.Errorf("url = %s", c.Upstream.URL)
				}
			}},
		{name: "durations", env: map[string]string{"EXGATE_UPSTREAM_TIMEOUT": "3s", "EXGATE_SERVER_WRITE_TIMEOUT": "1m", "EXGATE_LIMITER_REDIS_TIMEOUT": "50ms"},
			check: func(t *testing.T, c *Config) {
				if c.Upstream.Timeout != 3*time.Second || c.Server.WriteTimeout != time.Minute || c.Limiter.Redis.Timeout != 50*time.Millisecond {
					t.Errorf("got %v %v %v", c.Upstream.Timeout, c.Server.WriteTimeout, c.Limiter.Redis.Timeout)
				}
			}},
		{name: "ints bools sizes", env: map[string]string{"EXGATE_LIMITER_REPLICAS": "4", "EXGATE_IDEMPOTENCY_ENABLED": "false", "EXGATE_LOG_ACCESS": "false", "EXGATE_LIMITER_REDIS_TLS": "1", "EXGATE_SERVER_MAX_BODY_BYTES": "64KiB", "EXGATE_CLIENT_IP_IPV6_PREFIX": " 48 "},
			check: func(t *testing.T, c *Config) {
				if c.Limiter.Replicas != 4 || c.Log.Access || !c.Limiter.Redis.TLS || c.Server.MaxBodyBytes != 64<<10 || c.ClientIP.IPv6Prefix != 48 {
					t.Errorf("got %d %v %v %v %d", c.Limiter.Replicas, c.Log.Access, c.Limiter.Redis.TLS, c.Server.MaxBodyBytes, c.ClientIP.IPv6Prefix)
				}
			}},
		{name: "comma lists", env: map[string]string{"EXGATE_LIMITER_BACKEND": "redis", "EXGATE_LIMITER_REDIS_ADDRS": "a:6379, b:6379,", "EXGATE_CLIENT_IP_TRUSTED_PROXIES": "10.0.0.0/8,127.0.0.1"},
			check: func(t *testing.T, c *Config) {
				if !slices.Equal(c.Limiter.Redis.Addrs, []string{"a:6379", "b:6379"}) || c.Limiter.Backend != BackendRedis {
					t.Errorf("addrs = %q", c.Limiter.Redis.Addrs)
				}
				if len(c.ClientIP.TrustedProxies) != 2 || c.ClientIP.TrustedProxies[1].String() != "127.0.0.1/32" {
					t.Errorf("trusted proxies = %v", c.ClientIP.TrustedProxies)
				}
			}},
		{name: "empty string is the empty list", yaml: "limiter: {redis: {addrs: [a:1]}}\n", env: map[string]string{"EXGATE_LIMITER_REDIS_ADDRS": ""},
			check: func(t *testing.T, c *Config) {
				if c.Limiter.Redis.Addrs != nil {
					t.Errorf("addrs = %#v, want nil", c.Limiter.Redis.Addrs)
				}
			}},
		{name: "routes by index", env: map[string]string{"EXGATE_ROUTES_0_TIMEOUT": "5s", "EXGATE_ROUTES_3_LIMITS_0_RATE": "120/1m", "EXGATE_ROUTES_3_LIMITS_0_BURST": "0", "EXGATE_ROUTES_3_AUTH": "required", "EXGATE_ROUTES_4_MATCH": "/api/"},
			check: func(t *testing.T, c *Config) {
				if c.Routes[0].Timeout != 5*time.Second || c.Routes[3].Auth != AuthRequired || c.Routes[4].Match.Path != "/api/" {
					t.Errorf("routes = %+v", c.Routes)
				}
				if l := c.Routes[3].Limits[0]; l.Rate.String() != "120/1m" || l.Burst != 120 {
					t.Errorf("list_matches limit = %+v", l)
				}
			}},
		{name: "tiers by key", yaml: "tiers: {vip: {place_order: {rate: 20000/1h}}}\ntokens_file: t.yaml\n",
			env: map[string]string{"EXGATE_TIERS_VIP_PLACE_ORDER_RATE": "1/1s", "EXGATE_TIERS_VIP_PLACE_ORDER_BURST": "7"},
			check: func(t *testing.T, c *Config) {
				if got := c.Tiers["vip"]["place_order"]; got != (TierLimit{Rate: Rate{N: 1, Period: time.Second}, Burst: 7}) {
					t.Errorf("tier = %+v", got)
				}
			}},
		{name: "environment beats the file", yaml: "listen: ':7000'\n", env: map[string]string{"EXGATE_LISTEN": ":7001"},
			check: func(t *testing.T, c *Config) {
				if c.Listen != ":7001" {
					t.Errorf("listen = %q", c.Listen)
				}
			}},
		{name: "unknown and unreachable variables are ignored",
			env: map[string]string{"EXGATE_NOPE": "1", "EXGATE_ROUTES_99_NAME": "x", "EXGATE_TIERS_GOLD_PLACE_ORDER_RATE": "bad", "EXGATE_KEY_SECRET": "s3cret", "EXGATE_SERVER": "x", "EXGATE_ROUTES": "x"},
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c, Default()) {
					t.Errorf("config changed")
				}
			}},
		{name: "bad values name the variable",
			env: map[string]string{
				"EXGATE_LIMITER_REPLICAS":          "three",
				"EXGATE_UPSTREAM_URL":              "ftp://backend",
				"EXGATE_LOG_ACCESS":                "maybe",
				"EXGATE_SERVER_READ_TIMEOUT":       "-1s",
				"EXGATE_CLIENT_IP_TRUSTED_PROXIES": "10.0.0.0/8, nope",
				"EXGATE_UPSTREAM_MAX_IDLE_CONNS":   "99999999999999999999",
				"EXGATE_ROUTES_0_LIMITS_0_RATE":    "fast",
				"EXGATE_LOG_LEVEL":                 "verbose",
				"EXGATE_ADMIN_LISTEN":              ":8080",
			},
			// In walk order: schema order, decoding before validation.
			errs: []string{
				`EXGATE_SERVER_READ_TIMEOUT (server.read_timeout): duration -1s must not be negative`,
				`EXGATE_UPSTREAM_URL (upstream.url): url "ftp://backend": scheme must be http or https`,
				`EXGATE_UPSTREAM_MAX_IDLE_CONNS (upstream.max_idle_conns): integer 99999999999999999999 is out of range`,
				`EXGATE_CLIENT_IP_TRUSTED_PROXIES (client_ip.trusted_proxies[1]): prefix "nope": not an IP address or CIDR prefix`,
				`EXGATE_LIMITER_REPLICAS (limiter.replicas): want an integer, got "three"`,
				`EXGATE_LOG_ACCESS (log.access): want a boolean (true or false), got "maybe"`,
				`EXGATE_ROUTES_0_LIMITS_0_RATE (routes[0].limits[0].rate): rate "fast": want N/period, such as 60/1m`,
				`EXGATE_ADMIN_LISTEN (admin_listen): must differ from listen (":8080")`,
				`EXGATE_LOG_LEVEL (log.level): want "debug", "info", "warn" or "error", got "verbose"`,
			}},
		{name: "a file value overridden by a bad variable is reported once, by the variable",
			yaml: "upstream:\n  url: http://ok:1\n", env: map[string]string{"EXGATE_UPSTREAM_URL": ""},
			errs: []string{`EXGATE_UPSTREAM_URL (upstream.url): required, such as "http://127.0.0.1:9000"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.yaml), env(tt.env))
			got := errorStrings(t, err)
			if !slices.Equal(got, tt.errs) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.errs, "\n  "))
			}
			if err == nil && tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestEnvErrorFields(t *testing.T) {
	_, err := Parse("", nil, env(map[string]string{"EXGATE_UPSTREAM_URL": "nope"}))
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	if fe.Env != "EXGATE_UPSTREAM_URL" || fe.Path != "upstream.url" || fe.Line != 0 {
		t.Errorf("FieldError = %+v", fe)
	}
}

func TestFieldErrorFormat(t *testing.T) {
	tests := []struct {
		e    FieldError
		want string
	}{
		{FieldError{Path: "routes[1].match", Msg: `unknown method "GTE"`}, `routes[1].match: unknown method "GTE"`},
		{FieldError{Path: "routes[1].match", Line: 7, Msg: `unknown method "GTE"`}, `routes[1].match: unknown method "GTE" (line 7)`},
		{FieldError{Path: "upstream.url", Env: "EXGATE_UPSTREAM_URL", Msg: "x"}, `EXGATE_UPSTREAM_URL (upstream.url): x`},
		{FieldError{Msg: "f.yaml: invalid YAML: x", Line: 3}, `f.yaml: invalid YAML: x (line 3)`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	es := Errors{&tests[0].e, &tests[1].e}
	if got := es.Error(); got != tests[0].want+"\n"+tests[1].want {
		t.Errorf("Errors.Error() = %q", got)
	}
}

func TestBulkRouteRules(t *testing.T) {
	tests := []struct {
		name string
		mut  func(c *Config)
		want []string
	}{
		{"defaults", func(c *Config) {}, nil},
		{"bulk settings elsewhere", func(c *Config) { c.Route("place_order").Bulk.Orders = "x" }, []string{`routes[0].bulk: only for a route with validate: order_bulk`}},
		{"unknown and missing routes", func(c *Config) { c.Route("bulk_orders").Bulk = BulkRoute{Orders: "nope"} }, []string{
			`routes[1].bulk.orders: no route named "nope"`,
			`routes[1].bulk.cancels: required: the route whose limits a bulk is charged against`}},
		{"itself, no token limit", func(c *Config) {
			c.Route("bulk_orders").Bulk = BulkRoute{Orders: "bulk_orders", Cancels: "list_matches"}
		}, []string{
			`routes[1].bulk.orders: route "bulk_orders" is a bulk route; name the route of single requests`,
			`routes[1].bulk.cancels: route "list_matches" has no token limit to charge`}},
		{"own limits, no token", func(c *Config) {
			b := c.Route("bulk_orders")
			b.Auth = AuthOptional
			b.Limits = []Limit{{Key: KeyAddress, Rate: Rate{N: 1, Period: time.Second}}}
		}, []string{
			`routes[1].auth: a order_bulk route must require a token, so that the token limits it is charged against apply`,
			`routes[1].limits: a order_bulk route has no limits of its own: it is charged against bulk.orders and bulk.cancels`}},
		{"max orders", func(c *Config) { c.Validation.Bulk.MaxOrders = 0 }, []string{`validation.bulk.max_orders: must be from 1 to 1000, got 0`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mut(c)
			var got []string
			if err := c.Validate(); err != nil {
				for _, e := range err.(Errors) {
					got = append(got, e.Error())
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
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
		c.Routes[2].Match = Match{Path: "x"}
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
			`routes[1].validate: "order_bulk" needs a POST route, but the route matches "FETCH /x/"`,
			`routes[2].match: path "x": must start with /`,
			`routes[3].timeout: must not be negative (0 means upstream.timeout), got -1s`,
			`routes[3].limits[0].rate: period must be whole seconds from 1s to 366d, got 1ms`,
			`routes[16].match: only one default route "*" is allowed; routes[0] is one`,
			`tiers.vip.place_order.rate: required, such as 60/1m`,
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

func TestMarshalRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	sources := map[string]*Config{"Default()": Default()}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "bad-") {
			continue
		}
		c, err := Load(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sources[f] = c
	}
	for name, c := range sources {
		t.Run(name, func(t *testing.T) {
			b, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			c2, err := Parse("marshalled", b, nil)
			if err != nil {
				t.Fatalf("Parse(Marshal()) = %v\n%s", err, b)
			}
			if !reflect.DeepEqual(c, c2) {
				t.Errorf("round trip differs:\n%s", b)
			}
		})
	}
	b, _ := Default().Marshal()
	for _, want := range []string{"listen: :8080\n", "rate: 5400/1h", "match: '*'", "trusted_proxies: []"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Marshal(Default()) lacks %q:\n%s", want, b)
		}
	}
}

func TestCheckFile(t *testing.T) {
	tests := []struct {
		path string
		env  map[string]string
		ok   bool
		out  string
	}{
		{"testdata/full.yaml", nil, true, "ok\n"},
		{"", nil, true, "ok\n"},
		{"testdata/bad-method.yaml", nil, false, "routes[1].match: unknown method \"GTE\" (line 7)\n"},
		{"testdata/bad-write-timeout.yaml", nil, false, strings.Join(invalidFixtures["bad-write-timeout.yaml"], "\n") + "\n"},
		{"testdata/bad-removed-transport.yaml", nil, false, invalidFixtures["bad-removed-transport.yaml"][0] + "\n"},
		{"testdata/minimal.yaml", map[string]string{"EXGATE_UPSTREAM_TRANSPORT": "standard"}, false,
			"EXGATE_UPSTREAM_TRANSPORT (upstream.transport): removed: exgate always forwards through Go's net/http Transport (its own HTTP/1.1 client is gone, it could hand a client a response a backend sent unasked on a keep-alive connection); remove this key\n"},
		{"testdata/minimal.yaml", map[string]string{"EXGATE_LOG_LEVEL": "loud"}, false,
			"EXGATE_LOG_LEVEL (log.level): want \"debug\", \"info\", \"warn\" or \"error\", got \"loud\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var b strings.Builder
			if ok := CheckFile(tt.path, env(tt.env), &b); ok != tt.ok || b.String() != tt.out {
				t.Errorf("CheckFile = %v, output:\n%s\nwant %v, output:\n%s", ok, b.String(), tt.ok, tt.out)
			}
		})
	}
}

// TestSyntaxErrorLines checks the 1-based lines given for YAML syntax
// errors (yaml.v3's own numbers are 0-based for parser problems).
func TestSyntaxErrorLines(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"a: 1\n b: 2\n", "mapping values are not allowed in this context (line 2)"},
		{"- a\nb: 1\n", "did not find expected '-' indicator (line 2)"},
		{"x:\n  - a\n - b\n", "did not find expected key (line 3)"},
		{"a: b: c\n", "mapping values are not allowed in this context (line 1)"},
		{"a: !x!y 1\n", "found undefined tag handle (line 1)"},
		{"a: 1\nb: \xff\n", "invalid leading UTF-8 octet"},
	}
	for _, tt := range tests {
		_, err := Parse("f.yaml", []byte(tt.yaml), nil)
		got := errorStrings(t, err)
		if want := "f.yaml: invalid YAML: " + tt.want; len(got) != 1 || got[0] != want {
			t.Errorf("Parse(%q) = %q, want %q", tt.yaml, got, want)
		}
	}
}

// TestDefaultLimitNames checks the names docs/configuration.md promises
// for limits written without one.
func TestDefaultLimitNames(t *testing.T) {
	tests := []struct {
		limits string
		want   []string
	}{
		{"[{key: address, rate: 1/1s}]", []string{"address"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: token, when: token, rate: 1/1s}]", []string{"address", "token"}},
		{"[{key: address, when: anonymous, rate: 1/1s}, {key: address, rate: 1/1m}]", []string{"address_anonymous", "address_always"}},
		{"[{key: address, rate: 1/1s}, {key: address, rate: 1/1m}, {key: address, when: token, rate: 1/1h}]", []string{"address_always_0", "address_always_1", "address_token"}},
	}
	for _, tt := range tests {
		t.Run(tt.limits, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte("routes:\n  - {name: a, match: /a/, auth: optional, limits: "+tt.limits+"}\n"), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range c.Routes[0].Limits {
				got = append(got, l.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("names %q, want %q", got, tt.want)
			}
		})
	}
}
