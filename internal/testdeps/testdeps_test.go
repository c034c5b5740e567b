package testdeps

import (
	"fmt"
	"runtime"
	"testing"
)

// ending records how a test would have ended, and ends its goroutine
// there, as testing's Skip and Fatal do.
type ending struct {
	testing.TB
	skipped, failed string
}

func (e *ending) Helper()                   {}
func (e *ending) Skip(a ...any)             { e.skipped = fmt.Sprint(a...); runtime.Goexit() }
func (e *ending) Skipf(f string, a ...any)  { e.skipped = fmt.Sprintf(f, a...); runtime.Goexit() }
func (e *ending) Fatal(a ...any)            { e.failed = fmt.Sprint(a...); runtime.Goexit() }
func (e *ending) Fatalf(f string, a ...any) { e.failed = fmt.Sprintf(f, a...); runtime.Goexit() }

// run calls f with e in a goroutine of its own, which e's Skip and Fatal
// end, and waits for it.
func (e *ending) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// TestCommand: an installed command is found; a missing one skips the
// test on a developer's machine and fails it under CI, naming its
// package; Missing does the same with its message.
func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		name, command, ci string
		missing           bool // Missing in place of Command
		skip, fail        string
	}{
		{name: "installed", command: "sh"},
		{name: "missing", command: "exgate-no-such-command", skip: "exgate-no-such-command is not installed (apt-get install pkg); skipping"},
		{name: "missing under CI", command: "exgate-no-such-command", ci: "true", fail: "exgate-no-such-command is not installed; `make test` installs it (Debian package pkg)"},
		{name: "Missing", missing: true, skip: "no python3 (apt-get install python3)"},
		{name: "Missing under CI", missing: true, ci: "true", fail: "no python3 (apt-get install python3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			e := &ending{TB: t}
			p := "none"
			e.run(func() {
				if tc.missing {
					Missing(e, "no python3 (apt-get install python3)")
					return
				}
				p = Command(e, tc.command, "pkg")
			})
			if tc.command == "sh" && (p == "" || p == "none") {
				t.Errorf("Command(%q) = %q, want its path", tc.command, p)
			}
			if e.skipped != tc.skip || e.failed != tc.fail {
				t.Errorf("skipped %q, failed %q; want %q, %q", e.skipped, e.failed, tc.skip, tc.fail)
			}
		})
	}
}
