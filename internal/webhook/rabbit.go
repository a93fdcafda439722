package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// Headers set on every published event, besides the request's own.
const (
	// HeaderMessageID carries the event key on both brokers (on RabbitMQ
	// it is also the message_id property), so the broker source's key
	// rule header:bq-message-id (or property:message_id) finds it.
	HeaderMessageID = "bq-message-id"
	// HeaderSource names the webhook source that received the event.
	HeaderSource = "x-dedupe-webhook-source"
)

// RabbitSink publishes events to an exchange through the broker's one
// confirmed publisher (rabbitmq.Publisher), persistent and mandatory:
// Publish returns nil only when the broker confirmed the message and
// routed it to at least one queue. The sink owns its connection and
// redials it with backoff; the Publisher reopens its channel when the
// broker closes only that (a missing exchange).
type RabbitSink struct {
	url, exchange, routingKey string
	log                       *slog.Logger
	retry                     backoff.Policy
	// dep is up while connected; its error is what Ready and Publish
	// answer while not.
	dep *supervise.Dep

	mu   sync.Mutex
	conn *amqp.Connection
	pub  *rabbitmq.Publisher

	stop     chan struct{}
	stopOnce sync.Once
}

// NewRabbitSink returns a sink; it connects in Run.
func NewRabbitSink(url, exchange, routingKey string, log *slog.Logger) *RabbitSink {
	return &RabbitSink{url: url, exchange: exchange, routingKey: routingKey, log: log,
		retry: backoff.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second},
		dep: supervise.New(supervise.Options{Log: log, Err: errors.New("rabbitmq: not connected yet"), Lines: supervise.Lines{
			Up:      "webhook target rabbitmq connected",
			Lost:    "webhook target rabbitmq connection lost; reconnecting",
			Failing: "webhook target rabbitmq unreachable, retrying",
		}}),
		stop: make(chan struct{})}
}

// Run keeps a connection and a confirmed publisher open, reconnecting
// with backoff, until ctx ends or Close.
func (s *RabbitSink) Run(ctx context.Context) {
	supervise.Loop{Dep: s.dep, Policy: s.retry, Stop: s.stop}.Run(ctx, s.session)
}

// session is one connection, from the dial until it closes, ctx ends or
// Close.
func (s *RabbitSink) session(ctx context.Context, _ bool) (bool, error) {
	conn, err := rabbitmq.Dial(s.url, "webhook", 2*time.Second)
	if err != nil {
		return false, fmt.Errorf("rabbitmq: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	pub, err := rabbitmq.NewPublisher(conn, rabbitmq.PublisherOptions{Name: "webhook target", Logger: s.log, Reopen: s.retry})
	if err != nil {
		_ = conn.Close()
		return false, fmt.Errorf("rabbitmq: %w", err)
	}
	s.mu.Lock()
	s.conn, s.pub = conn, pub
	s.mu.Unlock()
	s.dep.SetUp("exchange", s.exchange, "routing_key", s.routingKey)
	select {
	case e := <-closed:
		err = fmt.Errorf("rabbitmq: connection closed: %v", e)
	case <-ctx.Done():
	case <-s.stop:
	}
	s.closeConn(err)
	return true, err
}

// closeConn closes the connection; err is why (nil: a stop).
func (s *RabbitSink) closeConn(err error) {
	if err == nil {
		err = errors.New("rabbitmq: closed")
	}
	s.dep.Lose(err)
	s.mu.Lock()
	conn, pub := s.conn, s.pub
	s.conn, s.pub = nil, nil
	s.mu.Unlock()
	if pub != nil {
		pub.Close()
	}
	if conn != nil {
		_ = conn.Close()
	}
}

// Ready is nil while the connection and the publishing channel are open.
// A publish that failed does not keep it failing: an unready webhook
// receives no requests, so none could show it recovered.
func (s *RabbitSink) Ready() error {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub == nil {
		return s.down()
	}
	return pub.Ready()
}

// Publish sends e and waits for the broker's confirm.
func (s *RabbitSink) Publish(ctx context.Context, e Event) error {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub == nil {
		return s.down()
	}
	h := amqp.Table{}
	for k, v := range e.Headers {
		h[k] = v
	}
	h[HeaderMessageID] = e.Key
	h[HeaderSource] = e.Source
	return pub.Publish(ctx, s.exchange, s.routingKey, amqp.Publishing{
		ContentType:  e.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    e.Key,
		Timestamp:    time.Now(),
		Headers:      h,
		Body:         e.Body,
	})
}

// Close stops Run and closes the connection; safe to call twice.
func (s *RabbitSink) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.closeConn(nil)
	return nil
}

// down is why the sink is not connected.
func (s *RabbitSink) down() error {
	if err := s.dep.Err(); err != nil {
		return err
	}
	// Between a lost connection and the dependency marked down.
	return errors.New("rabbitmq: not connected")
}
