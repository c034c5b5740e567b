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
	c.Limiter.Store = StoreRedis
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
			if c.Limiter.Store != StoreRedis || c.Tiers["vip"]["place_order"].Rate.String() != "20000/1h" || c.TokensFile != "tiers.yaml" {
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
			if c.Limiter.Store != StoreMemory || c.Limiter.OnStoreError != StoreOpen {
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
		`limiter.redis.addrs: required when limiter.store is "redis" (line 6)`,
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
		`routes[5].validate: want "", "order", "order_bulk" or "order_ids", got "schema" (line 18)`,
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
		`limiter.redis.addrs: required when limiter.store is "redis" (line 8)`,
		`limiter.replicas: must be at least 1, got 0 (line 6)`,
		`limiter.key_secret_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "exgate-key" (line 7)`,
		`limiter.redis.password_env: want an environment variable name ([A-Z_][A-Z0-9_]*), got "1PASSWORD" (line 9)`,
		`limiter.redis.timeout: must be greater than 0 and at most 1s, got 2s (line 10)`,
	},
	"bad-redis.yaml": {
		`limiter.store: want "", "redis" or "memory", got "redsi"; did you mean "redis"? (line 2)`,
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
		`server.write_timeout: 10s must exceed upstream.timeout (10s), the timeout of routes[0] ("place_order"), routes[1] ("bulk_orders"), routes[2] ("bulk_cancel") and 15 more (line 5)`,
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
	testInvalidFixtures(t, "testdata", invalidFixtures)
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

// parseRuleCase is a configuration file and the problems Parse reports, or a
// check of the configuration it returns.
type parseRuleCase struct {
	name  string
	yaml  string
	errs  []string                      // exact problems; nil means valid
	check func(t *testing.T, c *Config) // run when valid
}

// parseRuleCases is TestParseRules's table.
var parseRuleCases = []parseRuleCase{
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
	{name: "one-method routes may share a pattern with an any-method route after them",
		yaml: "routes:\n  - {name: b, match: 'GET /a/{y}/'}\n  - {name: c, match: 'POST /a/{z}/'}\n  - {name: a, match: '/a/{x}/'}\n"},
	{name: "a route an earlier one covers is never matched",
		yaml: "routes:\n  - {name: a, match: '/a/{x}/'}\n  - {name: b, match: 'GET /a/{y}/'}\n  - {name: odr, match: '/api/v1/odr/{rest...}'}\n  - {name: place, match: 'POST /API/v1/odr/orders/'}\n  - {name: one, match: 'GET /api/v1/odr/orders/{id}/'}\n",
		errs: []string{
			`routes[1].match: "GET /a/{y}/" is never matched: routes[0] ("/a/{x}/") comes first and matches every request it would (routes are tried in order); move this route above it, or remove it (line 3)`,
			`routes[3].match: "POST /API/v1/odr/orders/" is never matched: routes[2] ("/api/v1/odr/{rest...}") comes first and matches every request it would (routes are tried in order); move this route above it, or remove it (line 5)`,
			`routes[4].match: "GET /api/v1/odr/orders/{id}/" is never matched: routes[2] ("/api/v1/odr/{rest...}") comes first and matches every request it would (routes are tried in order); move this route above it, or remove it (line 6)`,
		}},
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
	{name: "redis store is fine with addrs",
		yaml: "limiter: {store: redis, redis: {addrs: ['[::1]:6379']}}\n"},
}

func TestParseRules(t *testing.T) {
	for _, tt := range parseRuleCases {
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

func TestCheckFile(t *testing.T) {
	tests := []struct {
		path string
		env  map[string]string
		ok   bool
		out  string
	}{
		{"testdata/full.yaml", nil, true, "warning: client_ip.trusted_proxies[0]: 10.0.0.0/8 trusts 16777216 addresses: any host in it can send an X-Forwarded-For naming any address, and is limited and logged as that address; narrow it to your proxies' addresses (line 25)\n" +
			"warning: client_ip.trusted_proxies[2]: fd00::/8 trusts 2^120 addresses: any host in it can send an X-Forwarded-For naming any address, and is limited and logged as that address; narrow it to your proxies' addresses (line 25)\nok\n"},
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
			if ok := CheckFile(tt.path, env(tt.env)).Report(&b); ok != tt.ok || b.String() != tt.out {
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

// TestCheckWarnsOfWideTrust: a trusted proxy or PROXY protocol peer
// prefix of every address, or wider than a /16 (IPv4) or a /48 (IPv6),
// is a warning (valid, but any host in it can choose the client address
// it is counted as); a problem elsewhere does not hide it.
func TestCheckWarnsOfWideTrust(t *testing.T) {
	tests := []struct {
		yaml string
		want []string
	}{
		{"client_ip: { trusted_proxies: [0.0.0.0/0] }", []string{"client_ip.trusted_proxies[0]: 0.0.0.0/0 trusts every address: any client can send an X-Forwarded-For naming any address"}},
		{"client_ip: { trusted_proxies: [\"::/0\"], header: forwarded }", []string{"client_ip.trusted_proxies[0]: ::/0 trusts every address: any client can send a Forwarded header naming any address"}},
		{"client_ip: { trusted_proxies: [10.0.0.0/8, 10.1.0.0/16, 192.0.2.7] }", []string{"client_ip.trusted_proxies[0]: 10.0.0.0/8 trusts 16777216 addresses: any host in it can send an X-Forwarded-For"}},
		{"client_ip: { trusted_proxies: [\"2001:db8::/32\", \"2001:db8:1::/48\"] }", []string{"client_ip.trusted_proxies[0]: 2001:db8::/32 trusts 2^96 addresses"}},
		{"server: { proxy_protocol: { trusted_peers: [10.0.0.0/8] } }", []string{"server.proxy_protocol.trusted_peers[0]: 10.0.0.0/8 trusts 16777216 addresses: any host in it can send a PROXY protocol header naming any address, and is limited and logged as that address; narrow it to your load balancers' addresses (line 1)"}},
		{"server: { proxy_protocol: { trusted_peers: [10.20.0.0/16] } }", nil},
		{"listen: [1]\nclient_ip: { trusted_proxies: [0.0.0.0/0] }", []string{"client_ip.trusted_proxies[0]: 0.0.0.0/0 trusts every address"}},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			ch := Check("f.yaml", []byte(tt.yaml), nil)
			got := ch.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i].Error(), w) {
					t.Errorf("warning %q, want it to begin %q", got[i].Error(), w)
				}
			}
		})
	}
}

// TestFormerStoreName: limiter.backend and idempotency.backend, the
// former names of the sections' store, are read still, from the file or
// the environment, with a warning; one that names a store other than
// store's is refused.
func TestFormerStoreName(t *testing.T) {
	for _, tc := range []struct {
		name, yaml             string
		env                    map[string]string
		limiter, idem, problem string
		warnings               []string
	}{
		{"store", "limiter: {store: memory}\nidempotency: {store: memory}", nil, "memory", "memory", "", nil},
		{"former names in the file", "limiter: {backend: memory}\nidempotency: {backend: memory}", nil, "memory", "memory", "",
			[]string{"limiter.backend: is the former name of limiter.store, read still: rename it (line 1)",
				"idempotency.backend: is the former name of idempotency.store, read still: rename it (line 2)"}},
		{"former name in the environment", "limiter: {redis: {addrs: ['r:6379']}}", map[string]string{"EXGATE_LIMITER_BACKEND": "redis"}, "redis", "", "",
			[]string{"EXGATE_LIMITER_BACKEND (limiter.backend): is the former name of limiter.store, read still: rename it"}},
		{"both, the same", "limiter: {store: memory, backend: memory}", nil, "memory", "", "", []string{"limiter.backend"}},
		{"both, different", "limiter: {store: memory, backend: redis}", nil, "", "", `limiter.backend: is the former name of limiter.store, which says "memory": set only limiter.store`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			ch := Check("f.yaml", []byte(tc.yaml), getenv)
			if tc.problem != "" {
				if p := ch.Problems(); len(p) != 1 || !strings.HasPrefix(p[0].Error(), tc.problem) {
					t.Fatalf("problems %q, want one beginning %q", p, tc.problem)
				}
				return
			}
			if p := ch.Problems(); len(p) != 0 {
				t.Fatalf("problems %q", p)
			}
			if ch.Config.Limiter.Store != tc.limiter || ch.Config.Idempotency.Store != tc.idem {
				t.Errorf("limiter.store %q, idempotency.store %q; want %q, %q", ch.Config.Limiter.Store, ch.Config.Idempotency.Store, tc.limiter, tc.idem)
			}
			got := ch.Warnings()
			if len(got) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %q", got, tc.warnings)
			}
			for i, w := range tc.warnings {
				if !strings.HasPrefix(got[i].Error(), w) {
					t.Errorf("warning %q, want it to begin %q", got[i].Error(), w)
				}
			}
		})
	}
}
