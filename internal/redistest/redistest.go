// Package redistest starts real redis-server processes for tests, on free
// loopback ports, in the manner of net/http/httptest: a standalone server
// (Start), a Redis Cluster of several masters (StartCluster, or
// StartReplicatedCluster with a replica each), or a master with a replica
// watched by three Sentinels (StartSentinels). Servers
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/testdeps"
)

// Server is a redis-server process started for a test.
type Server struct {
	// Addr is the server's "127.0.0.1:port" address.
	Addr string
	// TLSAddr is the address of the server's TLS port, when started by
	// StartTLS; "" otherwise.
	TLSAddr string

	t    testing.TB
	dir  string
	args []string
	// command, when set, returns the command that runs the server at
	// Addr and the file it logs to, in place of a standalone
	// redis-server's (a Sentinel's, startSentinel).
	command func() (*exec.Cmd, string)
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

// packages names the Debian package of each program the helpers start.
var packages = map[string]string{
	"redis-server":   "redis-server",
	"redis-cli":      "redis-tools",
	"redis-sentinel": "redis-sentinel",
}

// need finds the named programs or skips the test; under CI a missing
// program fails the test instead.
func need(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		testdeps.Command(t, b, packages[b])
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago:
// another process may take it before a server binds it, so that each
// start on it is checked (startOnFreePort).
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// Start starts a standalone redis-server on a free loopback port with
// persistence off. Extra arguments are passed to redis-server as they are
// ("--maxmemory", "10mb", …). It is stopped when the test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	need(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir(), args: args}
	s.startOnFreePort(false)
	t.Cleanup(s.Stop)
	return s
}

// StartTLS is Start with a TLS port too (TLSAddr), on another free
// loopback port: args name the certificates ("--tls-cert-file", …).
func StartTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	need(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir(), args: args}
	s.startOnFreePort(true)
	t.Cleanup(s.Stop)
	return s
}

// startOnFreePort starts the server on ports found free, with fresh
// ones after a start that failed: a port found free can be taken by
// another process (a server another test package starts) before the
// server binds it, which then exits, or answers on the port the other
// process took and is told apart by its process id (start).
func (s *Server) startOnFreePort(withTLS bool) {
	s.t.Helper()
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		s.Addr = "127.0.0.1:" + freePort(s.t)
		if withTLS {
			s.TLSAddr = "127.0.0.1:" + freePort(s.t)
		}
		if err = s.start(); err == nil {
			return
		}
	}
	s.t.Fatalf("redistest: %v", err)
}

// Port returns the server's port.
func (s *Server) Port() string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

func (s *Server) start() error {
	cmd, logFile := s.redisCommand()
	if s.command != nil {
		cmd, logFile = s.command()
	}
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
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("%s on %s exited: %s", cmd.Path, s.Addr, strings.TrimSpace(string(log)))
		default:
		}
		if ping(s.Addr) == nil {
			// Another process's server may answer on a port this one
			// could not bind (it exits soon after).
			pid, err := serverPID(s.Addr)
			if err == nil && pid == cmd.Process.Pid {
				return nil
			}
			s.Stop()
			return fmt.Errorf("another server answers on %s (process %d, %v), not %s (process %d)", s.Addr, pid, err, cmd.Path, cmd.Process.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("%s on %s did not answer PING within 10s", cmd.Path, s.Addr)
}

// redisCommand returns the command that runs a standalone redis-server
// at s.Addr (and s.TLSAddr) with s.args, and the file it logs to.
func (s *Server) redisCommand() (*exec.Cmd, string) {
	logFile := filepath.Join(s.dir, "redis-"+s.Port()+".log")
	args := []string{
		"--port", s.Port(), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no",
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", logFile,
	}
	if s.TLSAddr != "" {
		_, p, _ := net.SplitHostPort(s.TLSAddr)
		args = append(args, "--tls-port", p)
	}
	return exec.Command("redis-server", append(args, s.args...)...), logFile
}

// serverPID returns the process id the server at addr reports (INFO
// server's process_id).
func serverPID(addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server names no process_id")
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

// Freeze stops the server with SIGSTOP: it keeps its connections and its
// port but answers nothing, as a hung or partitioned master would, until
// Thaw.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a server stopped by Freeze (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Info returns the named INFO section's fields ("role", "master_host", …).
func (s *Server) Info(section string) (map[string]string, error) {
	v, err := s.Do("INFO", section)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = val
		}
	}
	return out, nil
}

// CPU returns the CPU time redis-server has used so far (user and
// system), from INFO cpu.
func (s *Server) CPU(tb testing.TB) time.Duration {
	tb.Helper()
	m, err := s.Info("cpu")
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(m[f], 64)
		if err != nil {
			tb.Fatalf("redistest: INFO cpu %s: %v", f, err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// StartReplica starts a replica of master (extra arguments as for Start)
// and returns once master's writes reach it.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	r := Start(t, append([]string{"--replicaof", "127.0.0.1", master.Port()}, args...)...)
	if err := master.awaitReplication(1); err != nil {
		t.Fatalf("redistest: replica %s of %s does not acknowledge writes: %v", r.Addr, master.Addr, err)
	}
	return r
}

// awaitReplication waits until write, run on the master s, reaches
// replicas replicas (WAIT on the writing connection): a replica reported
// in sync may not stream writes yet for a moment after its first sync.
// Nil write means SET redistest:replication; a Cluster, where that key
// may live elsewhere, passes FLUSHALL, a write without a key.
func (s *Server) awaitReplication(replicas int, write ...any) error {
	if write == nil {
		write = []any{"SET", "redistest:replication", "1"}
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if err := c.Do(ctx, write...).Err(); err != nil {
			return err
		}
		n, err := c.Do(ctx, "WAIT", replicas, 100).Int()
		if err != nil {
			return err
		}
		if n >= replicas {
			return nil
		}
	}
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

// RestartReplicaOf starts the server again after Stop, empty, as a
// replica of master, as a supervisor brings a lost master back into a
// Sentinel setup after its replica was promoted; it returns once master's
// writes reach it.
func (s *Server) RestartReplicaOf(master *Server) {
	s.t.Helper()
	s.Stop()
	args := s.args
	s.args = append(slices.Clip(args), "--replicaof", "127.0.0.1", master.Port())
	defer func() { s.args = args }()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		err = master.awaitReplication(1)
	}
	if err != nil {
		s.t.Fatalf("redistest: restart as a replica of %s: %v", master.Addr, err)
	}
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
