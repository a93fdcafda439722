package rabbitmq_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A dead letter to a missing exchange makes RabbitMQ close the publishing
// channel (404) but not the connection. The message is requeued, /readyz
// (Ready) names the dead-letter channel and the AMQP error, and once the
// exchange exists the channel, reopened meanwhile, delivers the dead
// letter without a reconnect.
func TestDeadLetterChannelReopensAfterChannelError(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.dlpub.", nil)
	dlq := r.Queue("dptest.dlpub.dlq.", nil)
	exchange := testutil.UniqueName("dptest.dlpub.x.")
	t.Cleanup(func() {
		if ch, err := r.Conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
			_ = ch.Close()
		}
	})
	r.Publish(q, amqp.Publishing{Body: []byte("poison")})

	var logs testutil.LogBuffer
	o := options(q)
	o.DeadLetter.Mode = rabbitmq.DeadLetterPublish
	o.DeadLetter.Exchange = exchange
	o.DeadLetter.RoutingKey = dlq
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	src := start(t, o)
	ctx := context.Background()
	info := broker.DeadLetterInfo{Reason: "permanent: status 400", LastStatus: 400, Attempts: 1}

	d := src.next(t)
	err := d.d.DeadLetter(ctx, info)
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("DeadLetter to a missing exchange = %v, want the broker's NOT_FOUND", err)
	}
	t.Logf("DeadLetter: %v", err)
	if err := d.d.Requeue(ctx); err != nil {
		t.Fatalf("Requeue after the failed dead letter: %v", err)
	}
	close(d.done)
	t.Logf("Ready: %v", src.s.Ready())
	if err := src.s.Ready(); err == nil || !strings.Contains(err.Error(), "dead-letter channel") || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("Ready = %v, want an error naming the dead-letter channel and NOT_FOUND", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "no exchange") {
		t.Fatalf("no error logged with the AMQP reason; log:\n%s", logs.String())
	}

	// The message was requeued, not lost: it comes back.
	d = src.next(t)
	if string(d.d.Message().Body) != "poison" || !d.d.Message().Redelivered {
		t.Fatalf("got %q (redelivered %v), want the requeued poison message", d.d.Message().Body, d.d.Message().Redelivered)
	}
	if err := r.Ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Ch.QueueBind(dlq, dlq, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	// The channel may still be reopening: as the pipeline does, requeue
	// and try again on the redelivery.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := d.d.DeadLetter(ctx, info)
		if err == nil {
			close(d.done)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letter still failing 10s after the exchange was declared: %v", err)
		}
		if err := d.d.Requeue(ctx); err != nil {
			t.Fatal(err)
		}
		close(d.done)
		time.Sleep(20 * time.Millisecond)
		d = src.next(t)
	}

	testutil.Eventually(t, 5*time.Second, "the dead letter in its queue", func() bool { return r.Ready(dlq) == 1 })
	dl, _ := r.Get(dlq)
	if string(dl.Body) != "poison" || dl.Headers[broker.HeaderReason] != "permanent: status 400" {
		t.Fatalf("dead letter: body %q headers %v", dl.Body, dl.Headers)
	}
	if err := src.s.Ready(); err != nil {
		t.Fatalf("Ready = %v after a dead letter went through", err)
	}
	if c := src.reconnects(); c != 0 {
		t.Fatalf("reconnected %v times: the connection was dropped to recover", c)
	}
	src.stop(t)
	if got := r.Ready(q); got != 0 {
		t.Fatalf("%d messages left in the source queue, want 0", got)
	}
}
