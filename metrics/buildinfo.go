package metrics

import (
	"runtime"
	"runtime/debug"
	"time"
)

// BuildInfo labels exgate_build_info. Empty fields are exported as
// "unknown", except GoVersion, whose zero value means runtime.Version().
type BuildInfo struct {
	// Version is the release, such as "v1.2.0". Default "unknown".
	Version string
	// Revision is the VCS commit. Default "unknown".
	Revision string
	// GoVersion is the Go release that built the binary. Default
	// runtime.Version().
	GoVersion string
}

// ReadBuildInfo returns the BuildInfo the Go toolchain embedded in the
// running binary (BuildInfoOf). Fields it cannot find are left empty.
func ReadBuildInfo() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return BuildInfo{GoVersion: runtime.Version()}
	}
	return BuildInfoOf(bi)
}

// BuildInfoOf reads the version and revision of a build from its
// debug.BuildInfo: the main module's version, and the version control
// settings a build from a git checkout records (vcs.revision, vcs.time,
// vcs.modified). Where the toolchain left the version "(devel)" although
// it recorded the commit (Go before 1.24), the version is the Go
// pseudo-version of that commit (v0.0.0-20260102150405-0123456789ab),
// with "+dirty" when the tree had uncommitted changes, as Go 1.24 and
// later write it themselves. Without version control information (a
// build with -buildvcs=false, or outside a git checkout) it is "devel",
// and Revision is empty.
func BuildInfoOf(bi *debug.BuildInfo) BuildInfo {
	info := BuildInfo{GoVersion: bi.GoVersion, Version: bi.Main.Version}
	if info.GoVersion == "" {
		info.GoVersion = runtime.Version()
	}
	var at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if info.Version == "" || info.Version == "(devel)" {
		info.Version = "devel"
		if t, err := time.Parse(time.RFC3339, at); err == nil && len(info.Revision) >= 12 {
			info.Version = "v0.0.0-" + t.UTC().Format("20060102150405") + "-" + info.Revision[:12]
			if modified {
				info.Version += "+dirty"
			}
		}
	}
	return info
}

func orUnknown(s string) string { return orDefault(s, "unknown") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
