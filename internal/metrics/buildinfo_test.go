package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
)

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterBuildInfo(reg, buildinfo.Info{Version: "v0.1.0", GoVersion: "go1.26.8", Revision: "abc1234"})
	want := `# HELP dedupe_proxy_build_info Always 1; its labels name the build: version, the Go version it was built with, and the source revision.
# TYPE dedupe_proxy_build_info gauge
dedupe_proxy_build_info{goversion="go1.26.8",revision="abc1234",version="v0.1.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "dedupe_proxy_build_info"); err != nil {
		t.Fatal(err)
	}
}
