package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under name (quorum 1, down after 1s), and waits until
// it knows the master.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	need(t, "redis-server")
	s := startSentinel(t, "redis-server", master, name, 1, time.Second)
	waitSentinel(t, s, name, func(m map[string]string) bool { return true })
	return s
}

// startSentinel starts bin as a Sentinel monitoring master under name,
// on a free port (startOnFreePort). Sentinel rewrites its configuration
// file, which lives in the test's temporary directory and is written
// afresh for each port tried.
func startSentinel(t testing.TB, bin string, master *Server, name string, quorum int, downAfter time.Duration) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	conf, logFile := filepath.Join(s.dir, "sentinel.conf"), filepath.Join(s.dir, "sentinel.log")
	s.command = func() (*exec.Cmd, string) {
		body := fmt.Sprintf("port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %s %d\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n",
			s.Port(), s.dir, name, master.Port(), quorum, name, downAfter.Milliseconds(), name, name)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{conf, "--logfile", logFile}
		if bin == "redis-server" {
			args = append(args, "--sentinel")
		}
		return exec.Command(bin, args...), logFile
	}
	s.startOnFreePort(false)
	t.Cleanup(s.Stop)
	return s
}

// waitSentinel waits until Sentinel s reports name at the master it
// monitors and SENTINEL MASTER's fields satisfy ok. Sentinels find each
// other through hello messages they publish every 2 seconds, which a busy
// machine delays: the bound only ends a hang.
func waitSentinel(t testing.TB, s *Server, name string, ok func(map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := sentinelMaster(s, name)
		if err == nil && ok(m) {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
			t.Fatalf("redistest: sentinel %s not ready for %s: %v %v\n%s", s.Addr, name, m, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sentinelMaster returns SENTINEL MASTER name's fields.
func sentinelMaster(s *Server, name string) (map[string]string, error) {
	v, err := s.Do("SENTINEL", "MASTER", name)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	switch v := v.(type) {
	case []any: // RESP2: a flat list of names and values
		for i := 0; i+1 < len(v); i += 2 {
			out[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any: // RESP3
		for k, x := range v {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	default:
		return nil, fmt.Errorf("SENTINEL MASTER: unexpected reply %T", v)
	}
	return out, nil
}

// Sentinels is a master with one replica, watched by three Sentinels
// (Debian's redis-sentinel) with a quorum of two: the smallest setup in
// which Sentinel fails a master over, as production runs it.
type Sentinels struct {
	// Name is the master's name in Sentinel (limiter.redis.master_name).
	Name string
	// Master and Replica are the servers as started; after a failover
	// Replica is the master.
	Master, Replica *Server
	// Nodes are the three Sentinels.
	Nodes []*Server
}

// StartSentinels starts a master, a replica of it and three Sentinels
// that consider the master down after downAfter without an answer (use
// 500ms–1s in tests: a failover then completes within about two seconds).
// It returns once the replica is in sync and every Sentinel knows the
// replica and the two other Sentinels, so that a failover can start at
// once.
func StartSentinels(t testing.TB, name string, downAfter time.Duration) *Sentinels {
	t.Helper()
	need(t, "redis-server", "redis-sentinel")
	repl := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	g := &Sentinels{Name: name, Master: Start(t, repl...)}
	g.Replica = StartReplica(t, g.Master, repl...)
	for range 3 {
		g.Nodes = append(g.Nodes, startSentinel(t, "redis-sentinel", g.Master, name, 2, downAfter))
	}
	for _, s := range g.Nodes {
		waitSentinel(t, s, name, func(m map[string]string) bool {
			return m["num-slaves"] == "1" && m["num-other-sentinels"] == "2" && m["flags"] == "master"
		})
	}
	return g
}

// Addrs returns the Sentinels' addresses (limiter.redis.addrs with
// master_name).
func (g *Sentinels) Addrs() []string {
	out := make([]string, len(g.Nodes))
	for i, s := range g.Nodes {
		out[i] = s.Addr
	}
	return out
}

// MasterAddr returns the master's address as the first Sentinel that
// answers reports it.
func (g *Sentinels) MasterAddr() (string, error) {
	var err error
	for _, s := range g.Nodes {
		var v any
		if v, err = s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name); err == nil {
			if a, ok := v.([]any); ok && len(a) == 2 {
				return fmt.Sprintf("%v:%v", a[0], a[1]), nil
			}
			err = fmt.Errorf("GET-MASTER-ADDR-BY-NAME: %v", v)
		}
	}
	return "", err
}

// Switches subscribes to the first Sentinel's +switch-master channel and
// sends the time each announcement of a new master for g.Name was
// received, with the new master's address, until ctx ends.
func (g *Sentinels) Switches(ctx context.Context) (<-chan Switch, error) {
	c := redis.NewClient(&redis.Options{Addr: g.Nodes[0].Addr, MaxRetries: -1})
	ps := c.Subscribe(ctx, "+switch-master")
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		_ = ps.Close()
		_ = c.Close()
		return nil, err
	}
	out := make(chan Switch, 4)
	go func() {
		defer c.Close()
		defer ps.Close()
		defer close(out)
		ch := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				// "<name> <old-ip> <old-port> <new-ip> <new-port>"
				f := strings.Fields(m.Payload)
				if len(f) == 5 && f[0] == g.Name {
					select {
					case out <- Switch{At: time.Now(), Addr: f[3] + ":" + f[4]}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out, nil
}

// Switch is a Sentinel's announcement of a new master.
type Switch struct {
	// At is when the test received it.
	At time.Time
	// Addr is the new master's address.
	Addr string
}
