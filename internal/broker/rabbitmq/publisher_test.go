package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// newPublisher opens a Publisher on a connection of its own.
func newPublisher(t *testing.T, logs *testutil.LogBuffer) (*rabbitmq.Publisher, *amqp.Connection) {
	t.Helper()
	conn, err := amqp.Dial(testutil.RabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	o := rabbitmq.PublisherOptions{Name: "test", Reopen: backoff.Policy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}}
	if logs != nil {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	p, err := rabbitmq.NewPublisher(conn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, conn
}

func msg(body string) amqp.Publishing {
	return amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent, Headers: amqp.Table{"x-test": "kept"}}
}

// Confirmed and routed: nil, and the message is in its queue with its
// headers. No queue bound: ErrUnroutable, nothing anywhere. Publishes
// running at once each get their own answer: a basic.return is matched
// to its publish, not to whichever publish drains it.
func TestPublisherConfirmsAndUnroutable(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.pub.", nil)
	p, _ := newPublisher(t, nil)
	ctx := context.Background()

	if err := p.Publish(ctx, "", q, msg("one")); err != nil {
		t.Fatalf("Publish to a bound queue = %v, want nil", err)
	}
	got, ok := r.Get(q)
	if !ok || string(got.Body) != "one" || got.Headers["x-test"] != "kept" || got.DeliveryMode != amqp.Persistent {
		t.Fatalf("queue holds %v %q headers %v", ok, got.Body, got.Headers)
	}
	nowhere := testutil.UniqueName("dptest.pub.nowhere.")
	if err := p.Publish(ctx, "", nowhere, msg("lost?")); !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("Publish with no queue bound = %v, want ErrUnroutable", err)
	}

	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			key := q
			if i%2 == 1 {
				key = nowhere
			}
			errs[i] = p.Publish(ctx, "", key, msg(fmt.Sprint(i)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("routed publish %d = %v", i, err)
		}
		if i%2 == 1 && !errors.Is(err, rabbitmq.ErrUnroutable) {
			t.Errorf("unroutable publish %d = %v, want ErrUnroutable", i, err)
		}
	}
	if n := r.Ready(q); n != 20 {
		t.Errorf("queue holds %d, want the 20 routed publishes", n)
	}
	if err := p.Failure(); err != nil {
		t.Errorf("Failure = %v: unroutable messages say nothing about the channel", err)
	}
}

// The broker closes the channel (a missing exchange: 404): the publish
// fails with the broker's reason, logged at ERROR; the Publisher reopens
// the channel on the same connection; Failure keeps the reason until a
// publish goes through again.
func TestPublisherReopensChannelClosedByServer(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.pub.", nil)
	var logs testutil.LogBuffer
	p, conn := newPublisher(t, &logs)
	ctx := context.Background()

	missing := testutil.UniqueName("dptest.pub.noexchange.")
	err := p.Publish(ctx, missing, q, msg("x"))
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") || !strings.Contains(err.Error(), "test channel closed by the broker") {
		t.Fatalf("Publish to a missing exchange = %v, want the broker's NOT_FOUND", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "no exchange") {
		t.Errorf("no ERROR with the broker's reason; log:\n%s", logs.String())
	}
	testutil.Eventually(t, 10*time.Second, "channel reopened", func() bool { return p.Ready() == nil })
	if err := p.Failure(); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Errorf("Failure = %v after the reopen, want NOT_FOUND until a publish goes through", err)
	}
	if err := p.Publish(ctx, "", q, msg("after")); err != nil {
		t.Fatalf("Publish after the reopen = %v", err)
	}
	if err := p.Failure(); err != nil {
		t.Errorf("Failure = %v after a publish went through", err)
	}
	if conn.IsClosed() {
		t.Error("the connection was closed to recover the channel")
	}
	if n := r.Ready(q); n != 1 {
		t.Errorf("queue holds %d, want 1", n)
	}
}

// When the connection goes, the Publisher is done: Ready says so, a
// publish fails at once, and Close returns (its goroutine has ended).
func TestPublisherEndsWithItsConnection(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.pub.", nil)
	p, conn := newPublisher(t, nil)
	_ = conn.Close()
	testutil.Eventually(t, 5*time.Second, "publisher down", func() bool { return p.Ready() != nil })
	if err := p.Publish(context.Background(), "", q, msg("x")); err == nil {
		t.Fatal("Publish on a closed connection = nil")
	}
	closed := make(chan struct{})
	go func() { p.Close(); p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs after the connection closed")
	}
	if n := r.Ready(q); n != 0 {
		t.Errorf("queue holds %d, want 0", n)
	}
}

// The broker closing the channel again and again (every publish to a
// missing exchange does) is one outage: one ERROR when it starts, the
// closes and reopens in between at debug, and one line when a publish
// goes through again, with down_for.
func TestPublisherOutageLoggedOnce(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.pub.", nil)
	var logs testutil.LogBuffer
	p, _ := newPublisher(t, &logs)
	ctx := context.Background()
	missing := testutil.UniqueName("dptest.pub.noexchange.")
	for i := range 5 {
		if err := p.Publish(ctx, missing, q, msg("x")); err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
			t.Fatalf("publish %d to a missing exchange = %v, want NOT_FOUND", i, err)
		}
		testutil.Eventually(t, 10*time.Second, "channel reopened", func() bool { return p.Ready() == nil })
	}
	if err := p.Publish(ctx, "", q, msg("after")); err != nil {
		t.Fatalf("Publish after the reopens = %v", err)
	}
	if err := p.Publish(ctx, "", q, msg("again")); err != nil {
		t.Fatalf("a second Publish = %v", err)
	}
	var errs, infos []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case strings.Contains(line, "level=ERROR"), strings.Contains(line, "level=WARN"):
			errs = append(errs, line)
		case strings.Contains(line, "level=INFO"):
			infos = append(infos, line)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "level=ERROR") || !strings.Contains(errs[0], "test channel closed by the broker") || !strings.Contains(errs[0], "no exchange") {
		t.Errorf("%d error/warn lines, want the one that starts the outage, with the broker's reason:\n%s", len(errs), logs.String())
	}
	if len(infos) != 1 || !strings.Contains(infos[0], "test publishing again") || !strings.Contains(infos[0], "down_for=") {
		t.Errorf("%d info lines, want the one that ends the outage, with down_for:\n%s", len(infos), logs.String())
	}
}
