package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
)

// RegisterBuildInfo registers dedupe_proxy_build_info{version, goversion,
// revision}, always 1: which build each proxy runs, to join onto other
// series or count a rollout's progress by.
func RegisterBuildInfo(reg prometheus.Registerer, b buildinfo.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "dedupe_proxy_build_info",
		Help:        "Always 1; its labels name the build: version, the Go version it was built with, and the source revision.",
		ConstLabels: prometheus.Labels{"version": b.Version, "goversion": b.GoVersion, "revision": b.Revision},
	})
	g.Set(1)
	reg.MustRegister(g)
}
