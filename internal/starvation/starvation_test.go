package starvation

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in          string
		ran, waited time.Duration
		slices      int64
		ok          bool
	}{
		{"206794613 224802365 1018\n", 206794613, 224802365, 1018, true},
		{"0 0 0", 0, 0, 0, true},
		{"", 0, 0, 0, false},
		{"1 2", 0, 0, 0, false},
		{"1 2 3 4", 0, 0, 0, false},
		{"1 -2 3", 0, 0, 0, false},
		{"1 x 3", 0, 0, 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			ran, waited, slices, ok := parseSchedstat(tc.in)
			if ran != tc.ran || waited != tc.waited || slices != tc.slices || ok != tc.ok {
				t.Errorf("parseSchedstat(%q) = %v, %v, %d, %t; want %v, %v, %d, %t", tc.in, ran, waited, slices, ok, tc.ran, tc.waited, tc.slices, tc.ok)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tick := 10 * time.Millisecond
	for _, tc := range []struct {
		in string
		m  member
		ok bool
	}{
		{"4482 (exgate) S 4470 4482 4470 0 -1 4194560 2365 0 0 0 12 3 250 7 20 0 9 0", member{"exgate", 4470, 257 * tick}, true},
		{"77 (a (b) c) R 1 77 77 0 -1 4194560 2365 0 0 0 12 3 0 0 20", member{"a (b) c", 1, 0}, true},
		{"5 (redis-server *:0) S 3 5 3 0 -1 4194560 2365 0 0 0 12 3 1 1 20", member{"redis-server *:0", 3, 2 * tick}, true},
		{"5 (x) S 3 5 3 0 -1 4194560 2365 0 0 0 12 3 1", member{}, false},
		{"5 x S 3 5 3 0 -1 4194560 2365 0 0 0 12 3 1 1 20", member{}, false},
		{"5 (x) S y 5 3 0 -1 4194560 2365 0 0 0 12 3 1 1 20", member{}, false},
		{"5 (x) S 3 5 3 0 -1 4194560 2365 0 0 0 12 3 -1 1 20", member{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, ok := parseStat(tc.in)
			if m != tc.m || ok != tc.ok {
				t.Errorf("parseStat(%q) = %+v, %t; want %+v, %t", tc.in, m, ok, tc.m, tc.ok)
			}
		})
	}
}

// TestFamily checks that the test process finds a process it started,
// and that process's own child, among its family.
func TestFamily(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 5 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	found := false
	for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f := family(os.Getpid())
		n := 0
		for _, m := range f {
			if m.name == "sleep" {
				n++
			}
		}
		found = f[cmd.Process.Pid].name == "sh" && n == 1
	}
	if !found {
		t.Errorf("family(test process) = %v, want sh (pid %d) and its sleep among them", family(os.Getpid()), cmd.Process.Pid)
	}
}

// TestEndedChildCounts checks that a child that burnt CPU and ended
// during a phase counts as the test's, not as the machine's other work.
func TestEndedChildCounts(t *testing.T) {
	v := New(t)
	cmd := exec.Command("timeout", "0.5", "sh", "-c", "while :; do :; done")
	_ = cmd.Run() // ends with timeout's status 124
	p := v.Phase("a busy child")
	// What the child and its own children ran, as the kernel told the
	// test when it waited for it; /proc counts in ticks of 10 ms.
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		t.Fatal(err)
	}
	if ran := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(); ran < 20*time.Millisecond || p.ended < ran-20*time.Millisecond || p.ended > ran+20*time.Millisecond {
		t.Errorf("a child that ran %v (and the test's children %v in all) ran %v by the phase's figures: %s",
			ran, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()), p.ended, p)
	}
	v.Settle()
}

func TestMachineTimes(t *testing.T) {
	for _, tc := range []struct {
		name, in     string
		tasks, steal time.Duration
		err          bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"busy", "cpu  2758482 33686 1000813 1715325 5338 0 197762 4337 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n",
			(2758482 + 33686 + 1000813) * 10 * time.Millisecond, 4337 * 10 * time.Millisecond, false},
		{"no steal column", "cpu  1 2 3 4 5 6 7\n", 0, 0, true},
		{"per-CPU line first", "cpu0 1 2 3 4 5 6 7 8 9 10\n", 0, 0, true},
		{"not a number", "cpu  1 2 x 4 5 6 7 8 9 10\n", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks, steal, err := machineTimes(tc.in)
			if (err != nil) != tc.err || tasks != tc.tasks || steal != tc.steal {
				t.Errorf("machineTimes(%q) = %v, %v, %v; want %v, %v, error %t", tc.in, tasks, steal, err, tc.tasks, tc.steal, tc.err)
			}
		})
	}
}

// TestStarved checks the rule on figures measured in overload test runs
// on a two-core machine.
func TestStarved(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	phase := func(testWaited, exgateWaited float64, slices int64, others float64) *Phase {
		return &Phase{name: "surge", elapsed: time.Second, cpus: 2, others: ms(others * 1000),
			procs: []procShare{
				{name: "test", ran: ms(300), waited: ms(testWaited * 1000), slices: slices},
				{name: "exgate", ran: ms(100), waited: ms(exgateWaited * 1000), slices: slices},
			}}
	}
	for _, tc := range []struct {
		name    string
		s       *Phase
		starved bool
	}{
		// A quiet machine, during the surge.
		{"quiet", phase(0.19, 0.13, 4300, 0), false},
		// Another helper's builds beside it; the test passed.
		{"busy machine, threads not held off", phase(0.47, 0.31, 5000, 0.73), false},
		// A second `go test ./cmd/exgate` beside it; cancels missed 250 ms.
		{"a second go test", phase(0.83, 0.48, 4000, 1.04), true},
		// Two busy loops and other builds beside it.
		{"busy loops", phase(2.02, 0.83, 1500, 1.60), true},
		// Threads queued for each other on an otherwise idle machine:
		// the processes' own doing.
		{"idle machine, threads queued", phase(0.9, 0.6, 3000, 0.1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Starved() != ""; got != tc.starved {
				t.Errorf("starved() = %t, want %t: %s", got, tc.starved, tc.s)
			}
		})
	}
	short := phase(0.83, 0.48, 4000, 1.04)
	short.elapsed = 100 * time.Millisecond
	if short.Starved() != "" {
		t.Errorf("a phase of %v is starved: %s", short.elapsed, short)
	}
	s := phase(0, 0, 1, 0)
	s.Explain("the backend's timers fired late")
	if s.Starved() == "" {
		t.Error("a phase another measure found starved is not starved")
	}
}

// recorder is a testing.TB that records what Settle reports instead of
// reporting it.
type recorder struct {
	testing.TB
	errors, skips []string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Logf(string, ...any)            {}
func (r *recorder) Failed() bool                   { return len(r.errors) > 0 }
func (r *recorder) Errorf(format string, a ...any) { r.errors = append(r.errors, format) }
func (r *recorder) Skipf(format string, a ...any)  { r.skips = append(r.skips, format) }

func TestSettle(t *testing.T) {
	quiet := func() *Phase { return &Phase{name: "quiet", elapsed: time.Second, cpus: 2} }
	starved := func() *Phase { p := quiet(); p.Explain("the backend's timers fired late"); return p }
	for _, tc := range []struct {
		name          string
		misses        []*Phase
		errors, skips int
	}{
		{"no miss", nil, 0, 0},
		{"a miss over a quiet phase fails", []*Phase{quiet()}, 1, 0},
		{"a miss over a starved phase skips", []*Phase{starved()}, 0, 1},
		{"misses over starved phases skip once", []*Phase{starved(), starved()}, 0, 1},
		{"a miss over a quiet phase fails beside one over a starved phase", []*Phase{starved(), quiet()}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			v := &Verdict{t: r, cpu: &watch{}}
			for _, p := range tc.misses {
				v.cpu.phases = append(v.cpu.phases, p)
				v.Errorf(p, "missed")
			}
			v.Settle()
			if len(r.errors) != tc.errors || len(r.skips) != tc.skips {
				t.Errorf("Settle: %d errors, %d skips; want %d, %d", len(r.errors), len(r.skips), tc.errors, tc.skips)
			}
		})
	}
}

// BenchmarkPhase measures what ending a phase costs: a read of /proc for
// the test process's family and of their threads' schedstat.
func BenchmarkPhase(b *testing.B) {
	v := New(b)
	b.ReportAllocs()
	for b.Loop() {
		v.Phase("phase")
	}
	v.cpu.phases = nil
}
