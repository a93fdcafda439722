package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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
	r.m = metrics.New(nil).ForSource(o.Name)
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

// A second settle returns broker.ErrAlreadySettled and never reaches the
// broker: RabbitMQ would answer a tag acked twice with 406 and close the
// channel, taking every delivery in flight with it.
func TestSecondSettleReturnsErrAlreadySettled(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.settle.", nil)
	r.Publish(q, amqp.Publishing{Body: []byte("first")})
	src := start(t, options(q))
	ctx := context.Background()

	first := src.next(t)
	if err := first.d.Ack(ctx); err != nil {
		t.Fatalf("first Ack: %v", err)
	}
	for what, err := range map[string]error{
		"second Ack":           first.d.Ack(ctx),
		"Requeue after Ack":    first.d.Requeue(ctx),
		"DeadLetter after Ack": first.d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "x"}),
	} {
		if !errors.Is(err, broker.ErrAlreadySettled) {
			t.Errorf("%s = %v, want ErrAlreadySettled", what, err)
		}
	}
	close(first.done)

	// Well past the acker's flush: a second ack of that tag would have
	// closed the channel by now.
	time.Sleep(50 * time.Millisecond)
	const n = 20
	for i := range n {
		r.Publish(q, amqp.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	for i := range n {
		d := src.next(t)
		if d.d.Message().Redelivered {
			t.Errorf("message %d redelivered: the channel was closed", i)
		}
		if err := d.d.Ack(ctx); err != nil {
			t.Errorf("Ack of message %d: %v", i, err)
		}
		close(d.done)
	}
	if err := src.s.Ready(); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	if c := src.reconnects(); c != 0 {
		t.Fatalf("reconnected %v times: the channel or connection was closed", c)
	}
	// Stopping hands back whatever is unacked: nothing may be.
	src.stop(t)
	if got := r.Ready(q); got != 0 {
		t.Fatalf("%d messages back in the queue after stop, want 0", got)
	}
}

// Racing settles on one delivery: exactly one reaches the broker.
func TestConcurrentSettlesSettleOnce(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.settle.", nil)
	r.Publish(q, amqp.Publishing{Body: []byte("m")})
	src := start(t, options(q))

	d := src.next(t)
	const n = 8
	errs := make([]error, n)
	var ready, wg sync.WaitGroup
	ready.Add(n)
	wg.Add(n)
	for i := range n {
		go func() {
			defer wg.Done()
			ready.Done()
			ready.Wait()
			if i%2 == 0 {
				errs[i] = d.d.Ack(context.Background())
			} else {
				errs[i] = d.d.Requeue(context.Background())
			}
		}()
	}
	wg.Wait()
	close(d.done)
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, broker.ErrAlreadySettled):
			t.Errorf("settle = %v, want nil or ErrAlreadySettled", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d racing settles went through, want 1", ok, n)
	}
	time.Sleep(50 * time.Millisecond)
	if c := src.reconnects(); c != 0 || src.s.Ready() != nil {
		t.Fatalf("reconnected %v times, Ready = %v: the channel was closed", c, src.s.Ready())
	}
}
