// Package rabbitmq is the AMQP 0-9-1 source: manual acks, prefetch, a fixed
// pool of workers, and a reconnect loop — amqp091-go does not reconnect by
// itself, and a dropped connection silently ends its delivery channel.
package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
)

// Dead-letter modes.
const (
	DeadLetterNone    = "none"
	DeadLetterDLX     = "dlx"
	DeadLetterPublish = "publish"
)

// Options configure a Source.
type Options struct {
	Name             string
	URL              string
	Queue            string
	Prefetch         int
	Workers          int
	ConsumerTag      string
	ReconnectInitial time.Duration
	ReconnectMax     time.Duration
	// DeadLetterMode is none, dlx or publish; publish sends to
	// DeadLetterExchange with DeadLetterRoutingKey.
	DeadLetterMode       string
	DeadLetterExchange   string
	DeadLetterRoutingKey string
	Logger               *slog.Logger
	// Metrics is the source's handle; nil: none.
	Metrics *metrics.SourceMetrics
}

// Source consumes one queue.
type Source struct {
	o         Options
	log       *slog.Logger
	connected atomic.Bool
	// pub is the session's dead-letter publisher (publish mode), for Ready.
	pub  atomic.Pointer[publisher]
	mu   sync.Mutex
	conn *amqp.Connection
	// down is when consuming stopped, zero while it runs; Run's own.
	down time.Time
}

var _ broker.Source = (*Source)(nil)

// New returns a Source; it connects when Run is called.
func New(o Options) *Source {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.ReconnectInitial <= 0 {
		o.ReconnectInitial = 500 * time.Millisecond
	}
	if o.ReconnectMax < o.ReconnectInitial {
		o.ReconnectMax = o.ReconnectInitial
	}
	if o.DeadLetterMode == "" {
		o.DeadLetterMode = DeadLetterNone
	}
	if o.ConsumerTag == "" {
		host, _ := os.Hostname()
		o.ConsumerTag = fmt.Sprintf("dedupe-proxy/%s/%s/%d/%s", o.Name, host, os.Getpid(), randHex(4))
	}
	return &Source{o: o, log: o.Logger.With("source", o.Name, "queue", o.Queue)}
}

// Name implements broker.Source.
func (s *Source) Name() string { return s.o.Name }

// Requeues implements broker.Source: a nacked message goes back to the
// queue, possibly to another replica.
func (s *Source) Requeues() bool { return true }

// Ready implements broker.Source: nil while consuming and, in publish
// mode, while dead letters can go out — a consumer whose dead letters all
// fail keeps requeueing its failing messages.
func (s *Source) Ready() error {
	if !s.connected.Load() {
		return broker.ErrNotConnected
	}
	if pub := s.pub.Load(); pub != nil {
		if err := pub.failure(); err != nil {
			return fmt.Errorf("dead letters cannot be published: %w", err)
		}
	}
	return nil
}

// Close implements broker.Source.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		err := s.conn.Close()
		s.conn = nil
		if errors.Is(err, amqp.ErrClosed) {
			return nil
		}
		return err
	}
	return nil
}

// Run implements broker.Source.
func (s *Source) Run(ctx context.Context, h broker.Handler) error {
	retry := backoff.New(s.reconnect())
	first := true
	// One warning when consuming stops (or cannot start), debug lines for
	// the retries after it; "rabbitmq consuming" says it is back.
	for {
		connected, err := s.session(ctx, h, !first)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			first = false
			retry.Reset()
		}
		delay := retry.Next()
		msg := "rabbitmq connection lost, reconnecting"
		if !connected {
			// Never got to consuming: a wrong URL, credentials or queue
			// name is more likely than a network blip; the error says.
			msg = "rabbitmq: cannot consume, retrying"
		}
		level := slog.LevelDebug
		if connected || s.down.IsZero() {
			level = slog.LevelWarn
			s.down = time.Now()
		}
		s.log.Log(ctx, level, msg, "err", errText(err), "retry_in", delay.String())
		if !backoff.Wait(ctx, nil, delay) {
			return nil
		}
	}
}

// reconnect is the backoff between sessions, and between attempts to
// reopen the dead-letter channel.
func (s *Source) reconnect() backoff.Policy {
	return backoff.Policy{Initial: s.o.ReconnectInitial, Max: s.o.ReconnectMax}
}

// session is one connection's lifetime: it returns when the connection or
// channel dies (error) or ctx is cancelled (nil), and only after every
// worker has returned, so no handler outlives its channel unnoticed.
func (s *Source) session(ctx context.Context, h broker.Handler, reconnect bool) (connected bool, err error) {
	conn, err := amqp.DialConfig(s.o.URL, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Properties: amqp.Table{
			"connection_name": "dedupe-proxy/" + s.o.Name,
			"product":         "dedupe-proxy",
		},
	})
	if err != nil {
		return false, fmt.Errorf("dial: %w", redactErr(err, s.o.URL))
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	defer func() {
		s.connected.Store(false)
		_ = conn.Close()
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
	}()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))

	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(s.o.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	var pub *publisher
	if s.o.DeadLetterMode == DeadLetterPublish {
		if pub, err = newPublisher(conn, s.log, s.o.ReconnectInitial, s.o.ReconnectMax); err != nil {
			return false, fmt.Errorf("open dead-letter channel: %w", err)
		}
		stop, watched := make(chan struct{}), make(chan struct{})
		go func() { defer close(watched); pub.watch(stop) }()
		s.pub.Store(pub)
		defer func() {
			s.pub.Store(nil)
			close(stop)
			<-watched
		}()
	}
	deliveries, err := ch.Consume(s.o.Queue, s.o.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume queue %q: %w", s.o.Queue, err)
	}
	s.connected.Store(true)
	if reconnect && s.o.Metrics != nil {
		s.o.Metrics.Reconnects.Inc()
	}
	attrs := []any{"prefetch", s.o.Prefetch, "workers", s.o.Workers, "reconnect", reconnect}
	if !s.down.IsZero() {
		attrs = append(attrs, "down_for", time.Since(s.down).Round(time.Millisecond).String())
		s.down = time.Time{}
	}
	s.log.Info("rabbitmq consuming", attrs...)

	lost := make(chan struct{})
	acks := newAcker(ch, s.log)
	var stopping atomic.Bool
	var wg sync.WaitGroup
	for range s.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				if stopping.Load() {
					// Prefetched but never started: give it straight back.
					_ = acks.nack(d.DeliveryTag, true)
					continue
				}
				h(s.wrap(d, lost, pub, acks))
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	var cause error
	select {
	case <-ctx.Done():
		stopping.Store(true)
		// Cancel stops the server sending and closes deliveries, which
		// ends the workers once their current handler returns.
		if err := ch.Cancel(s.o.ConsumerTag, false); err != nil {
			s.log.Warn("rabbitmq cancel consumer", "err", err)
		}
		<-workersDone
		acks.close(true)
		return true, nil
	case e := <-connClosed:
		cause = fmt.Errorf("connection closed: %v", e)
	case e := <-chClosed:
		cause = fmt.Errorf("channel closed: %v", e)
	case <-workersDone:
		cause = errors.New("consumer cancelled by the server (queue deleted?)")
	}
	s.connected.Store(false)
	close(lost)
	acks.close(false)
	_ = conn.Close()
	<-workersDone
	return true, cause
}

func (s *Source) wrap(d amqp.Delivery, lost chan struct{}, pub *publisher, acks *acker) *delivery {
	ct := d.ContentType
	return &delivery{
		d:    d,
		acks: acks,
		src:  s,
		pub:  pub,
		lost: lost,
		msg: broker.Message{
			Body:        d.Body,
			ContentType: ct,
			Headers:     stringHeaders(d.Headers),
			MessageID:   d.MessageId,
			Source:      s.o.Name,
			Kind:        "rabbitmq",
			Queue:       s.o.Queue,
			Redelivered: d.Redelivered,
			Received:    time.Now(),
		},
	}
}

type delivery struct {
	d    amqp.Delivery
	acks *acker
	msg  broker.Message
	src  *Source
	pub  *publisher
	lost chan struct{}
	// settled is claimed by the first settle, before anything reaches the
	// channel: a tag acked or nacked twice is unknown to RabbitMQ, which
	// closes the channel (406) and with it every delivery in flight.
	settled atomic.Bool
}

func (d *delivery) Message() *broker.Message { return &d.msg }
func (d *delivery) Lost() <-chan struct{}    { return d.lost }

// Ack goes through the delivery's own channel: a tag acked on another
// channel is unknown there, and RabbitMQ closes that channel (406).
func (d *delivery) Ack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.acks.ack(d.d.DeliveryTag)
}

func (d *delivery) Requeue(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.acks.nack(d.d.DeliveryTag, true)
}

func (d *delivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	switch d.src.o.DeadLetterMode {
	case DeadLetterDLX:
		return d.acks.nack(d.d.DeliveryTag, false)
	case DeadLetterPublish:
		if err := d.pub.publish(ctx, d.src.o.DeadLetterExchange, d.src.o.DeadLetterRoutingKey, d.deadLetterMessage(info)); err != nil {
			// Nothing reached the consumer channel: the caller requeues.
			d.settled.Store(false)
			return fmt.Errorf("publish dead letter to exchange %q routing key %q: %w", d.src.o.DeadLetterExchange, d.src.o.DeadLetterRoutingKey, err)
		}
		return d.acks.ack(d.d.DeliveryTag)
	}
	d.settled.Store(false)
	return broker.ErrNoDeadLetter
}

func (d *delivery) deadLetterMessage(info broker.DeadLetterInfo) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.d.Headers {
		h[k] = v
	}
	h[broker.HeaderReason] = info.Reason
	h[broker.HeaderLastStatus] = int32(info.LastStatus)
	h[broker.HeaderLastError] = info.LastError
	h[broker.HeaderAttempts] = int32(info.Attempts)
	h[broker.HeaderSource] = d.src.o.Name
	h[broker.HeaderOriginalQueue] = d.src.o.Queue
	h[broker.HeaderDeadLetteredAt] = time.Now().UTC().Format(time.RFC3339Nano)
	return amqp.Publishing{
		Headers:         h,
		ContentType:     d.d.ContentType,
		ContentEncoding: d.d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.d.Priority,
		CorrelationId:   d.d.CorrelationId,
		MessageId:       d.d.MessageId,
		Timestamp:       d.d.Timestamp,
		Type:            d.d.Type,
		AppId:           d.d.AppId,
		Body:            d.d.Body,
	}
}

// publisher publishes dead letters with confirms and mandatory routing: a
// dead letter the broker confirms but could not route would be a silent
// loss, so a basic.return turns into an error and the message is requeued.
//
// A channel error (a missing exchange: 404 NOT_FOUND) closes only the
// publishing channel; the connection and the consumer live on, so nothing
// else would notice and every later dead letter would fail until the
// connection dropped. watch reopens the channel with backoff; a dead
// letter in the gap fails at once and is requeued by the caller. failure
// says why dead letters cannot go out, for Ready.
type publisher struct {
	conn     *amqp.Connection
	log      *slog.Logger
	initial  time.Duration
	maxDelay time.Duration

	mu sync.Mutex
	// cur is the open channel; nil while it is being reopened, and then
	// down says why.
	cur  *pubChannel
	down error
	// lastErr is the channel error the last dead letter failed with; it
	// stays until one goes through, since reopening does not prove the
	// cause (the exchange) was fixed.
	lastErr error

	bouncedMu sync.Mutex
	bounced   map[string]bool
}

// pubChannel is one incarnation of the publishing channel.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	// done is closed once the channel has closed and why is set: amqp091
	// fails the pending confirms of a closed channel as plain nacks, and
	// why is the broker's reason.
	done chan struct{}
	why  error
}

func newPublisher(conn *amqp.Connection, log *slog.Logger, initial, maxDelay time.Duration) (*publisher, error) {
	p := &publisher{conn: conn, log: log, initial: initial, maxDelay: maxDelay, bounced: map[string]bool{}}
	pc, err := p.open()
	if err != nil {
		return nil, err
	}
	p.cur = pc
	return p, nil
}

func (p *publisher) open() (*pubChannel, error) {
	ch, err := p.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &pubChannel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 64)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		done:    make(chan struct{}),
	}, nil
}

// watch reopens the channel whenever the broker closes it while the
// connection lives, until stop is closed or the connection goes (the
// session reconnects then, with a new publisher).
func (p *publisher) watch(stop <-chan struct{}) {
	for {
		p.mu.Lock()
		pc := p.cur
		p.mu.Unlock()
		var e *amqp.Error
		select {
		case e = <-pc.closes:
		case <-stop:
		}
		if e == nil {
			pc.why = amqp.ErrClosed
		} else {
			pc.why = fmt.Errorf("dead-letter channel closed by the broker: %w", e)
		}
		// Log and record the cause before waking waiters, so whoever sees
		// the failed dead letter also finds the reason in the log and in
		// Ready.
		if e == nil || p.conn.IsClosed() {
			close(pc.done)
			return
		}
		p.log.Error("rabbitmq dead-letter channel closed by the broker; dead letters are requeued until it reopens",
			"code", e.Code, "reason", e.Reason)
		p.mu.Lock()
		p.cur, p.down = nil, pc.why
		p.mu.Unlock()
		close(pc.done)
		if !p.reopen(stop) {
			return
		}
	}
}

// reopen retries with backoff until a channel is open (true) or stop is
// closed or the connection is gone (false).
func (p *publisher) reopen(stop <-chan struct{}) bool {
	delay := p.initial
	for {
		select {
		case <-stop:
			return false
		case <-time.After(delay):
		}
		if p.conn.IsClosed() {
			return false
		}
		pc, err := p.open()
		if err == nil {
			p.mu.Lock()
			p.cur, p.down = pc, nil
			p.mu.Unlock()
			p.log.Info("rabbitmq dead-letter channel reopened")
			return true
		}
		p.log.Error("rabbitmq cannot reopen the dead-letter channel, retrying", "err", err, "retry_in", delay.String())
		p.mu.Lock()
		p.down = fmt.Errorf("cannot reopen the dead-letter channel: %w", err)
		p.mu.Unlock()
		delay = min(delay*2, p.maxDelay)
	}
}

// failure is why dead letters cannot go out now, or nil.
func (p *publisher) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down != nil {
		return p.down
	}
	return p.lastErr
}

const publishIDHeader = "x-dedupe-publish-id"

func (p *publisher) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	p.mu.Lock()
	pc, down := p.cur, p.down
	p.mu.Unlock()
	if pc == nil {
		return down
	}
	id := randHex(8)
	msg.Headers[publishIDHeader] = id
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		if pc.ch.IsClosed() {
			return p.closedUnder(ctx, pc)
		}
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		if pc.ch.IsClosed() {
			return p.closedUnder(ctx, pc)
		}
		return errors.New("broker nacked the publish")
	}
	p.mu.Lock()
	p.lastErr = nil
	p.mu.Unlock()
	// The server sends basic.return before the ack of a mandatory message,
	// and amqp091-go queues it on returns before it processes the ack, so
	// draining now sees any return for id.
	p.bouncedMu.Lock()
	defer p.bouncedMu.Unlock()
drain:
	for {
		select {
		case r, open := <-pc.returns:
			if !open {
				break drain
			}
			if rid, _ := r.Headers[publishIDHeader].(string); rid != "" {
				p.bounced[rid] = true
			}
		default:
			break drain
		}
	}
	if p.bounced[id] {
		delete(p.bounced, id)
		return errors.New("unroutable: no queue is bound for it")
	}
	return nil
}

// closedUnder waits for watch to learn why pc closed under a publish and
// returns that reason, remembered for Ready until a dead letter goes
// through.
func (p *publisher) closedUnder(ctx context.Context, pc *pubChannel) error {
	select {
	case <-pc.done:
	case <-ctx.Done():
		return fmt.Errorf("dead-letter channel closed: %w", ctx.Err())
	}
	p.mu.Lock()
	p.lastErr = pc.why
	p.mu.Unlock()
	return pc.why
}

func stringHeaders(t amqp.Table) map[string]string {
	if len(t) == 0 {
		return nil
	}
	m := make(map[string]string, len(t))
	for k, v := range t {
		switch v := v.(type) {
		case string:
			m[k] = v
		case []byte:
			m[k] = string(v)
		case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
			m[k] = fmt.Sprint(v)
		case float32:
			m[k] = strconv.FormatFloat(float64(v), 'g', -1, 32)
		case float64:
			m[k] = strconv.FormatFloat(v, 'g', -1, 64)
		case bool:
			m[k] = strconv.FormatBool(v)
		case time.Time:
			m[k] = v.UTC().Format(time.RFC3339)
		case nil:
		default:
			// Tables and arrays (x-death) are structure, not header values.
		}
	}
	return m
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redactErr keeps the password of an amqp URL out of logs.
func redactErr(err error, rawURL string) error {
	if u, perr := amqp.ParseURI(rawURL); perr == nil && u.Password != "" {
		return errors.New(strings.ReplaceAll(err.Error(), u.Password, "xxxxx"))
	}
	return err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
