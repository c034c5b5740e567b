package config

import (
	"testing"
	"time"
)

func TestIdempotencyReplicaAcks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		addrs      []string
		masterName string
		set        int
		want       int
	}{
		{"standalone", []string{"redis:6379"}, "", -1, 0},
		{"sentinel", []string{"s1:26379", "s2:26379", "s3:26379"}, "mymaster", -1, 1},
		{"sentinel with one address", []string{"s1:26379"}, "mymaster", -1, 1},
		{"cluster", []string{"n1:6379", "n2:6379", "n3:6379"}, "", -1, 1},
		{"set to 0 on a cluster", []string{"n1:6379", "n2:6379"}, "", 0, 0},
		{"set to 2 on standalone", []string{"redis:6379"}, "", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Limiter.Redis.Addrs, c.Limiter.Redis.MasterName = tc.addrs, tc.masterName
			c.Idempotency.ReplicaAcks = tc.set
			if got := c.IdempotencyReplicaAcks(); got != tc.want {
				t.Errorf("IdempotencyReplicaAcks() = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestIdempotencyShare: an account's share of the duplicate-protection
// store holds what its order limits let it place within the retention,
// under its fastest tier, unless set.
func TestIdempotencyShare(t *testing.T) {
	day := 24*time.Hour + 30*time.Second // retention + in_flight_timeout
	for _, tc := range []struct {
		name      string
		edit      func(c *Config)
		ids       int
		bytes     int64
		basis     string
		allowance int64
	}{
		{"defaults: 5400/h for 24h and the burst", func(*Config) {}, 135045, 135045 << 10,
			"place_order 5400/1h (burst 5400)", 135045},
		{"a faster tier", func(c *Config) {
			c.Tiers = map[string]map[string]TierLimit{"mm": {"place_order": {Rate: Rate{N: 54000, Period: time.Hour}, Burst: 1000}}}
		}, 1297450, 1297450 << 10, "place_order 54000/1h (burst 1000) for tier mm", 1297450},
		{"a second order route", func(c *Config) {
			r := *c.Route("place_order")
			r.Name, r.Limits = "place_stop", []Limit{
				{Name: "token", Key: KeyToken, When: WhenAlways, Rate: Rate{N: 60, Period: time.Minute}, Burst: 60},
				{Name: "day", Key: KeyToken, When: WhenAlways, Rate: Rate{N: 1000, Period: 24 * time.Hour}, Burst: 100},
				{Name: "address", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 1, Period: time.Hour}, Burst: 1},
			}
			c.Routes = append([]Route{r}, c.Routes...)
		}, 135045 + 1101, (135045 + 1101) << 10, "place_stop 1000/24h (burst 100) + place_order 5400/1h (burst 5400)", 135045 + 1101},
		{"an order route no per-account limit bounds", func(c *Config) {
			c.Route("place_order").Limits = []Limit{{Name: "address", Key: KeyAddress, When: WhenAlways, Rate: Rate{N: 10, Period: time.Second}, Burst: 10}}
		}, 200000, 200 << 20, "place_order has no limit per account", 0},
		{"set", func(c *Config) { c.Idempotency.MaxPerAccount, c.Idempotency.MaxBytesPerAccount = 500, 1<<20 }, 500, 1 << 20,
			"place_order 5400/1h (burst 5400)", 135045},
		{"entries set, bytes derived", func(c *Config) { c.Idempotency.MaxPerAccount = 500 }, 500, 500 << 10,
			"place_order 5400/1h (burst 5400)", 135045},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(c)
			if ids, bytes := c.IdempotencyShare(); ids != tc.ids || bytes != tc.bytes {
				t.Errorf("IdempotencyShare() = %d, %d; want %d, %d", ids, bytes, tc.ids, tc.bytes)
			}
			if a := c.OrderAllowance(day); a.Orders != tc.allowance || a.Basis != tc.basis {
				t.Errorf("OrderAllowance = %+v, want %d from %q", a, tc.allowance, tc.basis)
			}
		})
	}
}

// TestDuplicateAnswerLimits: each order route's allowance of duplicate
// answers is its own tightest limit on requests with a token (key,
// burst, and tiers for a token or account limit), or the one set for
// every order route; a route with no limit to derive from, and a
// configuration without duplicate protection, has none.
func TestDuplicateAnswerLimits(t *testing.T) {
	perHour := func(n int64) Rate { return Rate{N: n, Period: time.Hour} }
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want []DuplicateAnswerLimit
	}{
		{"defaults: place_order's own", func(*Config) {}, []DuplicateAnswerLimit{
			{Route: "place_order", Key: KeyToken, Rate: perHour(5400), Burst: 5400, Tiers: true, Basis: `place_order's limit "token"`}}},
		{"verified accounts", func(c *Config) {
			c.Identity.Verify = true
			c.Route("place_order").Limits[0].Key = KeyAccount
		}, []DuplicateAnswerLimit{
			{Route: "place_order", Key: KeyAccount, Rate: perHour(5400), Burst: 5400, Tiers: true, Basis: `place_order's limit "token"`}}},
		{"the tightest of several; shadow and anonymous-only limits left out", func(c *Config) {
			c.Route("place_order").Limits = []Limit{
				{Name: "shadow", Key: KeyToken, When: WhenAlways, Rate: perHour(1), Burst: 1, Shadow: true},
				{Name: "anon", Key: KeyAddress, When: WhenAnon, Rate: perHour(2), Burst: 2},
				{Name: "minute", Key: KeyToken, When: WhenAlways, Rate: Rate{N: 100, Period: time.Minute}, Burst: 100},
				{Name: "address", Key: KeyAddress, When: WhenAlways, Rate: perHour(3000), Burst: 50},
				{Name: "hour", Key: KeyToken, When: WhenAlways, Rate: Rate{N: 3000, Period: time.Hour}, Burst: 10},
			}
		}, []DuplicateAnswerLimit{
			{Route: "place_order", Key: KeyToken, Rate: perHour(3000), Burst: 10, Tiers: true, Basis: `place_order's limit "hour"`}}},
		{"an address limit: counted by address, no tiers", func(c *Config) {
			c.Route("place_order").Limits = []Limit{{Name: "address", Key: KeyAddress, When: WhenAlways, Rate: perHour(600), Burst: 60}}
		}, []DuplicateAnswerLimit{
			{Route: "place_order", Key: KeyAddress, Rate: perHour(600), Burst: 60, Basis: `place_order's limit "address"`}}},
		{"set", func(c *Config) {
			c.Idempotency.DuplicateAnswers = DuplicateAnswers{Rate: Rate{N: 100, Period: time.Minute}, Burst: 20}
		}, []DuplicateAnswerLimit{
			{Route: "place_order", Key: KeyToken, Rate: Rate{N: 100, Period: time.Minute}, Burst: 20, Basis: "idempotency.duplicate_answers"}}},
		{"no limit to derive from", func(c *Config) { c.Route("place_order").Limits = nil }, []DuplicateAnswerLimit{
			{Route: "place_order", Basis: "place_order has no limit on requests with a token"}}},
		{"without duplicate protection", func(c *Config) { c.Idempotency.Enabled = false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(c)
			got := c.DuplicateAnswerLimits()
			if len(got) != len(tc.want) {
				t.Fatalf("DuplicateAnswerLimits() = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("DuplicateAnswerLimits()[%d] = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
