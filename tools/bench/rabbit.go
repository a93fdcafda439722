package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitBroker is the local RabbitMQ. Rows use durable classic queues and
// persistent messages, as a production queue would.
type rabbitBroker struct {
	o       options
	conn    *amqp.Connection
	version string
	pid     int // the RabbitMQ server's, for its CPU time; 0 if unknown

	mu     sync.Mutex
	queues []string // declared and not yet deleted
}

func newRabbitBroker(o options) (*rabbitBroker, error) {
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at %s is not reachable (%v); start it: rabbitmq-server -detached", redactAMQP(o.amqpURL), err)
	}
	v, _ := conn.Properties["version"].(string)
	r := &rabbitBroker{o: o, conn: conn, version: v}
	if u, err := amqp.ParseURI(o.amqpURL); err == nil && (u.Host == "127.0.0.1" || u.Host == "localhost") {
		r.pid = listenerPID(u.Port)
	}
	return r, nil
}

func (r *rabbitBroker) name() string   { return "RabbitMQ" }
func (r *rabbitBroker) short() string  { return "rabbitmq" }
func (r *rabbitBroker) serverPID() int { return r.pid }

// close deletes any queue a row left behind (an interrupted run).
func (r *rabbitBroker) close() {
	r.mu.Lock()
	qs := r.queues
	r.queues = nil
	r.mu.Unlock()
	for _, q := range qs {
		r.deleteQueue(q)
	}
	_ = r.conn.Close()
}

func (r *rabbitBroker) deleteQueue(q string) {
	ch, err := r.conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	_, _ = ch.QueueDelete(q, false, false, false)
}

func (r *rabbitBroker) newDest(_ context.Context, id string) (dest, error) {
	ch, err := r.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(id, true, false, false, false, nil); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.queues = append(r.queues, id)
	r.mu.Unlock()
	return &rabbitDest{b: r, queue: id}, nil
}

type rabbitDest struct {
	b     *rabbitBroker
	queue string
}

func (d *rabbitDest) cleanup() {
	d.b.deleteQueue(d.queue)
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	for i, q := range d.b.queues {
		if q == d.queue {
			d.b.queues = append(d.b.queues[:i], d.b.queues[i+1:]...)
			break
		}
	}
}

func (d *rabbitDest) inflightBound() int { return d.b.o.prefetch }

func (d *rabbitDest) setOrdering(string) {}

func (d *rabbitDest) proxySource() string {
	return fmt.Sprintf(`    type: rabbitmq
    rabbitmq:
      url: "%s"
      queue: "%s"
      prefetch: %d
      workers: %d
`, d.b.o.amqpURL, d.queue, d.b.o.prefetch, d.b.o.workers)
}

func (d *rabbitDest) bareArgs() []string {
	return []string{"-broker", "rabbitmq", "-amqp", d.b.o.amqpURL, "-queue", d.queue,
		"-prefetch", strconv.Itoa(d.b.o.prefetch), "-workers", strconv.Itoa(d.b.o.workers)}
}

// publish sends with publisher confirms, at most 1,000 unconfirmed.
func (d *rabbitDest) publish(ctx context.Context, n int, key func(int) string, body func(int64, string) []byte) error {
	p, err := d.newPublisher()
	if err != nil {
		return err
	}
	ts := nowNanos()
	for i := range n {
		k := key(i)
		if err := p.send(k, body(ts, k)); err != nil {
			_ = p.close()
			return err
		}
		if len(p.pending) >= 1000 {
			if err := p.wait(ctx); err != nil {
				_ = p.close()
				return err
			}
		}
		if ctx.Err() != nil {
			_ = p.close()
			return ctx.Err()
		}
	}
	return p.close()
}

func (d *rabbitDest) pacer(context.Context) (pacer, error) { return d.newPublisher() }

type rabbitPublisher struct {
	ch      *amqp.Channel
	queue   string
	pending []*amqp.DeferredConfirmation
}

func (d *rabbitDest) newPublisher() (*rabbitPublisher, error) {
	ch, err := d.b.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, err
	}
	return &rabbitPublisher{ch: ch, queue: d.queue}, nil
}

func (p *rabbitPublisher) send(key string, body []byte) error {
	dc, err := p.ch.PublishWithDeferredConfirm("", p.queue, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    key,
		Body:         body,
	})
	if err != nil {
		return err
	}
	p.pending = append(p.pending, dc)
	return nil
}

func (p *rabbitPublisher) wait(ctx context.Context) error {
	for _, dc := range p.pending {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("RabbitMQ nacked a publish")
		}
	}
	p.pending = p.pending[:0]
	return nil
}

func (p *rabbitPublisher) close() error {
	err := p.wait(context.Background())
	_ = p.ch.Close()
	return err
}

func redactAMQP(s string) string {
	if u, err := amqp.ParseURI(s); err == nil && u.Password != "" {
		return strings.Replace(s, u.Password, "xxxxx", 1)
	}
	return s
}
