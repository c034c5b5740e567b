package redistest

import (
	"context"
	"testing"
	"time"
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

func TestSentinels(t *testing.T) {
	g := StartSentinels(t, "redistest", time.Second)
	if addr, err := g.MasterAddr(); err != nil || addr != g.Master.Addr {
		t.Fatalf("MasterAddr() = %q, %v; want %q", addr, err, g.Master.Addr)
	}
	info, err := g.Replica.Info("replication")
	if err != nil || info["role"] != "slave" || info["master_port"] != g.Master.Port() {
		t.Fatalf("replica's replication: %v %v", info, err)
	}
	if err := g.Master.Client().Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { v, _ := g.Replica.Do("GET", "k"); return v == "v" }) {
		t.Error("the write on the master did not reach the replica")
	}
}

func TestFreezeThaw(t *testing.T) {
	s := Start(t)
	s.Freeze()
	if err := ping(s.Addr); err == nil {
		t.Fatal("a frozen server answered PING")
	}
	s.Thaw()
	if err := ping(s.Addr); err != nil {
		t.Fatalf("after Thaw: %v", err)
	}
}

// eventually polls cond for up to 5s.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}
