package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// orderRouteYAML is a route of order placements with no auth set.
const orderRouteYAML = "routes:\n  - name: place_order\n    match: POST /o/\n    validate: order\n"

// bulkRoutesYAML is a placement, a cancel and a bulk route of both, limited
// per token with bursts of 20 and 30.
const bulkRoutesYAML = `routes:
  - {name: place_order, match: POST /o/, auth: required, validate: order, limits: [{key: token, rate: 20/1m}]}
  - {name: cancel_order, match: "DELETE /o/{id}/", auth: required, limits: [{key: token, rate: 30/1m}]}
  - {name: bulk, match: POST /o/bulk/, auth: required, validate: order_bulk, bulk: {orders: place_order, cancels: cancel_order}}
`

// neverApplyCase is a configuration and the one problem Parse finds in it.
type neverApplyCase struct {
	name string
	yaml string
	// path is the YAML path of the one problem, "" when valid; hint
	// is a part of its message that says what to do instead.
	path, hint string
}

// neverApplyCases is TestSettingsThatNeverApply's table: settings that
// would do nothing, each beside a nearby one that works.
var neverApplyCases = []neverApplyCase{
	{name: "token limit on auth none",
		yaml: "routes:\n  - {name: a, match: /a/, limits: [{key: token, rate: 1/1s}]}\n",
		path: "routes[0].limits[0].key", hint: "set routes[0].auth to optional or required, or count by key: address"},
	{name: "token limit on auth optional applies",
		yaml: "routes:\n  - {name: a, match: /a/, auth: optional, limits: [{key: token, rate: 1/1s}]}\n"},
	{name: "when token on auth none",
		yaml: "routes:\n  - {name: a, match: /a/, limits: [{key: address, when: token, rate: 1/1s}]}\n",
		path: "routes[0].limits[0].when", hint: "write when: always, or set routes[0].auth to optional"},
	{name: "when anonymous on auth none applies",
		yaml: "routes:\n  - {name: a, match: /a/, limits: [{key: address, when: anonymous, rate: 1/1s}]}\n"},
	{name: "when anonymous on auth required",
		yaml: "routes:\n  - {name: a, match: /a/, auth: required, limits: [{key: address, when: anonymous, rate: 1/1s}]}\n",
		path: "routes[0].limits[0].when", hint: "answered 401 before any limit"},
	{name: "when anonymous on auth optional applies",
		yaml: "routes:\n  - {name: a, match: /a/, auth: optional, limits: [{key: address, when: anonymous, rate: 1/1s}]}\n"},
	{name: "on_store_error on a route without limits",
		yaml: "routes:\n  - {name: a, match: /a/, on_store_error: closed}\n",
		path: "routes[0].on_store_error", hint: "remove on_store_error or add limits"},
	{name: "users file without verification",
		yaml: "identity: {users_file: users.yaml}\ntiers: {vip: {list_markets: {rate: 400/1m}}}\n",
		path: "identity.users_file", hint: "set identity.verify: true"},
	{name: "tier claim without verification",
		yaml: "identity: {jwt: {tier_claim: tier}}\ntiers: {vip: {list_markets: {rate: 400/1m}}}\n",
		path: "identity.jwt.tier_claim", hint: "map opaque tokens to tiers in tokens_file"},
	{name: "a route below one that covers it",
		yaml: "routes:\n  - {name: odr, match: '/o/{rest...}'}\n  - {name: place, match: POST /o/}\n",
		path: "routes[1].match", hint: "move this route above it"},
	{name: "a specific route above a general one",
		yaml: "routes:\n  - {name: place, match: POST /o/}\n  - {name: odr, match: '/o/{rest...}'}\n"},
	{name: "an origin with its default port",
		yaml: "cors: {allowed_origins: ['https://app.example.com:443']}\n",
		path: "cors.allowed_origins[0]", hint: `write that`},
	{name: "an origin as browsers send it",
		yaml: "cors: {allowed_origins: ['https://app.example.com']}\n"},
	{name: "max_in_flight with overload off",
		yaml: "overload: {enabled: false}\nroutes:\n  - {name: a, match: /a/, max_in_flight: 10}\n",
		path: "routes[0].max_in_flight", hint: "set overload.enabled: true, or remove max_in_flight"},
	{name: "max_in_flight with overload on applies",
		yaml: "routes:\n  - {name: a, match: /a/, max_in_flight: 10}\n"},
	{name: "on_store_error on a limited route applies",
		yaml: "routes:\n  - {name: a, match: /a/, on_store_error: closed, limits: [{key: address, rate: 1/1s}]}\n"},
	{name: "orders without a token get no duplicate protection",
		yaml: orderRouteYAML,
		path: "routes[0].auth", hint: "write auth: required (or idempotency.enabled: false"},
	{name: "orders on auth none without duplicate protection",
		yaml: orderRouteYAML + "idempotency: {enabled: false}\n"},
	{name: "orders with auth required",
		yaml: orderRouteYAML + "    auth: required\n"},
	{name: "market rules without an order route",
		yaml: "routes:\n  - {name: a, match: /a/}\nvalidation: {markets: {BTC_USDT: {min_price: \"1\"}}}\n",
		path: "validation.markets", hint: "add validate: order"},
	{name: "quote rules without an order route",
		yaml: "routes:\n  - {name: a, match: /a/}\nvalidation: {quotes: {USDT: {min_value: \"1\"}}}\n",
		path: "validation.quotes", hint: "add validate: order"},
	{name: "in-process duplicate protection behind several replicas",
		yaml: "limiter: {replicas: 3}\n",
		path: "idempotency.store", hint: "set limiter.redis.addrs and idempotency.store: redis"},
	{name: "in-process duplicate protection named behind several replicas",
		yaml: "limiter: {replicas: 3, store: memory}\nidempotency: {store: memory}\n",
		path: "idempotency.store", hint: "idempotency.store: redis"},
	{name: "several replicas without duplicate protection",
		yaml: "limiter: {replicas: 3}\nidempotency: {enabled: false}\n"},
	{name: "several replicas sharing Redis",
		yaml: "limiter: {replicas: 3, redis: {addrs: [\"r:6379\"]}}\n"},
	{name: "duplicate protection in Redis, limits in memory",
		yaml: "limiter: {replicas: 3, store: memory, redis: {addrs: [\"r:6379\"]}}\nidempotency: {store: redis}\n"},
	{name: "tiers nothing assigns",
		yaml: "tiers: {vip: {place_order: {rate: 9/1s}}}\n",
		path: "tiers", hint: "tiers are assigned by tokens_file, identity.users_file or identity.jwt.tier_claim"},
	{name: "tiers from the tokens file",
		yaml: "tiers: {vip: {place_order: {rate: 9/1s}}}\ntokens_file: tokens.yaml\n"},
	{name: "account limit on auth none",
		yaml: "identity: {verify: true, jwt: {jwks_file: k.json, jwks_algorithms: [RS256]}}\nroutes:\n  - {name: a, match: /a/, limits: [{key: account, rate: 1/1s}]}\n",
		path: "routes[0].limits[0].key", hint: "set routes[0].auth to optional or required"},
	{name: "bulks larger than every burst of both kinds",
		yaml: bulkRoutesYAML + "validation: {bulk: {max_orders: 31}}\n",
		path: "validation.bulk.max_orders", hint: "20 orders (the burst of routes[0].limits[0], limit \"token\" of route \"place_order\") and 30 order ids (the burst of routes[1].limits[0], limit \"token\" of route \"cancel_order\"): a bulk is charged one unit per order or id, all or nothing, so a larger one is always refused; set validation.bulk.max_orders to at most 30"},
	{name: "bulks larger than the order burst, within the cancel burst",
		yaml: bulkRoutesYAML + "validation: {bulk: {max_orders: 30}}\n"},
	{name: "bulks within every burst",
		yaml: bulkRoutesYAML + "validation: {bulk: {max_orders: 20}}\n"},
	{name: "bulks larger than the burst of some tiers only",
		yaml: bulkRoutesYAML + "validation: {bulk: {max_orders: 50}}\ntokens_file: tokens.yaml\ntiers: {pro: {place_order: {rate: 100/1m}, cancel_order: {rate: 100/1m}}}\n"},
	{name: "a shadow limit's burst refuses no bulk",
		yaml: strings.Replace(bulkRoutesYAML, "{key: token, rate: 20/1m}", "{key: token, rate: 20/1m, shadow: true}", 1) + "validation: {bulk: {max_orders: 30}}\n"},
	{name: "a duplicate-answers burst below the bulk size",
		yaml: bulkRoutesYAML + "idempotency: {duplicate_answers: {rate: 100/1h, burst: 5}}\n",
		path: "idempotency.duplicate_answers.burst", hint: "raise the burst to at least 10"},
	{name: "a duplicate-answers burst of the bulk size",
		yaml: bulkRoutesYAML + "idempotency: {duplicate_answers: {rate: 100/1h, burst: 10}}\n"},
	{name: "a duplicate-answers burst without bulks",
		yaml: orderRouteYAML + "    auth: required\nidempotency: {duplicate_answers: {rate: 100/1h, burst: 5}}\n"},
	{name: "a duplicate-answers burst without its rate",
		yaml: "idempotency: {duplicate_answers: {burst: 5}}\n",
		path: "idempotency.duplicate_answers.burst", hint: "set the rate too"},
	{name: "an order route limit named as the allowance of duplicate answers",
		yaml: strings.Replace(bulkRoutesYAML, "{key: token, rate: 20/1m}", "{name: duplicate_answers, key: token, rate: 20/1m}", 1),
		path: "routes[0].limits[0].name", hint: "give the limit another name"},
	{name: "another route's limit named so",
		yaml: strings.Replace(bulkRoutesYAML, "{key: token, rate: 30/1m}", "{name: duplicate_answers, key: token, rate: 30/1m}", 1)},
	{name: "Redis that nothing uses",
		yaml: "limiter: {store: memory, redis: {addrs: [\"r:6379\"]}}\n",
		path: "limiter.redis.addrs", hint: "set limiter.store: redis (or idempotency.store: redis)"},
}

// TestSettingsThatNeverApply checks that a configuration which would be
// accepted and silently do nothing (or not what it says) is refused, at the
// YAML path of the setting, with a message that says what to write
// instead — and that the nearby configurations that do work are accepted.
func TestSettingsThatNeverApply(t *testing.T) {
	for _, tt := range neverApplyCases {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.yaml), env(nil))
			if tt.path == "" {
				if err != nil {
					t.Fatalf("refused:\n%v", err)
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("want one problem at %s, got:\n%v", tt.path, err)
			}
			if es[0].Path != tt.path || !strings.Contains(es[0].Msg, tt.hint) {
				t.Errorf("got %v\nwant a problem at %s containing %q", es[0], tt.path, tt.hint)
			}
		})
	}
}

// TestChecksAcrossSections gives each check of checkAcrossSections a
// configuration it refuses and one nearby that it accepts, and checks that
// a value its own section already refuses is not reported again here.
func TestChecksAcrossSections(t *testing.T) {
	tests := []struct {
		name string
		mut  func(c *Config)
		want []string // exact problems; nil means valid
	}{
		{"route timeout not below the write timeout",
			func(c *Config) { c.Route("list_orders").Timeout = 30 * time.Second },
			[]string{`server.write_timeout: 30s must exceed routes[4].timeout (30s, route "list_orders")`}},
		{"route timeout below the write timeout",
			func(c *Config) { c.Route("list_orders").Timeout = 29 * time.Second }, nil},
		{"write timeout refused by its section is not compared",
			func(c *Config) { c.Server.WriteTimeout = 0 },
			[]string{`server.write_timeout: must be greater than 0, got 0s`}},
		{"order body above every body",
			func(c *Config) { c.Server.MaxBodyBytes = 4 << 10 },
			[]string{`validation.max_body_bytes: 8KiB must not exceed server.max_body_bytes (4KiB)`}},
		{"body budget too small for a client to hold the largest body",
			func(c *Config) { c.Server.MaxBufferedBytes = 1 << 20 },
			[]string{`server.max_buffered_bytes: 1MiB is less than twice the largest body read whole (1MiB) and its read's charge (24KiB): a client may hold at most half of it, so such a body would always be refused`}},
		{"body budget too small for a client to hold a bulk",
			func(c *Config) { c.Server.MaxBufferedBytes, c.Server.MaxBodyBytes = 100<<10, 64<<10 },
			[]string{`server.max_buffered_bytes: 100KiB is less than twice the largest body read whole (64KiB) and its read's charge (24KiB): a client may hold at most half of it, so such a body would always be refused`}},
		{"body budget twice the largest body and its read's charge",
			func(c *Config) { c.Server.MaxBufferedBytes = 2<<20 + 2*BodyReadCharge }, nil},
		{"body budget twice the largest body alone",
			func(c *Config) { c.Server.MaxBufferedBytes = 2 << 20 },
			[]string{`server.max_buffered_bytes: 2MiB is less than twice the largest body read whole (1MiB) and its read's charge (24KiB): a client may hold at most half of it, so such a body would always be refused`}},
		{"order body refused by its section is not compared",
			func(c *Config) { c.Validation.MaxBodyBytes = 2 << 20 },
			[]string{`validation.max_body_bytes: must be from 64 to 1MiB, got 2MiB`}},
		{"redis duplicate store without redis",
			func(c *Config) { c.Idempotency.Store = StoreRedis },
			[]string{`idempotency.store: "redis" needs limiter.redis.addrs`}},
		{"redis duplicate store unused",
			func(c *Config) { c.Idempotency.Store, c.Idempotency.Enabled = StoreRedis, false }, nil},
		{"claim shorter than the order route's timeout",
			func(c *Config) { c.Idempotency.InFlightTimeout = 10 * time.Second },
			[]string{`idempotency.in_flight_timeout: 10s must exceed the timeout of routes[0] ("place_order", 10s)`,
				`idempotency.in_flight_timeout: 10s must exceed the timeout of routes[1] ("bulk_orders", 10s)`}},
		{"claim shorter than a bulk placement route's timeout",
			func(c *Config) {
				c.Route("bulk_orders").Timeout = 45 * time.Second
				c.Server.WriteTimeout = time.Minute
			},
			[]string{`idempotency.in_flight_timeout: 30s must exceed the timeout of routes[1] ("bulk_orders", 45s)`}},
		{"a bulk cancel route claims nothing",
			func(c *Config) {
				c.Route("bulk_cancel").Timeout = 45 * time.Second
				c.Server.WriteTimeout = time.Minute
			}, nil},
		{"claim refused by its section is not compared",
			func(c *Config) { c.Idempotency.InFlightTimeout = 25 * time.Hour },
			[]string{`idempotency.in_flight_timeout: 25h0m0s must be less than idempotency.retention (24h0m0s)`}},
		{"tokens file with verified accounts",
			func(c *Config) { c.Identity.Verify, c.TokensFile = true, "tokens.yaml" },
			[]string{`tokens_file: maps token strings to tiers, but identity.verify counts accounts: write identity.users_file (user id → tier) or identity.jwt.tier_claim instead`}},
		{"account limit without verification",
			func(c *Config) { c.Route("list_fills").Limits[0].Key = KeyAccount },
			[]string{`routes[6].limits[0].key: key: account needs identity.verify: true (JWT access tokens verified at the edge); for opaque tokens write key: token`}},
		{"verified accounts count the built-in table per account",
			func(c *Config) { c.Identity.Verify = true }, nil},
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
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}
