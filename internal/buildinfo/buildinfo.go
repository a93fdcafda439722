// Package buildinfo says what a dedupe-proxy binary knows of its own
// build: the version the linker set (make build, the release), else the
// module version the go command recorded (go install ...@v0.1.0), the Go
// version and the source revision. The version command prints it and
// the dedupe_proxy_build_info metric exports it.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Revision is the source revision, set by the linker (-X) at build time
// as the Makefile and the release do; empty: the one the go command
// recorded from the checkout, if any.
var Revision = ""

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`
	GoVersion string `json:"goversion"`
	Revision  string `json:"revision"`
}

// Get returns the running binary's Info; linkerVersion is the version set
// with -X at build time ("dev" when none was).
func Get(linkerVersion string) Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(linkerVersion, bi)
}

// FromBuildInfo is Get for a given debug.BuildInfo (nil: none).
func FromBuildInfo(linkerVersion string, bi *debug.BuildInfo) Info {
	info := Info{Version: linkerVersion, GoVersion: runtime.Version(), Revision: Revision}
	if bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if (info.Version == "" || info.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Revision != "" {
		return info
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if info.Revision != "" && modified {
		info.Revision += "-dirty"
	}
	return info
}
