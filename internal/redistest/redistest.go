// Package redistest starts real redis-server processes for tests, on free
// loopback ports, in the manner of net/http/httptest: a standalone server
// (Start) or a Redis Cluster of several masters (StartCluster). Servers
// keep nothing on disk beyond the test's temporary directory and are
// stopped by t.Cleanup.
//
// When redis-server is not installed, tests are skipped locally and fail
// under CI (CI=true), where `make test` installs it.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started for a test.
type Server struct {
	// Addr is the server's "127.0.0.1:port" address.
	Addr string

	t    testing.TB
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// need finds redis-server (and redis-cli when cli is true) or skips the
// test; under CI a missing binary fails the test instead.
func need(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed; `make test` installs it (Debian package redis-server / redis-tools)", b)
			}
			t.Skipf("%s is not installed (apt-get install redis-server); skipping", b)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start starts a standalone redis-server on a free loopback port with
// persistence off. Extra arguments are passed to redis-server as they are
// ("--maxmemory", "10mb", …). It is stopped when the test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	need(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir(), args: args}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.Addr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Port returns the server's port.
func (s *Server) Port() string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

func (s *Server) start() error {
	args := append([]string{
		"--port", s.Port(), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no",
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis-"+s.Port()+".log"),
	}, s.args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis-"+s.Port()+".log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, strings.TrimSpace(string(log)))
		default:
		}
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.Addr)
}

// ping sends PING over a fresh connection.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("PING: %q", buf[:n])
	}
	return nil
}

// Stop kills the server (SIGKILL: as abrupt as a crash) and waits for it
// to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the server again on the same address after Stop, with an
// empty dataset. It retries for a while if the port is briefly busy.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on a fresh connection and returns its result.
func (s *Server) Do(args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// CommandCalls returns how many times each command ran on the server
// (INFO commandstats), keyed by lower-case command name ("evalsha", "get").
func (s *Server) CommandCalls() map[string]int64 {
	s.t.Helper()
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		s.t.Fatalf("redistest: INFO commandstats: %v", err)
	}
	return ParseCommandStats(v.(string))
}

// ParseCommandStats parses the commandstats section of INFO.
func ParseCommandStats(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// Cluster is a Redis Cluster of masters without replicas, each a Server.
type Cluster struct {
	// Addrs are the masters' addresses.
	Addrs   []string
	Servers []*Server
}

// StartCluster starts n (at least 3) cluster-enabled redis-servers and
// joins them with `redis-cli --cluster create`, then waits until every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	need(t, "redis-server", "redis-cli")
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		s := Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-"+strconv.Itoa(i)+".conf",
			"--cluster-node-timeout", "2000")
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under name, and waits until it knows the master.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	need(t, "redis-server")
	dir := t.TempDir()
	port := FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %s 1\nsentinel down-after-milliseconds %s 1000\n",
		port, dir, name, master.Port(), name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	cmd := exec.Command("redis-server", conf, "--sentinel", "--logfile", filepath.Join(dir, "sentinel.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
		if err == nil && fmt.Sprint(v) == fmt.Sprint([]any{"127.0.0.1", master.Port()}) {
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("redistest: sentinel does not know %s: %v %v\n%s", name, v, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
