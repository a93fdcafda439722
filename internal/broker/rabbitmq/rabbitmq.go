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
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// Dead-letter modes.
const (
	DeadLetterNone    = "none"
	DeadLetterDLX     = "dlx"
	DeadLetterPublish = "publish"
)

// Options configure a Source.
type Options struct {
	// Name is the source's name, set by whoever builds the source.
	Name             string        `mapstructure:"-"`
	URL              string        `mapstructure:"url"`
	Queue            string        `mapstructure:"queue"`
	Prefetch         int           `mapstructure:"prefetch"`
	Workers          int           `mapstructure:"workers"`
	ConsumerTag      string        `mapstructure:"consumer_tag"`
	ReconnectInitial time.Duration `mapstructure:"reconnect_initial"`
	ReconnectMax     time.Duration `mapstructure:"reconnect_max"`
	DeadLetter       DeadLetter    `mapstructure:"dead_letter"`
	Logger           *slog.Logger  `mapstructure:"-"`
	// Metrics is the source's handle; nil: none.
	Metrics *metrics.SourceMetrics `mapstructure:"-"`
}

// DeadLetter is where failed messages go. Mode none requeues them, dlx
// rejects them to the queue's own dead-letter exchange, publish publishes
// them with reason headers to Exchange with RoutingKey (publisher
// confirms) before acking.
type DeadLetter struct {
	Mode       string `mapstructure:"mode"`
	Exchange   string `mapstructure:"exchange"`
	RoutingKey string `mapstructure:"routing_key"`
	// Queue is the queue the dead letters end up in, which Redriver
	// reads: AMQP cannot tell which queue a dead-letter exchange routes
	// to. "" with mode publish through the default exchange means the
	// queue named by the routing key.
	Queue string `mapstructure:"queue"`
}

// Source consumes one queue.
type Source struct {
	o   Options
	log *slog.Logger
	// dep is up while consuming.
	dep *supervise.Dep
	// pub is the session's dead-letter publisher (publish mode), for Ready.
	pub  atomic.Pointer[Publisher]
	mu   sync.Mutex
	conn *amqp.Connection
	// limitChecked: the first session's start line said what the queue
	// does past its delivery limit; Run's own.
	limitChecked bool
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
	if o.DeadLetter.Mode == "" {
		o.DeadLetter.Mode = DeadLetterNone
	}
	if o.ConsumerTag == "" {
		host, _ := os.Hostname()
		o.ConsumerTag = fmt.Sprintf("dedupe-proxy/%s/%s/%d/%s", o.Name, host, os.Getpid(), randHex(4))
	}
	log := o.Logger.With("source", o.Name, "queue", o.Queue)
	return &Source{o: o, log: log, dep: supervise.New(supervise.Options{Log: log, Lines: supervise.Lines{
		Up:   "rabbitmq consuming",
		Lost: "rabbitmq connection lost, reconnecting",
		// Never got to consuming: a wrong URL, credentials or queue name
		// is more likely than a network blip; the error says.
		Failing: "rabbitmq: cannot consume, retrying",
	}})}
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
	if !s.dep.IsUp() {
		return broker.ErrNotConnected
	}
	if pub := s.pub.Load(); pub != nil {
		if err := pub.Failure(); err != nil {
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

// Run implements broker.Source: one warning when consuming stops (or
// cannot start), debug lines for the retries after it; "rabbitmq
// consuming" says it is back.
func (s *Source) Run(ctx context.Context, h broker.Handler) error {
	supervise.Loop{Dep: s.dep, Policy: s.reconnect()}.Run(ctx, func(ctx context.Context, reconnect bool) (bool, error) {
		return s.session(ctx, h, reconnect)
	})
	return nil
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
	conn, err := Dial(s.o.URL, s.o.Name, 0)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	defer func() {
		s.dep.Lose(nil)
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
	var pub *Publisher
	if s.o.DeadLetter.Mode == DeadLetterPublish {
		// Dead letters are requeued while the channel is closed, so the
		// reopen waits no longer than a reconnect would.
		pub, err = NewPublisher(conn, PublisherOptions{Name: "dead-letter", Logger: s.log, Reopen: s.reconnect()})
		if err != nil {
			return false, fmt.Errorf("open dead-letter channel: %w", err)
		}
		s.pub.Store(pub)
		defer func() {
			s.pub.Store(nil)
			pub.Close()
		}()
	}
	deliveries, err := ch.Consume(s.o.Queue, s.o.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume queue %q: %w", s.o.Queue, err)
	}
	if reconnect && s.o.Metrics != nil {
		s.o.Metrics.Reconnects.Inc()
	}
	attrs := []any{"prefetch", s.o.Prefetch, "workers", s.o.Workers, "reconnect", reconnect}
	var limitRisk string
	if !s.limitChecked {
		s.limitChecked = true
		var finding string
		finding, limitRisk = deliveryLimitFinding(conn, s.o.Queue)
		attrs = append(attrs, "delivery_limit", finding)
	}
	s.dep.SetUp(attrs...)
	if limitRisk != "" {
		s.log.Warn("rabbitmq queue drops messages past its delivery limit", "delivery_limit", limitRisk)
	}
	return true, s.consume(ctx, h, consumer{conn: conn, ch: ch, pub: pub, deliveries: deliveries, connClosed: connClosed, chClosed: chClosed})
}

// consumer is what a session consumes through.
type consumer struct {
	conn                 *amqp.Connection
	ch                   *amqp.Channel
	pub                  *Publisher // nil unless dead-letter mode publish
	deliveries           <-chan amqp.Delivery
	connClosed, chClosed <-chan *amqp.Error
}

// consume hands c's deliveries to h on the workers until ctx ends (nil)
// or the connection, the channel or the consumer ends (why), and returns
// once every worker has.
func (s *Source) consume(ctx context.Context, h broker.Handler, c consumer) error {
	ch, conn, pub, deliveries := c.ch, c.conn, c.pub, c.deliveries
	lost := make(chan struct{})
	acks := newAcker(ch, s.log)
	var out broker.Unsettled
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
				out.Add()
				h(s.wrap(d, lost, pub, acks, &out))
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
		// Deliveries a handler handed on (a busy key waiting in the
		// pipeline) are requeued on this channel, not by its closing.
		if !out.Wait(broker.SettleGrace) {
			s.log.Warn("rabbitmq: stopping with deliveries not settled; the broker requeues them when the channel closes", "waited", broker.SettleGrace.String())
		}
		acks.close(true)
		return nil
	case e := <-c.connClosed:
		cause = fmt.Errorf("connection closed: %v", e)
	case e := <-c.chClosed:
		cause = fmt.Errorf("channel closed: %v", e)
	case <-workersDone:
		cause = errors.New("consumer cancelled by the server (queue deleted?)")
	}
	s.dep.Lose(cause)
	close(lost)
	acks.close(false)
	_ = conn.Close()
	<-workersDone
	return cause
}

// deliveryLimitFinding says what RabbitMQ does with a message of queue
// past its delivery limit, for the start line, and risk repeats it when a
// message may be dropped. A quorum queue counts every requeue, the
// proxy's own included, and drops past the limit unless a dead-letter
// exchange takes the message.
func deliveryLimitFinding(conn *amqp.Connection, queue string) (finding, risk string) {
	args, err := ReadQueueArgs(conn, queue)
	if err != nil {
		return "not checked: cannot read the queue's arguments (" + err.Error() + "); a quorum queue drops a message past its delivery limit (RabbitMQ 4.x: 20 by default) unless it has a dead-letter exchange", ""
	}
	version, _ := conn.Properties["version"].(string)
	dropped, finding := args.DeliveryLimitRisk(version)
	if dropped {
		return finding, finding
	}
	return finding, ""
}

func (s *Source) wrap(d amqp.Delivery, lost chan struct{}, pub *Publisher, acks *acker, out *broker.Unsettled) *delivery {
	ct := d.ContentType
	return &delivery{
		out:  out,
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
	pub  *Publisher
	lost chan struct{}
	// settled is claimed by the first settle, before anything reaches the
	// channel: a tag acked or nacked twice is unknown to RabbitMQ, which
	// closes the channel (406) and with it every delivery in flight.
	settled atomic.Bool
	// out counts the session's unsettled deliveries; done is set once
	// this one is counted settled.
	out  *broker.Unsettled
	done atomic.Bool
}

func (d *delivery) Message() *broker.Message { return &d.msg }
func (d *delivery) Lost() <-chan struct{}    { return d.lost }

// counted counts the delivery settled once a settle held (a failed dead
// letter clears settled for the requeue that follows).
func (d *delivery) counted() {
	if d.settled.Load() {
		d.out.Done(&d.done)
	}
}

// Ack goes through the delivery's own channel: a tag acked on another
// channel is unknown there, and RabbitMQ closes that channel (406).
func (d *delivery) Ack(context.Context) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.acks.ack(d.d.DeliveryTag)
}

func (d *delivery) Requeue(context.Context) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.acks.nack(d.d.DeliveryTag, true)
}

func (d *delivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	switch d.src.o.DeadLetter.Mode {
	case DeadLetterDLX:
		return d.acks.nack(d.d.DeliveryTag, false)
	case DeadLetterPublish:
		if err := d.pub.Publish(ctx, d.src.o.DeadLetter.Exchange, d.src.o.DeadLetter.RoutingKey, d.deadLetterMessage(info)); err != nil {
			// Nothing reached the consumer channel: the caller requeues.
			d.settled.Store(false)
			return fmt.Errorf("publish dead letter to exchange %q routing key %q: %w", d.src.o.DeadLetter.Exchange, d.src.o.DeadLetter.RoutingKey, err)
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
	info.Headers(d.src.o.Name, []string{broker.HeaderOriginalQueue, d.src.o.Queue}, func(k string, v any) {
		if n, ok := v.(int); ok {
			v = int32(n)
		}
		h[k] = v
	})
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
