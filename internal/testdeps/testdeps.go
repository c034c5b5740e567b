// Package testdeps finds what tests drive outside Go — commands of
// Debian packages that `make test` installs (.ci/test-deps.sh): a test
// whose dependency is missing is skipped on a developer's machine, and
// fails under CI (the CI environment variable set), where a skip would
// hide that the test never ran.
package testdeps

import (
	"os"
	"os/exec"
	"testing"
)

// Command returns the path of the command name, of Debian package pkg,
// or ends the test when it is not installed: skipped, or failed under
// CI.
func Command(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; `make test` installs it (Debian package %s)", name, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s); skipping", name, pkg)
	}
	return p
}

// Missing ends the test for want of a dependency msg names, with what
// installs it: skipped, or failed under CI.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
