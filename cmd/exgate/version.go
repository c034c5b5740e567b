package main

import "github.com/exgate/exgate/metrics"

// version and revision are set at link time by the Makefile and the
// Dockerfile (-ldflags "-X main.version=v1.2.0 -X main.revision=…", from
// git); otherwise they come from the build information the Go toolchain
// records (metrics.BuildInfoOf), which it cannot in a git worktree or
// with -buildvcs=false.
var version, revision string

// buildInfo returns the version, revision and Go version of this binary.
func buildInfo() metrics.BuildInfo {
	bi := metrics.ReadBuildInfo()
	if version != "" {
		bi.Version = version
	}
	if revision != "" {
		bi.Revision = revision
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	return bi
}

// versionString is what -version prints: "exgate", the version and, when
// known, the first 12 digits of the revision.
func versionString() string {
	bi := buildInfo()
	s := "exgate " + bi.Version
	if len(bi.Revision) >= 12 {
		s += " " + bi.Revision[:12]
	} else if bi.Revision != "" {
		s += " " + bi.Revision
	}
	return s
}

// versionLine is what -version prints: versionString, and for a build
// that recorded neither a version nor a revision, how to make one that
// does.
func versionLine() string {
	if bi := buildInfo(); bi.Version == "devel" && bi.Revision == "" {
		return versionString() + " (no version recorded: build with make build, or go build -buildvcs=true in a git clone)"
	}
	return versionString()
}
