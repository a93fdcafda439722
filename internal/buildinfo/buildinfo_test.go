package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name   string
		linker string
		bi     *debug.BuildInfo
		want   Info
	}{
		{"no build info", "dev", nil, Info{"dev", runtime.Version(), ""}},
		{"make build: the linker's version wins", "v0.2.0-3-gabc1234",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261204-abc1234"}, Settings: vcs("abc1234def", "false")},
			Info{"v0.2.0-3-gabc1234", "go1.26.8", "abc1234def"}},
		{"go install @v0.1.0: the module version", "dev",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			Info{"v0.1.0", "go1.26.8", ""}},
		{"go run in a checkout", "dev",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc1234def", "true")},
			Info{"dev", "go1.26.8", "abc1234def-dirty"}},
	} {
		if got := FromBuildInfo(c.linker, c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	// A revision set by the linker wins over the checkout's.
	Revision = "0123456789abcdef"
	defer func() { Revision = "" }()
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("abc1234def", "true")}
	if got := FromBuildInfo("v0.1.0", bi); got.Revision != "0123456789abcdef" {
		t.Errorf("linker revision: %+v", got)
	}
	if got := FromBuildInfo("v0.1.0", nil); got.Revision != "0123456789abcdef" {
		t.Errorf("linker revision without build info: %+v", got)
	}
}
