package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// deathHeaders are what RabbitMQ adds when it dead-letters a message
// through a queue's dead-letter exchange (mode dlx).
var deathHeaders = []string{
	"x-death",
	"x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
	"x-last-death-queue", "x-last-death-reason", "x-last-death-exchange",
}

// Redriver moves the dead letters of a RabbitMQ source from its
// dead-letter queue back to its queue: basic.get each one, publish it
// through the default exchange to the queue with the confirmed
// Publisher, and only then ack the get. A dead letter of another queue
// sharing the dead-letter queue is held unacked and given back at the
// end, where it was.
type Redriver struct {
	o   Options
	dlq string
}

var _ broker.Redriver = (*Redriver)(nil)

// ErrNoDeadLetterQueue: the dead letters' queue is not known (mode dlx,
// or mode publish through a named exchange, without DeadLetterQueue).
var ErrNoDeadLetterQueue = errors.New("the queue that holds the dead letters is not known")

// DeadLetterQueueOf is where a source's dead letters end up: the
// configured dead-letter queue or, in mode publish through the default
// exchange, the queue its routing key names.
func DeadLetterQueueOf(o Options) (string, error) {
	switch {
	case o.DeadLetter.Mode != DeadLetterDLX && o.DeadLetter.Mode != DeadLetterPublish:
		return "", broker.ErrNoDeadLetter
	case o.DeadLetter.Queue != "":
		return o.DeadLetter.Queue, nil
	case o.DeadLetter.Mode == DeadLetterPublish && o.DeadLetter.Exchange == "":
		return o.DeadLetter.RoutingKey, nil
	}
	return "", ErrNoDeadLetterQueue
}

// NewRedriver returns a Redriver for the source o; it connects in
// Redrive.
func NewRedriver(o Options) (*Redriver, error) {
	dlq, err := DeadLetterQueueOf(o)
	if err != nil {
		return nil, err
	}
	if dlq == o.Queue {
		return nil, fmt.Errorf("the dead-letter queue is the source's queue %q", o.Queue)
	}
	return &Redriver{o: o, dlq: dlq}, nil
}

// Close implements broker.Redriver: Redrive closes what it opened.
func (r *Redriver) Close() error { return nil }

// Redrive implements broker.Redriver.
func (r *Redriver) Redrive(ctx context.Context, o broker.RedriveOptions) (res broker.RedriveResult, err error) {
	conn, err := Dial(r.o.URL, "redrive/"+r.o.Name, 10*time.Second)
	if err != nil {
		return res, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ready, err := passiveDeclare(conn, r.dlq)
	if err != nil {
		return res, fmt.Errorf("dead-letter queue %q: %w", r.dlq, err)
	}
	if _, err := passiveDeclare(conn, r.o.Queue); err != nil {
		return res, fmt.Errorf("queue %q: %w", r.o.Queue, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return res, fmt.Errorf("open channel: %w", err)
	}
	// Dead letters taken and not moved (another queue's, a dry run's, a
	// failed one) go back to the dead-letter queue. Should that fail, or
	// the process die first, RabbitMQ requeues every unacked get of the
	// closed channel all the same.
	var held []uint64
	defer func() {
		for _, tag := range held {
			_ = ch.Nack(tag, false, true)
		}
		_ = ch.Close()
	}()
	var pub *Publisher
	if !o.DryRun {
		if pub, err = NewPublisher(conn, PublisherOptions{Name: "redrive"}); err != nil {
			return res, fmt.Errorf("open publishing channel: %w", err)
		}
		defer pub.Close()
	}
	from, to := "queue "+r.dlq, "queue "+r.o.Queue
	// Only the dead letters there at the start: one that fails again
	// meanwhile comes back behind them.
	for range ready {
		if o.Done(res.Moved) {
			res.More = true
			break
		}
		d, ok, err := ch.Get(r.dlq, false)
		if err != nil {
			return res, fmt.Errorf("get from dead-letter queue %q: %w", r.dlq, err)
		}
		if !ok {
			break
		}
		if !r.ours(d) {
			held = append(held, d.DeliveryTag)
			res.Skipped++
			continue
		}
		p := redriveMessage(d)
		msg := broker.Message{Body: p.Body, ContentType: p.ContentType, Headers: stringHeaders(p.Headers),
			MessageID: p.MessageId, Source: r.o.Name, Kind: "rabbitmq", Queue: r.o.Queue}
		err = o.Run(ctx, broker.Redriven{Message: &msg, From: from, To: to}, func() error {
			if err := pub.Publish(ctx, "", r.o.Queue, p); err != nil {
				return fmt.Errorf("publish to queue %q: %w", r.o.Queue, err)
			}
			if err := ch.Ack(d.DeliveryTag, false); err != nil {
				return fmt.Errorf("the message is back in queue %q, but removing it from %q failed (RabbitMQ keeps it there, and the seen-set recognises the copy): %w", r.o.Queue, r.dlq, err)
			}
			return nil
		})
		if err != nil || o.DryRun {
			held = append(held, d.DeliveryTag)
		}
		if err != nil {
			return res, err
		}
		res.Moved++
	}
	return res, nil
}

// ours tells this source's dead letters from another queue's sharing the
// dead-letter queue: by the proxy's own headers (mode publish) or by
// RabbitMQ's record of the queue it died in (mode dlx).
func (r *Redriver) ours(d amqp.Delivery) bool {
	if src, ok := d.Headers[broker.HeaderSource].(string); ok {
		return src == r.o.Name
	}
	if q, ok := d.Headers[broker.HeaderOriginalQueue].(string); ok {
		return q == r.o.Queue
	}
	if q, ok := d.Headers["x-first-death-queue"].(string); ok {
		return q == r.o.Queue
	}
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			q, _ := t["queue"].(string)
			return q == r.o.Queue
		}
	}
	return false
}

// redriveMessage is the dead letter as it was first published: the same
// body and properties, without the proxy's x-dedupe-* headers and
// RabbitMQ's x-death records, so it starts over.
func redriveMessage(d amqp.Delivery) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		if strings.HasPrefix(strings.ToLower(k), "x-dedupe-") {
			continue
		}
		h[k] = v
	}
	for _, k := range deathHeaders {
		delete(h, k)
	}
	if len(h) == 0 {
		h = nil
	}
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// passiveDeclare looks a queue up without creating it, on a channel of
// its own (a missing queue closes the channel), and returns its ready
// messages.
func passiveDeclare(conn *amqp.Connection, name string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}
