package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// Errors of Publish besides the broker's own (a closed channel's reason).
var (
	// ErrUnroutable: the broker confirmed the message but returned it
	// (mandatory): no queue is bound for its exchange and routing key, so
	// nothing holds it.
	ErrUnroutable = errors.New("unroutable: no queue is bound for the exchange and routing key")
	// ErrNacked: the broker refused the message (basic.nack).
	ErrNacked = errors.New("the broker nacked the publish")
)

// DefaultPublishTimeout bounds a Publish whose context has no earlier
// deadline.
const DefaultPublishTimeout = 10 * time.Second

// publishIDHeader correlates a basic.return with its publish.
const publishIDHeader = "x-dedupe-publish-id"

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	// Name says what it publishes, in its logs and errors: "dead-letter"
	// gives "dead-letter channel closed by the broker: …".
	Name string
	// Logger; nil discards.
	Logger *slog.Logger
	// Reopen paces the attempts to reopen the channel after the broker
	// closed it.
	Reopen backoff.Policy
	// Timeout bounds one Publish; 0: DefaultPublishTimeout.
	Timeout time.Duration
}

// Publisher is the one confirmed publisher on RabbitMQ: dead letters and
// the webhook sink both publish through it. Publish returns nil only when
// the broker confirmed the message and routed it to a queue: it is
// persistent on the caller's say, always mandatory, and a basic.return
// (matched to its publish by a header) is an error, since a confirmed but
// unroutable message is a silent loss.
//
// It has its own channel on a connection it does not own. A channel
// error (a missing exchange: 404 NOT_FOUND) closes only that channel; the
// connection and anything else on it live on, so nothing else would
// notice and every later publish would fail until the connection
// dropped. The Publisher reopens the channel with backoff; a publish in
// the gap fails at once. When the connection closes the Publisher is
// done: its owner makes a new one on the next connection.
type Publisher struct {
	conn    *amqp.Connection
	name    string
	log     *slog.Logger
	reopen  backoff.Policy
	timeout time.Duration

	// dep follows publishing: lost when the broker closes the channel,
	// up again at the next confirmed publish, since a reopened channel
	// does not prove the cause (the exchange) fixed. An outage is logged
	// once each way, the closes and reopens in between at debug.
	dep *supervise.Dep

	mu sync.Mutex
	// cur is the open channel; nil while it is being reopened, and then
	// down says why.
	cur  *pubChannel
	down error
	// lastErr is the channel error the last publish failed with; it stays
	// until one goes through, since reopening does not prove the cause
	// (the exchange) was fixed.
	lastErr error

	bouncedMu sync.Mutex
	bounced   map[string]bool

	stop     chan struct{}
	stopOnce sync.Once
	watched  chan struct{}
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

// NewPublisher opens a confirm channel on conn. Close it when done with
// it, before or after the connection.
func NewPublisher(conn *amqp.Connection, o PublisherOptions) (*Publisher, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPublishTimeout
	}
	p := &Publisher{conn: conn, name: o.Name, log: o.Logger, reopen: o.Reopen, timeout: o.Timeout,
		bounced: map[string]bool{}, stop: make(chan struct{}), watched: make(chan struct{})}
	p.dep = supervise.New(supervise.Options{Log: o.Logger, Up: true, Severe: true, Lines: supervise.Lines{
		Up:      "rabbitmq " + o.Name + " publishing again",
		Lost:    "rabbitmq " + o.Name + " channel closed by the broker; publishing fails until it reopens and a publish goes through",
		Failing: "rabbitmq cannot reopen the " + o.Name + " channel, retrying",
	}})
	pc, err := p.open()
	if err != nil {
		return nil, err
	}
	p.cur = pc
	go func() { defer close(p.watched); p.watch() }()
	return p, nil
}

func (p *Publisher) open() (*pubChannel, error) {
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
// connection lives, until Close or the connection goes.
func (p *Publisher) watch() {
	for {
		p.mu.Lock()
		pc := p.cur
		p.mu.Unlock()
		var e *amqp.Error
		select {
		case e = <-pc.closes:
		case <-p.stop:
		}
		if e == nil {
			pc.why = amqp.ErrClosed
		} else {
			pc.why = fmt.Errorf("%s channel closed by the broker: %w", p.name, e)
		}
		// Log and record the cause before waking waiters, so whoever sees
		// the failed publish also finds the reason in the log and in
		// Ready.
		if e == nil || p.conn.IsClosed() {
			p.mu.Lock()
			p.cur, p.down = nil, pc.why
			p.mu.Unlock()
			close(pc.done)
			if e == nil {
				_ = pc.ch.Close()
			}
			return
		}
		p.dep.SetDown(pc.why, true, "code", e.Code, "reason", e.Reason)
		p.mu.Lock()
		p.cur, p.down = nil, pc.why
		p.mu.Unlock()
		close(pc.done)
		if !p.reopenChannel() {
			return
		}
	}
}

// reopenChannel retries with backoff until a channel is open (true), or
// Close or the connection going (false).
func (p *Publisher) reopenChannel() bool {
	retry := backoff.New(p.reopen)
	delay := retry.Next()
	for {
		if !backoff.Wait(context.Background(), p.stop, delay) || p.conn.IsClosed() {
			return false
		}
		pc, err := p.open()
		if err == nil {
			p.mu.Lock()
			p.cur, p.down = pc, nil
			p.mu.Unlock()
			p.log.Debug("rabbitmq " + p.name + " channel reopened")
			return true
		}
		delay = retry.Next()
		err = fmt.Errorf("cannot reopen the %s channel: %w", p.name, err)
		p.mu.Lock()
		p.down = err
		p.mu.Unlock()
		p.dep.SetDown(err, false, "retry_in", delay.String())
	}
}

// Ready is nil while the channel is open, else why it is not.
func (p *Publisher) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// Failure is Ready's error or, with the channel open again, the channel
// error the last publish failed with until a publish goes through.
func (p *Publisher) Failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down != nil {
		return p.down
	}
	return p.lastErr
}

// Publish sends msg to exchange with routing key key, mandatory, and
// waits for the broker's confirm (at most the Timeout). It is safe for
// concurrent use.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	p.mu.Lock()
	pc, down := p.cur, p.down
	p.mu.Unlock()
	if pc == nil {
		return down
	}
	id := randHex(8)
	h := make(amqp.Table, len(msg.Headers)+1)
	for k, v := range msg.Headers {
		h[k] = v
	}
	h[publishIDHeader] = id
	msg.Headers = h
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
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
		return ErrNacked
	}
	p.mu.Lock()
	p.lastErr = nil
	p.mu.Unlock()
	p.dep.SetUp()
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
		return ErrUnroutable
	}
	return nil
}

// closedUnder waits for watch to learn why pc closed under a publish and
// returns that reason, remembered for Failure until a publish goes
// through.
func (p *Publisher) closedUnder(ctx context.Context, pc *pubChannel) error {
	select {
	case <-pc.done:
	case <-ctx.Done():
		return fmt.Errorf("%s channel closed: %w", p.name, ctx.Err())
	}
	p.mu.Lock()
	p.lastErr = pc.why
	p.mu.Unlock()
	return pc.why
}

// Close stops reopening and closes the channel; the connection stays
// open. Safe to call twice.
func (p *Publisher) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.watched
}
