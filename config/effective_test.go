package config

import (
	"testing"
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
