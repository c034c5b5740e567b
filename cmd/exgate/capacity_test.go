package main

import (
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/config"
)

// TestDuplicateCapacity: check-config says each account's share of
// duplicate protection's store and where it comes from, how many such
// shares the memory store holds (or what each takes of Redis), what
// replica_acks asks of every master, and a share below what the order
// limits let an account place.
func TestDuplicateCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *config.Config)
		want []string
	}{
		{"defaults", func(*config.Config) {}, []string{
			"duplicate protection: each account's share: 135045 identifiers, 131.9 MiB (place_order 5400/1h (burst 5400) over the 24h retention)",
			`duplicate protection: duplicate answers (replays, 409s) on place_order: 5400/1h (burst 5400) per token (place_order's limit "token"), then 429`,
			"duplicate protection: the memory store (1000000 identifiers, 1024.0 MiB) holds 7 such shares; a client also takes only while it holds less than is left free, so clients filling it leave room for one that holds nothing",
		}},
		{"a Redis Cluster", func(c *config.Config) { c.Limiter.Redis.Addrs = []string{"r1:6379", "r2:6379", "r3:6379"} }, []string{
			"duplicate protection: each account's share: 135045 identifiers, 131.9 MiB (place_order 5400/1h (burst 5400) over the 24h retention)",
			`duplicate protection: duplicate answers (replays, 409s) on place_order: 5400/1h (burst 5400) per token (place_order's limit "token"), then 429`,
			"duplicate protection: in Redis each share is up to 131.9 MiB of maxmemory of its master (in a Cluster no claim sees the store's room: size maxmemory for the shares that trade at once)",
			"duplicate protection: replica_acks 1 (by topology: redis cluster): a master with fewer replicas online refuses every order with an identifier (503)",
		}},
		{"a share below the order limits", func(c *config.Config) {
			c.Idempotency.MaxPerAccount, c.Idempotency.Retention = 20000, 12*time.Hour
		}, []string{
			"duplicate protection: each account's share: 20000 identifiers, 19.5 MiB (set; below the 70245 orders place_order 5400/1h (burst 5400) lets an account place in the retention)",
			`duplicate protection: duplicate answers (replays, 409s) on place_order: 5400/1h (burst 5400) per token (place_order's limit "token"), then 429`,
			"duplicate protection: the memory store (1000000 identifiers, 1024.0 MiB) holds 50 such shares; a client also takes only while it holds less than is left free, so clients filling it leave room for one that holds nothing",
		}},
		{"duplicate answers set, and a route with nothing to derive them from", func(c *config.Config) {
			c.Idempotency.DuplicateAnswers = config.DuplicateAnswers{Rate: config.Rate{N: 600, Period: time.Hour}, Burst: 60}
			c.Identity.Verify = true
		}, []string{
			"duplicate protection: each account's share: 135045 identifiers, 131.9 MiB (place_order 5400/1h (burst 5400) over the 24h retention)",
			"duplicate protection: duplicate answers (replays, 409s) on place_order: 600/1h (burst 60) per account (idempotency.duplicate_answers), then 429",
			"duplicate protection: the memory store (1000000 identifiers, 1024.0 MiB) holds 7 such shares; a client also takes only while it holds less than is left free, so clients filling it leave room for one that holds nothing",
		}},
		{"a route with nothing to derive them from", func(c *config.Config) {
			c.Route("place_order").Limits = nil
			c.Idempotency.MaxPerAccount = 1000
		}, []string{
			"duplicate protection: each account's share: 1000 identifiers, 1.0 MiB (set)",
			"duplicate protection: duplicate answers on place_order are not limited: place_order has no limit on requests with a token (set idempotency.duplicate_answers.rate)",
			"duplicate protection: the memory store (1000000 identifiers, 1024.0 MiB) holds 1000 such shares; a client also takes only while it holds less than is left free, so clients filling it leave room for one that holds nothing",
		}},
		{"off", func(c *config.Config) { c.Idempotency.Enabled = false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.edit(c)
			if got := idempotencyCapacity(c); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("idempotencyCapacity:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
