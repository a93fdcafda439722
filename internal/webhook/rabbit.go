package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Headers set on every published event, besides the request's own.
const (
	// HeaderMessageID carries the event key on both brokers (on RabbitMQ
	// it is also the message_id property), so the broker source's key
	// rule header:bq-message-id (or property:message_id) finds it.
	HeaderMessageID = "bq-message-id"
	// HeaderSource names the webhook source that received the event.
	HeaderSource = "x-dedupe-webhook-source"
	// publishID correlates a basic.return with its publish.
	publishID = "x-dedupe-publish-id"
)

// RabbitSink publishes events to an exchange with publisher confirms,
// persistent and mandatory: Publish returns nil only when the broker
// confirmed the message and routed it to at least one queue.
type RabbitSink struct {
	url, exchange, routingKey string
	log                       *slog.Logger
	initial, maxDelay         time.Duration

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
	rets <-chan amqp.Return
	down error

	bouncedMu sync.Mutex
	bounced   map[string]bool

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// NewRabbitSink returns a sink; it connects in Run.
func NewRabbitSink(url, exchange, routingKey string, log *slog.Logger) *RabbitSink {
	return &RabbitSink{url: url, exchange: exchange, routingKey: routingKey, log: log,
		initial: 200 * time.Millisecond, maxDelay: 10 * time.Second,
		down: errors.New("rabbitmq: not connected yet"), bounced: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Run keeps a connection and a confirm channel open, reconnecting with
// backoff, until ctx ends or Close.
func (s *RabbitSink) Run(ctx context.Context) {
	defer close(s.done)
	delay := s.initial
	for {
		closed, err := s.connect()
		if err != nil {
			s.setDown(fmt.Errorf("rabbitmq: %w", err))
			s.log.Warn("webhook target rabbitmq unreachable, retrying", "err", err, "retry_in", delay.String())
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, s.maxDelay)
			continue
		}
		delay = s.initial
		select {
		case e := <-closed:
			s.setDown(fmt.Errorf("rabbitmq: connection or channel closed: %v", e))
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
	conn, err := amqp.DialConfig(s.url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second), Heartbeat: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	// amqp091-go closes each notify channel it was given, so the
	// connection and the channel each get their own.
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	closed := make(chan *amqp.Error, 1)
	go func() {
		select {
		case e := <-connClosed:
			closed <- e
		case e := <-chClosed:
			closed <- e
		}
	}()
	rets := ch.NotifyReturn(make(chan amqp.Return, 64))
	s.mu.Lock()
	s.conn, s.ch, s.rets, s.down = conn, ch, rets, nil
	s.mu.Unlock()
	s.log.Info("webhook target rabbitmq connected", "exchange", s.exchange, "routing_key", s.routingKey)
	return closed, nil
}

func (s *RabbitSink) setDown(err error) {
	s.mu.Lock()
	s.ch, s.down = nil, err
	s.mu.Unlock()
}

func (s *RabbitSink) closeConn() {
	s.mu.Lock()
	conn := s.conn
	s.conn, s.ch = nil, nil
	if s.down == nil {
		s.down = errors.New("rabbitmq: closed")
	}
	s.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// Ready is nil while a confirm channel is open.
func (s *RabbitSink) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Publish sends e and waits for the broker's confirm.
func (s *RabbitSink) Publish(ctx context.Context, e Event) error {
	s.mu.Lock()
	ch, rets, down := s.ch, s.rets, s.down
	s.mu.Unlock()
	if ch == nil {
		return down
	}
	id := randID()
	h := amqp.Table{}
	for k, v := range e.Headers {
		h[k] = v
	}
	h[HeaderMessageID] = e.Key
	h[HeaderSource] = e.Source
	h[publishID] = id
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, s.exchange, s.routingKey, true, false, amqp.Publishing{
		ContentType:  e.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    e.Key,
		Timestamp:    time.Now(),
		Headers:      h,
		Body:         e.Body,
	})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("rabbitmq nacked the publish")
	}
	// The broker sends basic.return before the ack of a mandatory
	// message, and amqp091-go queues it before processing the ack, so
	// draining now sees any return for id.
	s.bouncedMu.Lock()
	defer s.bouncedMu.Unlock()
drain:
	for {
		select {
		case r, open := <-rets:
			if !open {
				break drain
			}
			if rid, _ := r.Headers[publishID].(string); rid != "" {
				s.bounced[rid] = true
			}
		default:
			break drain
		}
	}
	if s.bounced[id] {
		delete(s.bounced, id)
		return errors.New("unroutable: no queue is bound for the exchange and routing key")
	}
	return nil
}

// Close stops Run and closes the connection; safe to call twice.
func (s *RabbitSink) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.closeConn()
	return nil
}
