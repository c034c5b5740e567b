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
