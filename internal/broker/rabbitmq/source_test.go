package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// running is a Source consuming in the background for one test; its
// worker hands every delivery to the test through dels.
type running struct {
	s      *rabbitmq.Source
	dels   chan handed
	quit   chan struct{}          // closed by stop: workers stop waiting for the test
	m      *metrics.SourceMetrics // Reconnects above 0: it reconnected
	cancel context.CancelFunc
	done   chan error
}

// handed is a delivery passed from the source's worker to the test, which
// settles it and then closes done to let the worker go on.
type handed struct {
	d    broker.Delivery
	done chan struct{}
}

// options consume q with one worker and fast reconnects.
func options(q string) rabbitmq.Options {
	return rabbitmq.Options{
		Name:             "orders",
		URL:              testutil.RabbitURL(),
		Queue:            q,
		Prefetch:         10,
		Workers:          1,
		ReconnectInitial: 50 * time.Millisecond,
		ReconnectMax:     200 * time.Millisecond,
	}
}

func (r *running) reconnects() float64 { return promtest.ToFloat64(r.m.Reconnects) }

func start(t *testing.T, o rabbitmq.Options) *running {
	t.Helper()
	r := &running{dels: make(chan handed), quit: make(chan struct{}), done: make(chan error, 1)}
	r.m = metrics.New(nil).ForSource(o.Name, "rabbitmq")
	o.Metrics = r.m
	r.s = rabbitmq.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.s.Run(ctx, r.handle) }()
	t.Cleanup(func() { r.stop(t) })
	testutil.Eventually(t, 10*time.Second, "source consuming", func() bool { return r.s.Ready() == nil })
	return r
}

func (r *running) handle(d broker.Delivery) {
	h := handed{d: d, done: make(chan struct{})}
	select {
	case r.dels <- h:
	case <-r.quit:
		_ = d.Requeue(context.Background())
		return
	}
	select {
	case <-h.done:
	case <-r.quit:
		// The test gave up on it (it failed): give it back.
		_ = d.Requeue(context.Background())
	}
}

// next is the next delivery the source hands out.
func (r *running) next(t *testing.T) handed {
	t.Helper()
	select {
	case h := <-r.dels:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
		return handed{}
	}
}

// stop cancels Run and waits for it: every delivery still unacked is back
// in the queue afterwards.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	close(r.quit)
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel")
	}
	_ = r.s.Close()
}
