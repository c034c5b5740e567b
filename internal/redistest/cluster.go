package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster, each node a Server: masters, and replicas
// when started by StartReplicatedCluster.
type Cluster struct {
	// Addrs are the nodes' addresses, masters first as created.
	Addrs   []string
	Servers []*Server
}

// StartCluster starts n (at least 3) cluster-enabled redis-servers and
// joins them with `redis-cli --cluster create`, then waits until every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, 0, 2000)
}

// StartReplicatedCluster starts a Cluster of n (at least 3) masters with a
// replica each and a cluster-node-timeout of nodeTimeout, short enough
// for a failover test: a master unreachable for longer than it is failed
// over to its replica. The masters are Servers[:n]. It returns once
// every master's writes reach its replica.
func StartReplicatedCluster(t testing.TB, n int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	c := startCluster(t, n, 1, nodeTimeout.Milliseconds())
	for _, s := range c.Servers[:n] {
		if err := s.awaitReplication(1, "FLUSHALL"); err != nil {
			t.Fatalf("redistest: cluster master %s: no replica acknowledges writes: %v", s.Addr, err)
		}
	}
	return c
}

func startCluster(t testing.TB, masters, replicas int, nodeTimeout int64) *Cluster {
	need(t, "redis-server", "redis-cli")
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	c := &Cluster{}
	for i := 0; i < masters*(1+replicas); i++ {
		s := Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-"+strconv.Itoa(i)+".conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout, 10),
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Servers {
		for {
			v, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(fmt.Sprint(v), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok on %s: %v %v", s.Addr, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Server returns the node listening on addr, or nil.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range c.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// SlotOwner returns the address of the master serving slot, as the node
// at via sees the slot map (CLUSTER SLOTS).
func (c *Cluster) SlotOwner(via *Server, slot int) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: via.Addr, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ranges, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("redistest: slot %d is not served", slot)
}
