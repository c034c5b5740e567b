package redistest

import (
	"context"
	"testing"
)

func TestStandaloneStopRestart(t *testing.T) {
	s := Start(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.CommandCalls()["set"]; got != 1 {
		t.Errorf("set calls = %d, want 1", got)
	}
	s.Stop()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET succeeded against a stopped server")
	}
	s.Restart()
	if err := c.Get(ctx, "k").Err(); err == nil || err.Error() != "redis: nil" {
		t.Fatalf("after restart GET = %v, want redis: nil (empty dataset)", err)
	}
}

func TestCluster(t *testing.T) {
	cl := StartCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	nodes := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		slot, _ := c.ClusterKeySlot(ctx, k).Result()
		for _, s := range cl.Servers {
			n, _ := s.Do("CLUSTER", "COUNTKEYSINSLOT", slot)
			if n.(int64) > 0 {
				nodes[s.Addr] = true
			}
		}
	}
	if len(nodes) < 2 {
		t.Errorf("keys landed on %d node(s), want them spread over several", len(nodes))
	}
}
