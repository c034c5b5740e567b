package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a server process the benchmark started. Each runs in its own
// process group, so that stopping it also stops its children (NGINX
// workers), and dies with the benchmark (Pdeathsig) should the benchmark
// itself be killed.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string // path of its combined output
}

// procs is the set of started processes; stopAll ends them all.
type procs struct {
	mu   sync.Mutex
	list []*proc
	dir  string
}

// start runs bin with args and env (added to the environment) in its own
// process group, output to dir/name.log. cpus, when not empty, pins it
// with taskset.
func (ps *procs) start(name, cpus string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cpus != "" {
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(p.done) }()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// pid is the process's id (taskset execs the program, so the id stays).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last lines of the process's output, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	pgid := p.pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that outlived their leader (none expected) go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// stopAll stops every process, the last started first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(list) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *proc) { defer wg.Done(); p.stop(5 * time.Second) }(list[i])
	}
	wg.Wait()
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200, p exits, or ctx ends.
func waitHTTP(ctx context.Context, p *proc, url string) error {
	c := httpClient(time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if p.exited() {
			return fmt.Errorf("%s exited:\n%s", p.name, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready after 20s: %v\n%s", p.name, url, err, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitTCP polls addr until it accepts a connection.
func waitTCP(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if p.exited() {
			return fmt.Errorf("%s exited:\n%s", p.name, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not accepting after 20s: %v", p.name, addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, which
// Linux fixes at 100 for user space.
const userHZ = 100

// procCPU returns the user+system CPU time a process has used, from
// /proc/<pid>/stat (all its threads, living and exited).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	st, err := parseStat(string(b))
	if err != nil {
		return 0, err
	}
	return st.cpu, nil
}

// stat is what the benchmark reads of /proc/<pid>/stat.
type stat struct {
	ppid int
	cpu  time.Duration // utime + stime
}

// parseStat parses /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func parseStat(s string) (stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, errors.New("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return stat{}, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	sy, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stat{}, fmt.Errorf("stat: %w", err)
	}
	return stat{ppid: ppid, cpu: time.Duration(ut+sy) * time.Second / userHZ}, nil
}

// children returns the ids of pid's child processes.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if st, err := parseStat(string(b)); err == nil && st.ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// groupCPU returns the CPU time of pid and its children (NGINX's master
// and workers).
func groupCPU(pid int) time.Duration {
	var total time.Duration
	for _, p := range append([]int{pid}, children(pid)...) {
		if c, err := procCPU(p); err == nil {
			total += c
		}
	}
	return total
}

// sysCPU is the machine's CPU time split from /proc/stat, in ticks.
type sysCPU struct {
	busy, idle, steal int64
}

// sharesUntil returns how busy the machine was from s to later, and how
// much of its time the hypervisor stole, each in percent of all its CPUs'
// time (both 0 when no time passed).
func (s sysCPU) sharesUntil(later sysCPU) (busyPct, stealPct float64) {
	all := float64((later.busy + later.idle + later.steal) - (s.busy + s.idle + s.steal))
	if all <= 0 {
		return 0, 0
	}
	return 100 * float64(later.busy-s.busy) / all, 100 * float64(later.steal-s.steal) / all
}

// readSysCPU reads the "cpu" line of /proc/stat: busy is user, nice,
// system, irq and softirq; idle includes iowait; steal is time the
// hypervisor gave to other guests.
func readSysCPU() (sysCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return sysCPU{}, err
	}
	return parseSysCPU(string(b))
}

func parseSysCPU(s string) (sysCPU, error) {
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return sysCPU{}, fmt.Errorf("/proc/stat: %w", err)
			}
			v[i] = n
		}
		// user nice system idle iowait irq softirq steal
		return sysCPU{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}, nil
	}
	return sysCPU{}, errors.New("/proc/stat: no cpu line")
}
