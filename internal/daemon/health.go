package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// appHealth probes app.health_url every app.health_interval and is the
// pipeline's Gate: while the app is down, deliveries wait before their
// claim, unacked, instead of burning retries against it. It starts down, so
// nothing is forwarded before the first probe succeeds (a native sidecar
// starts before its app).
type appHealth struct {
	probe    func(context.Context) error
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	up       prometheus.Gauge

	mu     sync.Mutex
	open   chan struct{} // closed while the app is up
	isUp   bool
	err    error // why it is down
	warned bool  // the "not up yet" line was logged
}

var errNotProbed = errors.New("not probed yet")

func newAppHealth(probe func(context.Context) error, interval time.Duration, log *slog.Logger, up prometheus.Gauge) *appHealth {
	up.Set(0)
	return &appHealth{
		probe:    probe,
		interval: interval,
		// A health endpoint that cannot answer within an interval is as
		// good as down; a floor keeps tiny test intervals usable.
		timeout: max(interval, time.Second),
		log:     log,
		up:      up,
		open:    make(chan struct{}),
		err:     errNotProbed,
	}
}

// Open implements pipeline.Gate.
func (h *appHealth) Open() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// Err is nil while the app is up, else why it is not (for /readyz).
func (h *appHealth) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.isUp {
		return nil
	}
	return h.err
}

// run probes until ctx ends; Run owns it and stops it after the sources.
func (h *appHealth) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, h.timeout)
		err := h.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return // a probe cut short by shutdown says nothing about the app
		}
		h.set(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// set records a probe result; only transitions are logged.
func (h *appHealth) set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil && !h.isUp:
		h.isUp, h.err = true, nil
		close(h.open)
		h.up.Set(1)
		h.log.Info("app is up: forwarding")
	case err != nil && h.isUp:
		h.isUp, h.err = false, err
		h.open = make(chan struct{})
		h.up.Set(0)
		h.log.Warn("app health check failed: holding messages unacked until it is back", "err", err.Error())
	case err != nil:
		h.err = err
		if !h.warned {
			h.log.Warn("app not up yet: holding messages until its health check passes", "err", err.Error())
		}
	}
	h.warned = true
}
