package redissource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// FieldMessageID is the entry field BabelQueue's projections call
// bq-message-id; it is also Message.MessageID, as AMQP's message_id is.
const FieldMessageID = "bq-message-id"

// StreamSource consumes a Redis stream through a consumer group, one
// consumer name per replica. An entry is acked (XACK) after it settled;
// a requeued one is made idle at once, so the next XAUTOCLAIM of any
// replica takes it; a live replica renews the entries it holds every
// third of ClaimIdle, so only a dead replica's entries reach ClaimIdle
// and are taken over.
type StreamSource struct {
	link
	o       Options
	session string // key nobody writes, blocked on to notice a cut

	mu sync.Mutex
	// held are entries reserved and not yet settled: renewed.
	held map[string]struct{}
	// poke asks the fetcher to look for idle entries now (a requeue).
	poke chan struct{}
}

var _ broker.Source = (*StreamSource)(nil)

// NewStream returns a StreamSource; it connects when Run is called.
func NewStream(o Options) (*StreamSource, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = time.Minute
	}
	if o.MaxDeliveries < 1 {
		o.MaxDeliveries = 5
	}
	if o.BodyField == "" {
		o.BodyField = "body"
	}
	if o.ReconnectInitial <= 0 {
		o.ReconnectInitial = 500 * time.Millisecond
	}
	if o.ReconnectMax < o.ReconnectInitial {
		o.ReconnectMax = o.ReconnectInitial
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(4))
	}
	if o.Stream == "" || o.Group == "" {
		return nil, errors.New("redis: stream and group must be set")
	}
	rdb, err := newClient(o)
	if err != nil {
		return nil, err
	}
	s := &StreamSource{o: o, link: newLink(rdb, fmt.Sprintf("redis stream %q", o.Stream)), held: map[string]struct{}{}, poke: make(chan struct{}, 1),
		session: "{" + HashTag(o.Stream) + "}:session:" + o.Replica}
	s.log = o.Logger.With("source", o.Name, "stream", o.Stream, "group", o.Group, "consumer", o.Replica)
	return s, nil
}

// Name implements broker.Source.
func (s *StreamSource) Name() string { return s.o.Name }

// Requeues implements broker.Source: a requeued entry may be taken by
// any replica's next XAUTOCLAIM.
func (s *StreamSource) Requeues() bool { return true }

// Consumer is this replica's consumer name in the group.
func (s *StreamSource) Consumer() string { return s.o.Replica }

// Run implements broker.Source.
func (s *StreamSource) Run(ctx context.Context, h broker.Handler) error {
	return s.reconnect(ctx, backoff.Policy{Initial: s.o.ReconnectInitial, Max: s.o.ReconnectMax},
		supervise.Lines{Up: "redis stream consuming", Lost: "redis stream: not consuming, retrying"},
		func(ctx context.Context, reconnect bool) (bool, error) { return s.run(ctx, h, reconnect) })
}

// entry is one reserved stream entry with its delivery count.
type entry struct {
	id     string
	fields map[string]any
	count  int64
}

func (s *StreamSource) run(ctx context.Context, h broker.Handler, reconnect bool) (connected bool, err error) {
	bg := context.WithoutCancel(ctx)
	if err := s.rdb.Ping(bg).Err(); err != nil {
		return false, fmt.Errorf("ping: %w", err)
	}
	// From the start of the stream, as Kafka's start_offset earliest: an
	// existing group keeps its position.
	if err := s.rdb.XGroupCreateMkStream(bg, s.o.Stream, s.o.Group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		if e := wrongType(err, s.o.Stream, "stream"); e != nil {
			err = e
		}
		return false, fmt.Errorf("create group %q: %w", s.o.Group, err)
	}
	ss := s.started(reconnect, s.o.Metrics, "workers", s.o.Workers, "claim_idle", s.o.ClaimIdle.String())

	// Renewing outlives fetching and the workers: an entry a handler is
	// still finishing on stop must not go idle and be taken over.
	stop, stopRenew := make(chan struct{}), make(chan struct{})
	// One read ahead: the next XREADGROUP's entries wait here while the
	// workers finish the last ones, so no worker waits for a round trip.
	// They are pending and held (renewed) like the ones in hand.
	work := make(chan entry, s.o.Workers)
	var renewer, workers sync.WaitGroup
	renewer.Add(1)
	go func() { defer renewer.Done(); s.renew(bg, ss, stopRenew) }()
	workers.Add(1)
	go func() { defer workers.Done(); defer close(work); s.fetch(bg, ss, stop, work) }()
	for range s.o.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				select {
				case e, ok := <-work:
					if !ok {
						return
					}
					ss.out.Add()
					h(s.delivery(ss, e))
				case <-stop:
					return
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
		err = nil
	case <-ss.failed:
		err = ss.cause()
		close(ss.lost)
	}
	s.stopped(err)
	close(stop)
	workers.Wait()
	// Read ahead and never handed out: claimable by anyone at once.
	var ahead []entry
	for e := range work {
		ahead = append(ahead, e)
	}
	s.giveBack(bg, ahead)
	// Deliveries a handler handed on (a busy key waiting in the pipeline)
	// are requeued by it while their entries are still renewed.
	if err == nil && !ss.out.Wait(broker.SettleGrace) {
		s.log.Warn("redis stream: stopping with deliveries not settled; they are taken over after claim_idle", "waited", broker.SettleGrace.String())
	}
	close(stopRenew)
	renewer.Wait()
	if err == nil {
		s.forgetConsumer(bg)
	}
	return true, err
}

// fetch hands entries to the workers: first those idle long enough
// (a dead replica's, or requeued ones), then new ones.
func (s *StreamSource) fetch(ctx context.Context, ss *session, stop <-chan struct{}, work chan<- entry) {
	retry := backoff.New(backoff.Policy{Initial: s.o.ReconnectInitial, Max: s.o.ReconnectMax})
	cursor := "0-0"
	var lastClaim time.Time
	for {
		select {
		case <-stop:
			return
		default:
		}
		var es []entry
		var err error
		poked := false
		select {
		case <-s.poke:
			poked = true
		default:
		}
		// A scan of the pending entries runs to its end before new
		// entries are read: what was given back comes first.
		if poked || cursor != "0-0" || time.Since(lastClaim) >= s.o.ClaimIdle/3 {
			lastClaim = time.Now()
			es, cursor, err = s.autoclaim(ctx, cursor)
		}
		if err == nil && len(es) == 0 {
			es, err = s.readNew(ctx)
		}
		if err != nil {
			if !isReply(err) || strings.HasPrefix(err.Error(), "NOGROUP") {
				// NOGROUP: the group was deleted under us; the next
				// session creates it again.
				ss.fail(fmt.Errorf("read: %w", err))
				return
			}
			if e := wrongType(err, s.o.Stream, "stream"); e != nil {
				err = e
			} else {
				err = fmt.Errorf("redis: read %q: %w", s.o.Stream, err)
			}
			if !s.refused(ctx, stop, retry, err, "redis stream: cannot read") {
				return
			}
			continue
		}
		retry.Reset()
		s.reading("redis stream: reading again")
		for i, e := range es {
			if e.count > int64(s.o.MaxDeliveries) && s.o.DeadLetter != "" {
				s.deadLetterExhausted(ctx, ss, e)
				continue
			}
			select {
			case work <- e:
			case <-stop:
				// Fetched, never handed out: claimable by anyone at once.
				s.giveBack(ctx, es[i:])
				return
			}
		}
	}
}

// readNew reads entries never delivered to the group, as many as there
// are workers, waiting up to a second (which bounds stopping).
func (s *StreamSource) readNew(ctx context.Context) ([]entry, error) {
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.o.Group, Consumer: s.o.Replica, Streams: []string{s.o.Stream, ">"},
		Count: int64(s.o.Workers), Block: time.Second,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var es []entry
	for _, st := range res {
		for _, m := range st.Messages {
			es = append(es, entry{id: m.ID, fields: m.Values, count: 1})
		}
	}
	s.hold(es)
	return es, nil
}

// autoclaim takes over entries idle for ClaimIdle, with their delivery
// counts (XAUTOCLAIM does not return them; XPENDING does).
func (s *StreamSource) autoclaim(ctx context.Context, cursor string) ([]entry, string, error) {
	ms, next, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.o.Stream, Group: s.o.Group, Consumer: s.o.Replica,
		MinIdle: s.o.ClaimIdle, Start: cursor, Count: int64(s.o.Workers),
	}).Result()
	if err != nil {
		return nil, cursor, err
	}
	if len(ms) == 0 {
		return nil, next, nil
	}
	es := make([]entry, 0, len(ms))
	for _, m := range ms {
		es = append(es, entry{id: m.ID, fields: m.Values, count: 2})
	}
	s.hold(es)
	cmds := make([]*redis.XPendingExtCmd, len(es))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range es {
			cmds[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.o.Stream, Group: s.o.Group, Start: e.id, End: e.id, Count: 1})
		}
		return nil
	})
	if err != nil {
		return nil, next, err
	}
	for i, c := range cmds {
		if p := c.Val(); len(p) == 1 {
			es[i].count = p[0].RetryCount
		}
	}
	if s.o.Metrics != nil && s.o.Metrics.Reclaimed != nil {
		s.o.Metrics.Reclaimed.Add(float64(len(es)))
	}
	return es, next, nil
}

func (s *StreamSource) hold(es []entry) {
	s.mu.Lock()
	for _, e := range es {
		s.held[e.id] = struct{}{}
	}
	s.mu.Unlock()
}

func (s *StreamSource) release(id string) {
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
}

// renew keeps the entries this replica holds from going idle, every
// third of ClaimIdle (XCLAIM to itself, JUSTID: the delivery count
// stays), and in between blocks on a key nobody writes, so a cut
// connection ends the session.
func (s *StreamSource) renew(ctx context.Context, ss *session, stop <-chan struct{}) {
	// At most a second late (the blocking wait between): claim_idle is
	// at least 3s, so a renewal always comes before the entry is idle.
	every := s.o.ClaimIdle / 3
	next := time.Now().Add(every)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !time.Now().Before(next) {
			next = time.Now().Add(every)
			if err := s.renewHeld(ctx); err != nil && !isReply(err) {
				ss.fail(fmt.Errorf("renew: %w", err))
				return
			}
			s.backlog(ctx)
		}
		if err := s.rdb.BLPop(ctx, time.Second, s.session).Err(); err != nil && !errors.Is(err, redis.Nil) {
			ss.fail(fmt.Errorf("connection check: %w", err))
			return
		}
	}
}

// renewHeld resets the idle time of every held entry. It holds mu
// throughout: a requeue releases its entry (waiting for this) before it
// sets the entry idle, so a renewal never undoes a requeue.
func (s *StreamSource) renewHeld(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) == 0 {
		return nil
	}
	ids := make([]string, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	return s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: s.o.Stream, Group: s.o.Group, Consumer: s.o.Replica, Messages: ids}).Err()
}

// giveBack makes entries claimable by the next XAUTOCLAIM of any
// replica: claimed to this consumer with their idle time already at
// ClaimIdle, and uncounted (see idle), with one XCLAIM for all the
// entries that share a delivery count. They stay pending all along, so a
// failure here only means they are taken over ClaimIdle later.
func (s *StreamSource) giveBack(ctx context.Context, es []entry) {
	if len(es) == 0 {
		return
	}
	byCount := map[int64][]any{}
	for _, e := range es {
		s.release(e.id)
		c := max(e.count-1, 0)
		byCount[c] = append(byCount[c], e.id)
	}
	for count, ids := range byCount {
		args := append([]any{"XCLAIM", s.o.Stream, s.o.Group, s.o.Replica, 0}, ids...)
		args = append(args, "IDLE", s.o.ClaimIdle.Milliseconds(), "RETRYCOUNT", count, "JUSTID")
		if err := s.rdb.Do(ctx, args...).Err(); err != nil {
			s.log.Debug("redis stream: give back", "entries", len(ids), "err", err)
		}
	}
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// idle sets an entry's idle time to ClaimIdle, so that the next
// XAUTOCLAIM of any replica takes it. Uncounted, its delivery count goes
// back to what it was before this replica's read, which that XAUTOCLAIM
// adds back: a message given back untried (fetched and never handed out,
// or stopped before it reached the app) costs no delivery toward
// max_deliveries. It reports ErrNotReserved when the entry is no longer
// pending (acked elsewhere).
func (s *StreamSource) idle(ctx context.Context, e entry, uncounted bool) error {
	count := e.count
	if uncounted {
		count = max(e.count-1, 0)
	}
	res, err := s.rdb.Do(ctx, "XCLAIM", s.o.Stream, s.o.Group, s.o.Replica, 0, e.id,
		"IDLE", s.o.ClaimIdle.Milliseconds(), "RETRYCOUNT", count, "JUSTID").Slice()
	if err != nil {
		return err
	}
	if len(res) == 0 {
		return ErrNotReserved
	}
	select {
	case s.poke <- struct{}{}:
	default:
	}
	return nil
}

// forgetConsumer removes this replica's consumer from the group after a
// clean stop, only when it holds nothing: XGROUP DELCONSUMER drops the
// consumer's pending entries with it.
func (s *StreamSource) forgetConsumer(ctx context.Context) {
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.o.Stream, Group: s.o.Group, Start: "-", End: "+", Count: 1, Consumer: s.o.Replica}).Result()
	if err != nil || len(pend) > 0 {
		return
	}
	if err := s.rdb.XGroupDelConsumer(ctx, s.o.Stream, s.o.Group, s.o.Replica).Err(); err != nil {
		s.log.Debug("redis stream: remove consumer", "err", err)
	}
}

// deadLetterExhausted dead-letters an entry delivered more than
// MaxDeliveries times without handing it out again.
func (s *StreamSource) deadLetterExhausted(ctx context.Context, ss *session, e entry) {
	d := s.delivery(ss, e)
	ss.out.Add()
	defer ss.out.Done(&d.done) // a failed dead letter is never handed out either
	info := broker.DeadLetterInfo{Reason: "max deliveries", Attempts: int(e.count - 1)}
	if err := d.DeadLetter(ctx, info); err != nil {
		s.log.Warn("redis stream: dead-lettering an entry past max_deliveries failed; it stays pending", "id", e.id, "deliveries", e.count, "err", err)
		s.release(e.id)
		return
	}
	s.log.Warn("redis stream: dead-lettered an entry past max_deliveries", "id", e.id, "deliveries", e.count, "max_deliveries", s.o.MaxDeliveries)
}

func (s *StreamSource) delivery(ss *session, e entry) *streamDelivery {
	m := streamMessage(s.o, e.fields)
	m.Redelivered, m.Received = e.count > 1, time.Now()
	return &streamDelivery{s: s, ss: ss, e: e, msg: m}
}

// streamMessage is the message of an entry with fields: the body field
// is the body, the others are headers.
func streamMessage(o Options, fields map[string]any) broker.Message {
	m := broker.Message{Source: o.Name, Kind: Kind, Queue: o.Stream}
	if _, ok := fields[o.BodyField]; !ok {
		// Forwarded, it would reach the app as an empty body, and a 2xx
		// to that would mark the key done with its data never seen.
		m.Unforwardable = fmt.Sprintf("no %q field (body_field)", o.BodyField)
	}
	for k, v := range fields {
		// go-redis gives every field as a string; fmt only for anything else.
		sv, ok := v.(string)
		if !ok {
			sv = fmt.Sprint(v)
		}
		if k == o.BodyField {
			m.Body = []byte(sv)
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = sv
		switch {
		case strings.EqualFold(k, "content-type"):
			m.ContentType = sv
		case k == FieldMessageID:
			m.MessageID = sv
		}
	}
	return m
}

type streamDelivery struct {
	s       *StreamSource
	ss      *session
	e       entry
	msg     broker.Message
	settled atomic.Bool
	done    atomic.Bool // counted settled in ss.out
}

// counted counts the delivery settled once a settle held (a failed dead
// letter clears settled for the requeue that follows).
func (d *streamDelivery) counted() {
	if d.settled.Load() {
		d.ss.out.Done(&d.done)
	}
}

func (d *streamDelivery) Message() *broker.Message { return &d.msg }
func (d *streamDelivery) Lost() <-chan struct{}    { return d.ss.lost }

func (d *streamDelivery) Ack(ctx context.Context) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	d.s.release(d.e.id)
	// The acks of every worker that wait behind one pipeline go out as
	// one XACK (rediscoalesce.XAck).
	n, err := d.s.batch.XAck(ctx, d.s.o.Stream, d.s.o.Group, d.e.id)
	if err != nil {
		return d.failed("ack", err)
	}
	switch n {
	case 0:
		return fmt.Errorf("redis ack %s: %w", d.e.id, ErrNotReserved)
	case -1:
		// Acked now; but the XACK it shared acked fewer entries than it
		// carried, and XACK does not say which were no longer pending.
		return fmt.Errorf("redis ack %s: %w (it or another entry acked in the same XACK; every one of them is acked now)", d.e.id, ErrNotReserved)
	}
	return nil
}

func (d *streamDelivery) Requeue(ctx context.Context) error { return d.requeue(ctx, false) }

// GiveBack implements broker.GiveBacker: the entry goes back without
// counting this delivery.
func (d *streamDelivery) GiveBack(ctx context.Context) error { return d.requeue(ctx, true) }

func (d *streamDelivery) requeue(ctx context.Context, uncounted bool) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	d.s.release(d.e.id)
	if err := d.s.idle(ctx, d.e, uncounted); err != nil {
		if errors.Is(err, ErrNotReserved) {
			return fmt.Errorf("redis requeue %s: %w", d.e.id, err)
		}
		return d.failed("requeue", err)
	}
	return nil
}

// DeadLetter adds the entry to the dead-letter stream (XADD) and then
// acks it. The two are separate commands (the streams may be in two
// Cluster slots): a failure between them leaves a dead letter and the
// entry pending, to be dead-lettered again — twice, never lost.
func (d *streamDelivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	if d.s.o.DeadLetter == "" {
		d.settled.Store(false)
		return broker.ErrNoDeadLetter
	}
	fields := map[string]any{}
	for k, v := range d.e.fields {
		if !strings.HasPrefix(k, "x-dedupe-") {
			fields[k] = v
		}
	}
	info.Headers(d.s.o.Name, []string{broker.HeaderOriginalQueue, d.s.o.Stream}, func(k string, v any) { fields[k] = fmt.Sprint(v) })
	fields["x-dedupe-original-id"] = d.e.id
	if err := d.s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: d.s.o.DeadLetter, Values: fields}).Err(); err != nil {
		d.settled.Store(false)
		return d.failed("dead-letter", err)
	}
	d.s.release(d.e.id)
	if _, err := d.s.batch.DoInt(ctx, "XACK", d.s.o.Stream, d.s.o.Group, d.e.id); err != nil {
		d.settled.Store(false)
		return d.failed("ack after dead-letter", err)
	}
	return nil
}

// failed ends the session on a connection failure (the entry stays
// pending and is taken over after ClaimIdle).
func (d *streamDelivery) failed(what string, err error) error {
	if !isReply(err) {
		d.ss.fail(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("redis %s %s: %w", what, d.e.id, err)
}
