package rabbitmq

import (
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Against the real broker: acks in random order, some nacks with requeue,
// one delivery left unsettled for a while (a slow message). Every ack must
// reach the broker exactly once — a tag acked twice closes the channel
// (406) — and the slow message must not hold back the acks behind it.
func TestAckerCoalescesWithoutDoubleAcks(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.acker.", nil)
	const n = 300
	for i := range n {
		r.Publish(q, amqp.Publishing{Body: []byte{byte(i)}})
	}
	ch, err := r.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tags []uint64
	for len(tags) < n {
		select {
		case d := <-dels:
			tags = append(tags, d.DeliveryTag)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of %d deliveries", len(tags), n)
		}
	}
	a := newAcker(ch, slog.New(slog.DiscardHandler))
	slow := tags[0]
	rest := tags[1:]
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	requeued := 0
	for i, tag := range rest {
		if i%10 == 0 {
			if err := a.nack(tag, true); err != nil {
				t.Fatal(err)
			}
			requeued++
			continue
		}
		if err := a.ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	// The slow first delivery is still open: the acks behind it must have
	// gone out anyway (flushed alone) without any tag acked twice.
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker: %v", e)
	default:
	}
	if err := a.ack(slow); err != nil {
		t.Fatal(err)
	}
	a.close(true)
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker after the last ack: %v", e)
	default:
	}
	// Closing the channel returns what is unacked: only the requeued ones
	// (redelivered to this consumer meanwhile) may be left.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "exactly the requeued messages back in the queue", func() bool {
		return r.Ready(q) == requeued
	})
	if err := a.ack(tags[1]); err != amqp.ErrClosed {
		t.Fatalf("ack after close = %v, want ErrClosed", err)
	}
}
