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

	mu   sync.Mutex
	conn *amqp.Connection
	pub  *rabbitmq.Publisher
	down error

	stop     chan struct{}
	stopOnce sync.Once
}

// NewRabbitSink returns a sink; it connects in Run.
func NewRabbitSink(url, exchange, routingKey string, log *slog.Logger) *RabbitSink {
	return &RabbitSink{url: url, exchange: exchange, routingKey: routingKey, log: log,
		retry: backoff.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second},
		down:  errors.New("rabbitmq: not connected yet"),
		stop:  make(chan struct{})}
}

// Run keeps a connection and a confirmed publisher open, reconnecting
// with backoff, until ctx ends or Close.
func (s *RabbitSink) Run(ctx context.Context) {
	retry := backoff.New(s.retry)
	for {
		closed, err := s.connect()
		if err != nil {
			s.setDown(fmt.Errorf("rabbitmq: %w", err))
			delay := retry.Next()
			s.log.Warn("webhook target rabbitmq unreachable, retrying", "err", err, "retry_in", delay.String())
			if !backoff.Wait(ctx, s.stop, delay) {
				return
			}
			continue
		}
		retry.Reset()
		select {
		case e := <-closed:
			s.setDown(fmt.Errorf("rabbitmq: connection closed: %v", e))
			s.log.Warn("webhook target rabbitmq connection lost; reconnecting", "err", e)
			s.closeConn()
		case <-ctx.Done():
			s.closeConn()
			return
		case <-s.stop:
			s.closeConn()
			return
		}
	}
}

func (s *RabbitSink) connect() (<-chan *amqp.Error, error) {
	conn, err := rabbitmq.Dial(s.url, "webhook", 2*time.Second)
	if err != nil {
		return nil, err
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	pub, err := rabbitmq.NewPublisher(conn, rabbitmq.PublisherOptions{Name: "webhook target", Logger: s.log, Reopen: s.retry})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	s.mu.Lock()
	s.conn, s.pub, s.down = conn, pub, nil
	s.mu.Unlock()
	s.log.Info("webhook target rabbitmq connected", "exchange", s.exchange, "routing_key", s.routingKey)
	return closed, nil
}

func (s *RabbitSink) setDown(err error) {
	s.mu.Lock()
	s.down = err
	s.mu.Unlock()
}

func (s *RabbitSink) closeConn() {
	s.mu.Lock()
	conn, pub := s.conn, s.pub
	s.conn, s.pub = nil, nil
	if s.down == nil {
		s.down = errors.New("rabbitmq: closed")
	}
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
	pub, down := s.pub, s.down
	s.mu.Unlock()
	if pub == nil {
		return down
	}
	return pub.Ready()
}

// Publish sends e and waits for the broker's confirm.
func (s *RabbitSink) Publish(ctx context.Context, e Event) error {
	s.mu.Lock()
	pub, down := s.pub, s.down
	s.mu.Unlock()
	if pub == nil {
		return down
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
	s.closeConn()
	return nil
}
