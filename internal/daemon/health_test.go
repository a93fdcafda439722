package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The gate starts closed, opens on the first passing probe, closes on a
// failing one, and app_up follows it.
func TestAppHealthGate(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
	gauge.Set(1)
	var fail atomic.Bool
	fail.Store(true)
	h := newAppHealth(func(context.Context) error {
		if fail.Load() {
			return errors.New("status 503")
		}
		return nil
	}, 10*time.Millisecond, slog.New(slog.DiscardHandler), gauge)
	if closed(h.Open()) || h.Err() == nil || testutil.ToFloat64(gauge) != 0 {
		t.Fatal("gate open before any probe")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()
	defer func() { cancel(); <-done }()

	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("a failing probe recorded", func() bool { return h.Err() != nil && h.Err() != errNotProbed })
	held := h.Open()
	if closed(held) {
		t.Fatal("gate open while the probe fails")
	}
	fail.Store(false)
	wait("gate open", func() bool { return closed(held) })
	if h.Err() != nil || testutil.ToFloat64(gauge) != 1 || !closed(h.Open()) {
		t.Fatalf("after a passing probe: err %v up %v", h.Err(), testutil.ToFloat64(gauge))
	}
	fail.Store(true)
	wait("gate closed again", func() bool { return !closed(h.Open()) })
	if h.Err() == nil || testutil.ToFloat64(gauge) != 0 {
		t.Fatalf("after a failing probe: err %v up %v", h.Err(), testutil.ToFloat64(gauge))
	}
}
