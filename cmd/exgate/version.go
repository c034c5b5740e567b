package main

import "github.com/exgate/exgate/metrics"

// version and revision are set at link time by release builds
// (-ldflags "-X main.version=v1.2.0 -X main.revision=…"); otherwise they
// come from the build information the Go toolchain records.
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
