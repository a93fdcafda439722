// Package memory is a broker that lives in the process: a Queue of
// messages and a Source that consumes it with the contract of package
// broker (settle once, requeue marks a message redelivered, dead letters
// with the x-dedupe-* headers, deliveries lost when the connection is
// cut). It needs no server, so it proves that a kind is one package and
// one row of the kinds table, and gives unit tests and demos a broker.
// It is not a source type of the config file: what it holds is gone when
// the process ends.
package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// Kind is what a memory source's messages say they are (Message.Kind).
const Kind = "memory"

// Message is one message in a Queue.
type Message struct {
	Body        []byte
	ContentType string
	Headers     map[string]string
	// MessageID is the message's own id, as an AMQP message_id.
	MessageID string
}

// ErrLost is returned by a settle of a delivery whose connection was cut
// (Queue.Cut): the message is back in its queue already.
var ErrLost = errors.New("memory: the connection of the delivery was cut")

// Queue is an ordered queue of messages. Every source of one queue shares
// it, as the consumers of one broker queue do.
type Queue struct {
	name string
	mu   sync.Mutex
	// ready are the messages waiting, oldest first; more is closed and
	// replaced whenever one is added.
	ready []entry
	more  chan struct{}
	// conn is the current connection: Cut closes it, and a delivery
	// handed out on it is lost with it.
	conn *conn
}

type entry struct {
	m           Message
	redelivered bool
}

// conn is one connection of a queue's consumers; its deliveries not
// settled when it is cut go back to the queue.
type conn struct {
	cut     chan struct{}
	pending map[*delivery]struct{}
}

// NewQueue returns an empty queue named name.
func NewQueue(name string) *Queue {
	return &Queue{name: name, more: make(chan struct{}), conn: newConn()}
}

func newConn() *conn { return &conn{cut: make(chan struct{}), pending: map[*delivery]struct{}{}} }

// Name is the queue's name (Message.Queue of its deliveries).
func (q *Queue) Name() string { return q.name }

// Publish appends messages in order.
func (q *Queue) Publish(msgs ...Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		m.Body = append([]byte(nil), m.Body...)
		m.Headers = maps.Clone(m.Headers)
		q.ready = append(q.ready, entry{m: m})
	}
	q.signal()
}

// Len is how many messages wait.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// Get takes the oldest waiting message, as a basic.get would; false when
// none waits.
func (q *Queue) Get() (Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ready) == 0 {
		return Message{}, false
	}
	e := q.ready[0]
	q.ready = q.ready[1:]
	return e.m, true
}

// Cut drops the queue's connection, as a network fault would: every
// delivery handed out and not settled is lost (its Lost closes, its
// settles return ErrLost) and its message is back at the head of the
// queue, marked redelivered. Consumers go on with a new connection.
func (q *Queue) Cut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.conn
	q.conn = newConn()
	var back []entry
	for d := range c.pending {
		back = append(back, entry{m: d.m, redelivered: true})
		delete(c.pending, d)
	}
	q.ready = append(back, q.ready...)
	close(c.cut)
	q.signal()
}

// signal wakes whoever waits for a message; q.mu is held.
func (q *Queue) signal() {
	close(q.more)
	q.more = make(chan struct{})
}

// take hands out the oldest waiting message on the current connection,
// waiting for one until ctx ends.
func (q *Queue) take(ctx context.Context) (*delivery, bool) {
	for {
		if ctx.Err() != nil {
			// Stopped: nothing more is handed out, even if some waits.
			return nil, false
		}
		q.mu.Lock()
		if len(q.ready) > 0 {
			e := q.ready[0]
			q.ready = q.ready[1:]
			d := &delivery{q: q, conn: q.conn, m: e.m, redelivered: e.redelivered}
			q.conn.pending[d] = struct{}{}
			q.mu.Unlock()
			return d, true
		}
		more := q.more
		q.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// settle ends d's hand-out: back reports whether its message goes back
// to the queue (a requeue), at the head, where the broker keeps its place.
func (q *Queue) settle(d *delivery, back bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := d.conn.pending[d]; !ok {
		return ErrLost
	}
	delete(d.conn.pending, d)
	if back {
		q.ready = append([]entry{{m: d.m, redelivered: true}}, q.ready...)
		q.signal()
	}
	return nil
}

// Options configure a Source.
type Options struct {
	Name  string
	Queue *Queue
	// Workers is how many handlers run at once. Default 1.
	Workers int
	// DeadLetter receives dead letters; nil: none.
	DeadLetter *Queue
	Logger     *slog.Logger
}

// Source consumes one Queue.
type Source struct {
	o         Options
	running   atomic.Bool
	unsettled broker.Unsettled
}

var _ broker.Source = (*Source)(nil)

// New returns a Source of o.Queue.
func New(o Options) (*Source, error) {
	if o.Queue == nil {
		return nil, errors.New("memory: no queue")
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Source{o: o}, nil
}

// Name implements broker.Source.
func (s *Source) Name() string { return s.o.Name }

// Requeues implements broker.Source: a requeued message goes back to the
// queue, where any source of it may take it.
func (s *Source) Requeues() bool { return true }

// Ready implements broker.Source.
func (s *Source) Ready() error {
	if !s.running.Load() {
		return broker.ErrNotConnected
	}
	return nil
}

// Close implements broker.Source; there is nothing to release.
func (s *Source) Close() error { return nil }

// Run implements broker.Source: Workers handlers take messages until ctx
// ends; then Run waits for them, and for the deliveries they handed on.
func (s *Source) Run(ctx context.Context, h broker.Handler) error {
	s.running.Store(true)
	defer s.running.Store(false)
	var wg sync.WaitGroup
	for range s.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, ok := s.o.Queue.take(ctx)
				if !ok {
					return
				}
				d.src, d.received = s, time.Now()
				s.unsettled.Add()
				h(d)
			}
		}()
	}
	wg.Wait()
	if !s.unsettled.Wait(broker.SettleGrace) {
		s.o.Logger.Warn("memory source stopped with deliveries unsettled", "source", s.o.Name)
	}
	return nil
}

type delivery struct {
	q           *Queue
	conn        *conn
	src         *Source
	m           Message
	redelivered bool
	received    time.Time
	// settled: a settle holds, or is under way; counted: Unsettled knows.
	settled, counted atomic.Bool
	msg              *broker.Message
	once             sync.Once
}

func (d *delivery) Message() *broker.Message {
	d.once.Do(func() {
		d.msg = &broker.Message{
			Body:        d.m.Body,
			ContentType: d.m.ContentType,
			Headers:     maps.Clone(d.m.Headers),
			MessageID:   d.m.MessageID,
			Source:      d.src.o.Name,
			Kind:        Kind,
			Queue:       d.q.name,
			Redelivered: d.redelivered,
			Received:    d.received,
		}
		if d.msg.Headers == nil {
			d.msg.Headers = map[string]string{}
		}
	})
	return d.msg
}

func (d *delivery) Lost() <-chan struct{} { return d.conn.cut }

func (d *delivery) Ack(context.Context) error { return d.finish(false) }

func (d *delivery) Requeue(context.Context) error { return d.finish(true) }

func (d *delivery) finish(back bool) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	defer d.src.unsettled.Done(&d.counted)
	return d.q.settle(d, back)
}

// DeadLetter publishes the message with the dead-letter headers to the
// dead-letter queue, then acks it.
func (d *delivery) DeadLetter(_ context.Context, info broker.DeadLetterInfo) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	dl := d.src.o.DeadLetter
	if dl == nil {
		d.settled.Store(false)
		return broker.ErrNoDeadLetter
	}
	defer d.src.unsettled.Done(&d.counted)
	h := map[string]string{}
	for k, v := range d.m.Headers {
		if !broker.IsDeadLetterHeader(strings.ToLower(k)) {
			h[k] = v
		}
	}
	info.Headers(d.src.o.Name, []string{broker.HeaderOriginalQueue, d.q.name}, func(k string, v any) { h[k] = fmt.Sprint(v) })
	// Published before the ack, as a broker with confirms does: a cut
	// between the two leaves a copy in both queues, never in neither.
	dl.Publish(Message{Body: d.m.Body, ContentType: d.m.ContentType, Headers: h, MessageID: d.m.MessageID})
	return d.q.settle(d, false)
}
