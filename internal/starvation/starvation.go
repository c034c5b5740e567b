// Package starvation tells a test whether the machine starved its
// processes of CPU while it measured them. A test's timed assertions
// measure its subject, but on a machine shared with other work (a second
// `go test`, a build) a process starved of CPU delays answers exactly as
// the fault under test would. A Verdict asks the kernel, over each phase
// of a test, how long the test's processes (the test process and every
// process it started) ran and how long their threads waited on a run
// queue for a CPU, and how much CPU the rest of the machine took; a miss
// of a timed bound is put down to the machine (Phase.Starved) only when
// both say so, and the test is then skipped with the figures instead of
// failed. Linux only: it reads /proc.
package starvation

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// userHZ is the unit of the CPU times in /proc/stat: USER_HZ, which is
// 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// Bounds of Phase.Starved.
const (
	// starvedOthers is the share of the machine's CPUs that its other
	// tasks and the hypervisor must have taken over a phase for a miss to
	// be the machine's doing. The test's processes may run on every CPU
	// at once (GOMAXPROCS is the CPU count), so what other work takes is
	// taken from them; a quarter is the 25% slowdown exgate's overload
	// limit tolerates by default (overload.tolerance_percent) and the
	// overload test accepts of its backend. Below it a wait is the processes' own (an exgate that
	// burns more CPU than it should waits for itself), and a miss fails.
	starvedOthers = 0.25
	// starvedWakeup is the mean time a woken thread of the test's
	// processes must have waited on a run queue for a CPU over the phase
	// for the other work to have held them off. On a quiet two-core
	// machine it is 10-40 µs while the processes leave a CPU idle (the
	// overload test: 12 µs unloaded, 37 µs during its surge); 100 µs is
	// well over twice that, a thread that queued about every time it
	// woke. Measured beside a second `go test ./cmd/exgate` that failed
	// the overload test: 165 µs; beside four busy loops: 140-330 µs;
	// beside two and other builds: 0.8-1.5 ms. Processes that keep both
	// CPUs busy themselves queue for each other as long (55-150 µs in
	// fault's TestSlowloris, TestRedisSlow and TestBackendMisbehaviour on
	// a quiet machine), which is why starvedOthers must hold as well.
	starvedWakeup = 100 * time.Microsecond
	// starvedMinPhase is the shortest phase whose figures can say the
	// machine was busy: /proc/stat counts in ticks of 10 ms per CPU, a
	// tenth of a core's error over 200 ms, and a miss of any of the
	// suite's timed bounds takes longer than this anyway.
	starvedMinPhase = 200 * time.Millisecond
)

// watch reads, from the kernel, the CPU time of the test's processes
// (the test process, with the load generator and any backend it runs,
// and every process it started: exgate, redis-server, exchange-sim…) and
// of the whole machine, at the start and end of each phase of a test.
type watch struct {
	root   int // the test process
	last   sample
	phases []*Phase
}

// sample is one reading of watch.
type sample struct {
	at time.Time
	// procs are the test's processes, by pid.
	procs map[int]procTimes
	// reaped is the CPU time of the test process's children that have
	// ended and been waited for.
	reaped time.Duration
	// tasks is the machine's CPU time, every CPU, spent running tasks
	// (user, nice and system), and steal the time the hypervisor gave its
	// CPUs to another machine (/proc/stat).
	tasks, steal time.Duration
}

// procTimes is what a process's threads did, from their schedstat: the
// time they ran and waited on a run queue for a CPU, and how many times
// they were put on one.
type procTimes struct {
	name        string
	ppid        int
	ran, waited time.Duration
	slices      int64
}

// newWatch starts watching the test process and the processes it starts.
func newWatch(t testing.TB) *watch {
	t.Helper()
	w := &watch{root: os.Getpid()}
	w.last = w.read(t)
	return w
}

// read reads the kernel's figures now.
func (w *watch) read(t testing.TB) sample {
	t.Helper()
	s := sample{at: time.Now(), procs: map[int]procTimes{}}
	for pid, m := range family(w.root) {
		pt := threadTimes(pid)
		pt.name, pt.ppid = m.name, m.ppid
		s.procs[pid] = pt
		if pid == w.root {
			s.reaped = m.reaped
		}
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatalf("reading /proc/stat: %v", err)
	}
	s.tasks, s.steal, err = machineTimes(string(stat))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// member is what /proc/<pid>/stat says of a process: its command name,
// its parent, and the CPU time (user and system) of its children that
// have ended and that it has waited for.
type member struct {
	name   string
	ppid   int
	reaped time.Duration
}

// family returns process root and its descendants, by pid, from
// /proc/<pid>/stat.
func family(root int) map[int]member {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	members := map[int]member{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // it has just ended
		}
		m, ok := parseStat(string(b))
		if !ok {
			continue
		}
		members[pid] = m
		children[m.ppid] = append(children[m.ppid], pid)
	}
	out := map[int]member{root: members[root]}
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out[c] = members[c]
			queue = append(queue, c)
		}
	}
	return out
}

// parseStat parses the text of /proc/<pid>/stat: "pid (name) state ppid
// … cutime cstime …" (fields 16 and 17, in USER_HZ), where the name may
// itself hold spaces and parentheses.
func parseStat(s string) (m member, ok bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return member{}, false
	}
	f := strings.Fields(s[end+1:]) // from field 3, state
	if len(f) < 15 {
		return member{}, false
	}
	var v [3]int
	for i, field := range []int{1, 13, 14} { // ppid, cutime, cstime
		n, err := strconv.Atoi(f[field])
		if err != nil || n < 0 {
			return member{}, false
		}
		v[i] = n
	}
	return member{name: s[open+1 : end], ppid: v[0], reaped: time.Duration(v[1]+v[2]) * (time.Second / userHZ)}, true
}

// threadTimes returns what the threads of process pid that are alive
// did, summed, from their schedstat. A thread that has exited takes its
// figures with it; Go keeps the threads it has made, so over a phase the
// sums lose at most a few short-lived ones. A process that has ended
// reads as zero.
func threadTimes(pid int) procTimes {
	var pt procTimes
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return pt
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat"))
		if err != nil {
			continue // the thread has just exited
		}
		r, wt, n, ok := parseSchedstat(string(b))
		if ok {
			pt.ran += r
			pt.waited += wt
			pt.slices += n
		}
	}
	return pt
}

// parseSchedstat parses a /proc/<pid>/task/<tid>/schedstat line: the
// time the thread ran and waited on a run queue, in ns, and the number
// of times it was put on a CPU.
func parseSchedstat(s string) (ran, waited time.Duration, slices int64, ok bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, 0, 0, false
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return 0, 0, 0, false
		}
		v[i] = n
	}
	return time.Duration(v[0]), time.Duration(v[1]), v[2], true
}

// machineTimes returns, from the text of /proc/stat, the CPU time of
// every CPU spent running tasks (user, guest included, nice and system;
// not interrupts, which serve the test's own loopback traffic as much as
// anything else's) and stolen by the hypervisor.
func machineTimes(stat string) (tasks, steal time.Duration, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: first line %q is not the cpu total", line)
	}
	var v [9]int64
	for i := 1; i < len(v); i++ {
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: cpu field %d: %v", i, err)
		}
	}
	tick := time.Second / userHZ
	return time.Duration(v[1]+v[2]+v[3]) * tick, time.Duration(v[8]) * tick, nil
}

// begin starts a new phase, not recorded.
func (w *watch) begin(t testing.TB) {
	t.Helper()
	w.last = w.read(t)
}

// phase returns the figures of the phase since the previous call (or
// begin, or newWatch), records them and starts the next one. A process
// started during the phase counts whole. One that ended during it counts
// in the test's CPU time, not by name, if it was the test process's child
// (the kernel adds a child's CPU time to its parent's when the parent
// waits for it); a process of the family started by another one counts
// for nothing, its last figures gone with it.
func (w *watch) phase(t testing.TB, name string) *Phase {
	t.Helper()
	now := w.read(t)
	prev := w.last
	w.last = now
	s := &Phase{name: name, elapsed: now.at.Sub(prev.at), cpus: runtime.NumCPU()}
	byName := map[string]*procShare{}
	var ours time.Duration
	for pid, pt := range now.procs {
		if was, ok := prev.procs[pid]; ok && was.name == pt.name {
			pt.ran, pt.waited, pt.slices = max(pt.ran-was.ran, 0), max(pt.waited-was.waited, 0), max(pt.slices-was.slices, 0)
		}
		ps := byName[pt.name]
		if ps == nil {
			ps = &procShare{name: pt.name}
			byName[pt.name] = ps
		}
		ps.n++
		ps.ran += pt.ran
		ps.waited += pt.waited
		ps.slices += pt.slices
		ours += pt.ran
	}
	var gone time.Duration // of the children that ended, what they had run by the phase's start
	for pid, was := range prev.procs {
		if pt, ok := now.procs[pid]; (!ok || pt.name != was.name) && was.ppid == w.root {
			gone += was.ran
		}
	}
	s.ended = max(now.reaped-prev.reaped-gone, 0)
	ours += s.ended
	for _, ps := range byName {
		s.procs = append(s.procs, *ps)
	}
	slices.SortFunc(s.procs, func(a, b procShare) int { return cmp.Or(cmp.Compare(b.ran, a.ran), strings.Compare(a.name, b.name)) })
	s.others = max(now.tasks-prev.tasks-ours, 0)
	s.steal = max(now.steal-prev.steal, 0)
	w.phases = append(w.phases, s)
	return s
}

// Phase is how the test's processes fared for CPU over one phase.
type Phase struct {
	name    string
	elapsed time.Duration
	cpus    int
	procs   []procShare
	// ended is the CPU time of the test's processes that ended during the
	// phase, over it.
	ended time.Duration
	// others is the CPU time the machine's other tasks took, and steal
	// what the hypervisor took.
	others, steal time.Duration
	// slow is what another measure of the test saw of the machine over
	// the phase (see Explain), or "".
	slow string
}

// procShare is the CPU time of the test's processes of one name over a
// phase.
type procShare struct {
	name        string
	n           int // processes
	ran, waited time.Duration
	slices      int64
}

// Explain records that another measure of the test (how late an
// in-process backend's timers fired, say) found the machine too busy
// over the phase: a sentence with its figures; "" for not.
func (s *Phase) Explain(reason string) { s.slow = reason }

// perSecond returns d per second of the phase.
func (s *Phase) perSecond(d time.Duration) float64 {
	return d.Seconds() / max(s.elapsed.Seconds(), 1e-3)
}

// wakeup returns the mean run-queue wait of a woken thread of the test's
// processes.
func (s *Phase) wakeup() time.Duration {
	var waited time.Duration
	var slices int64
	for _, p := range s.procs {
		waited += p.waited
		slices += p.slices
	}
	return waited / time.Duration(max(slices, 1))
}

// Starved returns why the machine held the test's processes off the CPU
// over the phase, or "" when it did not: over a phase of starvedMinPhase
// or more, other work took more than starvedOthers of the machine's CPUs
// while the processes' threads waited for one more than starvedWakeup on
// average; or another measure said so (Explain).
func (s *Phase) Starved() string {
	var why []string
	if s.elapsed >= starvedMinPhase && s.perSecond(s.others+s.steal) > starvedOthers*float64(s.cpus) && s.wakeup() > starvedWakeup {
		why = append(why, s.String())
	}
	if s.slow != "" {
		why = append(why, s.slow)
	}
	return strings.Join(why, "; ")
}

// String returns the phase's figures: by process name, the cores its
// processes ran and waited for, and the mean wait of a woken thread; then
// the cores the machine's other tasks and the hypervisor took.
func (s *Phase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%v): ", s.name, s.elapsed.Round(time.Millisecond))
	for _, p := range s.procs {
		name := p.name
		if p.n > 1 {
			name = fmt.Sprintf("%d× %s", p.n, p.name)
		}
		fmt.Fprintf(&b, "%s ran %.2f cores, its threads waited for a CPU %.2f (%v a wake-up); ", name, s.perSecond(p.ran), s.perSecond(p.waited),
			(p.waited / time.Duration(max(p.slices, 1))).Round(time.Microsecond))
	}
	if s.ended > 0 {
		fmt.Fprintf(&b, "processes that ended ran %.2f cores; ", s.perSecond(s.ended))
	}
	fmt.Fprintf(&b, "%v a wake-up in all (bound %v); the machine's other tasks took %.2f cores and the hypervisor %.2f of %d (bound %.2f)",
		s.wakeup().Round(time.Microsecond), starvedWakeup, s.perSecond(s.others), s.perSecond(s.steal), s.cpus, starvedOthers*float64(s.cpus))
	return b.String()
}

// Verdict holds a test's misses of its timed bounds, each with the phase
// it was measured over, to report them once the phases' CPU figures say
// whether the machine explains them.
type Verdict struct {
	t       testing.TB
	cpu     *watch
	misses  []miss
	settled bool
}

// miss is a timed bound a phase missed.
type miss struct {
	phase *Phase
	what  string
}

// New starts watching the CPU of the test process and of the processes
// it starts: the first phase begins. Should the test end before Settle
// (t.Fatal), its misses fail it.
func New(t testing.TB) *Verdict {
	t.Helper()
	v := &Verdict{t: t, cpu: newWatch(t)}
	t.Cleanup(func() {
		if !v.settled {
			for _, m := range v.misses {
				t.Errorf("%s: %s", m.phase.name, m.what)
			}
		}
	})
	return v
}

// Begin begins a new phase, not recorded: what went on since the last
// phase ended is not measured.
func (v *Verdict) Begin() {
	v.t.Helper()
	v.cpu.begin(v.t)
}

// Phase ends the phase under way and returns its figures, named name;
// the next phase begins.
func (v *Verdict) Phase(name string) *Phase {
	v.t.Helper()
	return v.cpu.phase(v.t, name)
}

// Errorf records that phase missed a timed bound.
func (v *Verdict) Errorf(phase *Phase, format string, args ...any) {
	v.misses = append(v.misses, miss{phase, fmt.Sprintf(format, args...)})
}

// Settle logs the phases' CPU figures and reports the misses; call it
// last, as it may skip the test. A miss over a phase that starved the
// test's processes (Phase.Starved) is the machine's; when every miss
// is, and nothing else failed the test, the test is skipped with the
// figures; otherwise the other misses fail it.
func (v *Verdict) Settle() {
	t := v.t
	t.Helper()
	v.settled = true
	for _, p := range v.cpu.phases {
		t.Logf("CPU: %s", p)
	}
	var explained []string
	starved := map[*Phase]string{}
	failed := false
	for _, m := range v.misses {
		why := m.phase.Starved()
		if why == "" {
			t.Errorf("%s: %s", m.phase.name, m.what)
			failed = true
			continue
		}
		explained = append(explained, m.phase.name+": "+m.what)
		starved[m.phase] = why
	}
	switch {
	case len(explained) == 0:
	case failed || t.Failed():
		t.Logf("missed too, over phases that starved the test's processes: %s", strings.Join(explained, "; "))
	default:
		var why []string
		for _, p := range v.cpu.phases {
			if w, ok := starved[p]; ok {
				why = append(why, w)
			}
		}
		load, _ := os.ReadFile("/proc/loadavg")
		t.Skipf("the machine starved the test's processes, which delays answers as what the test measures would (load average %s).\nstarved: %s\nmisses it explains: %s",
			strings.TrimSpace(string(load)), strings.Join(why, "; "), strings.Join(explained, "; "))
	}
}
