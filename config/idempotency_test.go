package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIdempotency(t *testing.T) {
	i := DefaultIdempotency()
	want := Idempotency{
		Enabled: true, Retention: 24 * time.Hour, InFlightTimeout: 30 * time.Second,
		MaxResponseBytes: 64 << 10, Timeout: 100 * time.Millisecond, KeyPrefix: "exgate:idem:",
		ReplicaAcks: -1, Memory: IdempotencyMemory{MaxEntries: 1000000, MaxBytes: 1 << 30},
	}
	if i != want {
		t.Errorf("DefaultIdempotency() = %+v, want %+v", i, want)
	}
	// The default in-flight timeout must outlast the default order route.
	c := Default()
	if c.Idempotency.InFlightTimeout <= c.RouteTimeout(&c.Routes[0]) {
		t.Errorf("default in_flight_timeout %s does not exceed place_order's timeout", c.Idempotency.InFlightTimeout)
	}
}

// idempotencyFixtures lists, for every testdata/idempotency/bad-*.yaml,
// exactly the problems it must produce, in order.
var idempotencyFixtures = map[string][]string{
	"bad-idempotency.yaml": {
		`idempotency.retention: must be from 1m to 366d, got 30s (line 5)`,
		`idempotency.in_flight_timeout: must be greater than 0, got 0s (line 6)`,
		`idempotency.max_response_bytes: must be from 1KiB to 1MiB, got 2MiB (line 7)`,
		`idempotency.timeout: must be greater than 0 and at most 5s, got 10s (line 8)`,
		`idempotency.key_prefix: want 1 to 64 printable ASCII characters without spaces, got "has space" (line 9)`,
		`idempotency.replica_acks: must be from -1 (by topology) to 5, got 7 (line 10)`,
		`idempotency.memory.max_entries: must be at least 1, got 0 (line 12)`,
		`idempotency.memory.max_bytes: must be at least idempotency.max_response_bytes (2MiB), got 1MiB (line 13)`,
		// Problems between sections come after each section's own.
		`idempotency.store: "redis" needs limiter.redis.addrs (line 4)`,
	},
	"bad-in-flight.yaml": {
		`idempotency.in_flight_timeout: 20s must exceed the timeout of routes[0] ("place_order", 20s) (line 6)`,
		`idempotency.in_flight_timeout: 20s must exceed the timeout of routes[1] ("batch", 45s) (line 6)`,
		`routes[0].auth: duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection) (line 8)`,
		`routes[1].auth: duplicate protection keys an order's identifier by its token, and auth: none reads no token: an order sent twice with one identifier would be placed twice; write auth: required (or idempotency.enabled: false to go without duplicate protection) (line 11)`,
	},
}

func TestIdempotencyInvalidFixtures(t *testing.T) {
	testInvalidFixtures(t, "testdata/idempotency", idempotencyFixtures)
}

func TestIdempotencyRules(t *testing.T) {
	tests := []struct {
		name string
		yml  string
		env  map[string]string
		want []string // problems; nil means valid
	}{
		{"redis store with the limiter's redis", "limiter: {redis: {addrs: ['r:6379']}}\nidempotency: {store: redis}\n", nil, nil},
		{"redis store unused when disabled", "idempotency: {enabled: false, store: redis}\n", nil, nil},
		{"in-flight timeout not below retention", "idempotency: {retention: 1m, in_flight_timeout: 1m}\n", nil,
			[]string{`idempotency.in_flight_timeout: 1m0s must be less than idempotency.retention (1m0s) (line 1)`}},
		{"in-flight timeout against the inherited route timeout", "upstream: {timeout: 30s}\nserver: {write_timeout: 40s}\n", nil,
			[]string{`idempotency.in_flight_timeout: 30s must exceed the timeout of routes[0] ("place_order", 30s)`,
				`idempotency.in_flight_timeout: 30s must exceed the timeout of routes[1] ("bulk_orders", 30s)`}},
		{"key prefix with a hash tag", "idempotency: {key_prefix: 'x{idem}:'}\n", nil, nil},
		{"key prefix with a closing brace", "idempotency: {key_prefix: 'x}:'}\n", nil, nil},
		{"key prefix with an empty hash tag", "idempotency: {key_prefix: 'x{}:'}\n", nil,
			[]string{`idempotency.key_prefix: a { must open a hash tag closed in the prefix, with a character or more inside ({tag}: every key in one Cluster slot), got "x{}:": else a claim's keys hash to different Cluster slots and every order with an identifier is refused (line 1)`}},
		{"key prefix with an open brace", "idempotency: {key_prefix: 'x{:'}\n", nil,
			[]string{`idempotency.key_prefix: a { must open a hash tag closed in the prefix, with a character or more inside ({tag}: every key in one Cluster slot), got "x{:": else a claim's keys hash to different Cluster slots and every order with an identifier is refused (line 1)`}},
		{"routes without validation do not bound in-flight timeout", "idempotency: {in_flight_timeout: 2s}\nroutes: [{name: x, match: 'POST /x/', timeout: 9s}]\n", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.yml), env(tt.env))
			if got := errorStrings(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}
