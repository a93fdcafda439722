package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// appHealth probes app.health_url every app.health_interval and is the
// pipeline's Gate: while the app is down, deliveries wait before their
// claim, unacked, instead of burning retries against it. It starts down, so
// nothing is forwarded before the first probe succeeds (a native sidecar
// starts before its app).
type appHealth struct {
	dep   *supervise.Dep
	probe supervise.Probe
}

var errNotProbed = errors.New("not probed yet")

func newAppHealth(check func(context.Context) error, interval time.Duration, log *slog.Logger, up prometheus.Gauge) *appHealth {
	up.Set(0)
	return &appHealth{
		dep: supervise.New(supervise.Options{
			Log: log,
			Lines: supervise.Lines{
				Up:      "app is up: forwarding",
				Lost:    "app health check failed: holding messages unacked until it is back",
				Failing: "app not up yet: holding messages until its health check passes",
			},
			Err: errNotProbed,
			OnChange: func(isUp bool) {
				if isUp {
					up.Set(1)
				} else {
					up.Set(0)
				}
			},
		}),
		probe: supervise.AppProbe(check, interval),
	}
}

// Open implements pipeline.Gate.
func (h *appHealth) Open() <-chan struct{} { return h.dep.Up() }

// Err is nil while the app is up, else why it is not (for /readyz).
func (h *appHealth) Err() error { return h.dep.Err() }

// run probes until ctx ends; Run owns it and stops it after the sources.
func (h *appHealth) run(ctx context.Context) { h.probe.Run(ctx, h.dep) }
