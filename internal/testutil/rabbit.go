package testutil

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitURL is the shared RabbitMQ the tests use (DEDUPE_TEST_AMQP_URL
// overrides it). Tests never touch queues they did not declare.
func RabbitURL() string {
	if u := os.Getenv("DEDUPE_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Rabbit is a test's own connection for declaring, publishing and counting.
type Rabbit struct {
	t    testing.TB
	Conn *amqp.Connection
	Ch   *amqp.Channel
}

// NewRabbit connects to the shared broker or fails the test clearly.
func NewRabbit(t testing.TB) *Rabbit {
	t.Helper()
	conn, err := amqp.Dial(RabbitURL())
	if err != nil {
		t.Fatalf("RabbitMQ at %s is not reachable (CI starts it; locally run .ci/run or rabbitmq-server -detached): %v", RabbitURL(), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	r := &Rabbit{t: t, Conn: conn, Ch: ch}
	t.Cleanup(func() { _ = conn.Close() })
	return r
}

// Queue declares a fresh durable queue and deletes it when the test ends.
func (r *Rabbit) Queue(prefix string, args amqp.Table) string {
	r.t.Helper()
	name := UniqueName(prefix)
	if _, err := r.Ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		r.t.Fatalf("declare queue %s: %v", name, err)
	}
	r.t.Cleanup(func() {
		if ch, err := r.Conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	return name
}

// Publish sends body to queue through the default exchange with confirms.
func (r *Rabbit) Publish(queue string, p amqp.Publishing) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.DeliveryMode == 0 {
		p.DeliveryMode = amqp.Persistent
	}
	dc, err := r.Ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		r.t.Fatalf("publish: %v", err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		r.t.Fatalf("publish not confirmed: %v", err)
	}
}

// Ready returns the number of ready (not unacked) messages in queue.
func (r *Rabbit) Ready(queue string) int {
	r.t.Helper()
	ch, err := r.Conn.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		r.t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// Get fetches one message from queue (auto-ack), or false when empty.
func (r *Rabbit) Get(queue string) (amqp.Delivery, bool) {
	r.t.Helper()
	ch, err := r.Conn.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	d, ok, err := ch.Get(queue, true)
	if err != nil {
		r.t.Fatalf("get from %s: %v", queue, err)
	}
	return d, ok
}
