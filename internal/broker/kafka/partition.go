package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// partition is one assigned partition for one generation.
type partition struct {
	g     *generation
	s     *Source
	topic string
	id    int
	label string
	start int64
	track *tracker
	lag   prometheus.Gauge
	hwm   atomic.Int64

	// OrderingKey: one lane per record key with messages running or
	// waiting; a lane's goroutine ends when its queue is empty.
	mu    sync.Mutex
	lanes map[string]*lane
	laneW sync.WaitGroup

	heldMu sync.Mutex
	held   int // deliveries currently held (no dead letter possible)

	// failing is set by the fetch loop and by the reader's kgo client,
	// whose hook reports connection and fetch failures it retries itself.
	failMu  sync.Mutex
	failing bool
	stopped bool // the partition stopped: nothing is reported any more
}

type lane struct {
	queue []kafkago.Message
}

func newPartition(g *generation, topic string, id int, start int64) *partition {
	label := strconv.Itoa(id)
	p := &partition{
		g:     g,
		s:     g.s,
		topic: topic,
		id:    id,
		label: label,
		start: start,
		track: newTracker(start),
		lag:   g.s.m.Lag.WithLabelValues(topic, label),
		lanes: map[string]*lane{},
	}
	p.hwm.Store(-1)
	return p
}

// run reads the partition until genCtx ends (revocation) or the source
// stops, hands its messages to h (in order, or per key), and returns only
// after every handler it started has returned.
func (p *partition) run(genCtx context.Context, h broker.BatchHandler) {
	s := p.s
	ctx, cancel := context.WithCancel(p.g.runCtx)
	defer cancel()
	stop := context.AfterFunc(genCtx, cancel)
	defer stop()

	r := p.startReader(ctx)
	if r == nil {
		p.stopFailing()
		return
	}
	defer r.close()
	// Runs before r.close: a failure kgo reports while closing is not
	// the partition's any more.
	defer p.stopFailing()

	if s.o.Ordering == OrderingKey {
		for ctx.Err() == nil {
			if !p.waitForRoom(ctx) {
				break
			}
			m, ok := p.fetch(ctx, r)
			if !ok {
				break
			}
			p.dispatchByKey(ctx, m, h)
		}
		p.laneW.Wait()
	} else {
		p.runInOrder(ctx, cancel, r, h)
	}
}

// startReader creates the partition's reader; nil once ctx ended. Creating
// one fails only on options kgo refuses, which New has already checked;
// should it fail anyway the partition reports it and keeps trying rather
// than sit silently unread.
func (p *partition) startReader(ctx context.Context) *reader {
	s := p.s
	backoff := s.o.RetryBackoff
	for ctx.Err() == nil {
		r, err := p.newReader()
		if err == nil {
			return r
		}
		p.setFailing(true)
		s.log.Error("kafka partition reader cannot start, retrying", "topic", p.topic, "partition", p.id, "err", err, "retry_in", backoff.String())
		if !sleepCtx(ctx, backoff) {
			break
		}
		backoff = min(backoff*2, s.o.RetryBackoffMax)
	}
	return nil
}

// fetch returns the next message to hand out, retrying failed fetches;
// false once ctx ended. A message it returns is tracked as unfinished.
func (p *partition) fetch(ctx context.Context, r *reader) (kafkago.Message, bool) {
	s := p.s
	backoff := s.o.RetryBackoff
	for ctx.Err() == nil {
		m, hwm, err := r.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// What kgo hands back (an authorization or a data-loss
			// error, say) may clear up; the client keeps fetching, so
			// keep asking.
			p.setFailing(true)
			s.fetching.Down(fmt.Errorf("topic %s partition %d: %w", p.topic, p.id, err))
			s.log.Debug("kafka fetch failed, retrying", "topic", p.topic, "partition", p.id, "err", err, "retry_in", backoff.String())
			if !sleepCtx(ctx, backoff) {
				break
			}
			backoff = min(backoff*2, s.o.RetryBackoffMax)
			continue
		}
		backoff = s.o.RetryBackoff
		p.setFailing(false)
		if !p.track.add(m.Offset) {
			continue
		}
		if hwm > p.hwm.Load() {
			p.hwm.Store(hwm)
			p.updateLag()
		}
		if ctx.Err() != nil {
			// Fetched, never handed out: it stays unfinished, so it is
			// not committed past and is delivered again.
			break
		}
		return m, true
	}
	return kafkago.Message{}, false
}

// runInOrder (OrderingPartition) fetches on its own goroutine, so that
// whatever arrived while the handler was busy is handed over at once as
// one batch of up to BatchSize messages, in offset order.
func (p *partition) runInOrder(ctx context.Context, cancel context.CancelFunc, r *reader, h broker.BatchHandler) {
	size := p.s.o.BatchSize
	msgs := make(chan kafkago.Message, size)
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		for {
			m, ok := p.fetch(ctx, r)
			if !ok {
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	// The reader is closed after run returns: the fetcher must be gone.
	defer func() { cancel(); <-fetched }()
	batch := make([]kafkago.Message, 0, size)
	for {
		select {
		case m := <-msgs:
			batch = append(batch[:0], m)
		case <-ctx.Done():
			// Whatever waits in msgs stays unfinished.
			return
		}
		if ctx.Err() != nil {
			// select picks at random when both are ready: a stopping
			// partition must not hand out another batch.
			return
		}
	fill:
		for len(batch) < size {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		p.handle(ctx, batch, h)
		clear(batch)
	}
}

// waitForRoom holds the fetch loop (key mode) while MaxInFlight fetched
// messages have not been passed by the commit mark.
func (p *partition) waitForRoom(ctx context.Context) bool {
	for p.track.window() >= p.s.o.MaxInFlight {
		select {
		case <-p.track.space:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// dispatchByKey runs m after every earlier message with the same record
// key; a message without a key is ordered with the other keyless ones.
func (p *partition) dispatchByKey(ctx context.Context, m kafkago.Message, h broker.BatchHandler) {
	k := string(m.Key)
	p.mu.Lock()
	if l, ok := p.lanes[k]; ok {
		l.queue = append(l.queue, m)
		p.mu.Unlock()
		return
	}
	l := &lane{}
	p.lanes[k] = l
	p.mu.Unlock()
	p.laneW.Add(1)
	go func() {
		defer p.laneW.Done()
		for {
			// At most MaxInFlight handlers of the source at once: the
			// app's connection pool is sized for that, not for
			// MaxInFlight per partition.
			select {
			case p.s.slots <- struct{}{}:
				p.handle(ctx, []kafkago.Message{m}, h)
				<-p.s.slots
			case <-ctx.Done():
			}
			p.mu.Lock()
			if len(l.queue) == 0 || ctx.Err() != nil {
				// Whatever is still queued stays unfinished.
				delete(p.lanes, k)
				p.mu.Unlock()
				return
			}
			m = l.queue[0]
			l.queue[0] = kafkago.Message{}
			l.queue = l.queue[1:]
			p.mu.Unlock()
		}
	}()
}

// handle gives ms to h until each is finished (acked or dead-lettered)
// or the partition stops. The pipeline leaves a Kafka message unfinished
// only when it stops or the partition was lost; should it leave one while
// the partition is still ours, the message is handed over again, alone,
// after a backoff rather than left unfinished, which would stall the
// commits.
func (p *partition) handle(ctx context.Context, ms []kafkago.Message, h broker.BatchHandler) {
	p.handleAgain(ctx, ms, nil, h)
}

// handleAgain is handle with, per message, whether it was handed over
// before (Redelivered).
func (p *partition) handleAgain(ctx context.Context, ms []kafkago.Message, again []bool, h broker.BatchHandler) {
	ds := p.deliver(ctx, ms, again, h)
	for i, d := range ds {
		if d.finished() {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.redeliver(ctx, ms[i], d.state.Load() == stateRequeued, h)
		// What the handler left unfinished after it goes again, in
		// order, behind it.
		var rest []kafkago.Message
		var restAgain []bool
		for _, e := range ds[i+1:] {
			if !e.finished() {
				rest = append(rest, e.m)
				restAgain = append(restAgain, e.state.Load() == stateRequeued)
			}
		}
		if len(rest) > 0 && ctx.Err() == nil {
			p.handleAgain(ctx, rest, restAgain, h)
		}
		return
	}
}

// deliver hands ms to h as one batch and returns their deliveries once h
// has returned; a hold one of them took (no dead letter possible) ends
// with the call.
func (p *partition) deliver(ctx context.Context, ms []kafkago.Message, again []bool, h broker.BatchHandler) []*delivery {
	ds := make([]*delivery, len(ms))
	hs := make([]broker.Delivery, len(ms))
	for i, m := range ms {
		ds[i] = p.newDelivery(ctx, m, again != nil && again[i])
		hs[i] = ds[i]
	}
	h(hs)
	for _, d := range ds {
		if d.held.Load() {
			p.unhold()
		}
	}
	return ds
}

// redeliver hands m over again, alone, with a growing backoff, until it
// is finished or the partition stops.
func (p *partition) redeliver(ctx context.Context, m kafkago.Message, settled bool, h broker.BatchHandler) {
	s := p.s
	backoff := s.o.RetryBackoff
	for {
		s.log.Warn("kafka message given back while its partition is still assigned; delivering it again in place",
			"topic", p.topic, "partition", p.id, "offset", m.Offset, "settled", settled)
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, s.o.RetryBackoffMax)
		d := p.deliver(ctx, []kafkago.Message{m}, []bool{true}, h)[0]
		if d.finished() || ctx.Err() != nil {
			return
		}
		settled = d.state.Load() == stateRequeued
	}
}

// finish marks a settled message and asks for a commit once CommitEvery
// messages finished since the last one.
func (p *partition) finish(off int64) {
	if n := p.track.finish(off); n >= p.s.o.CommitEvery {
		p.g.requestCommit()
	}
}

func (p *partition) updateLag() {
	hwm := p.hwm.Load()
	if hwm < 0 {
		return
	}
	base := p.track.committedOffset()
	if base < 0 {
		base = p.track.lowestUnfinished()
	}
	if base < 0 {
		return
	}
	p.lag.Set(float64(max(hwm-base, 0)))
}

// setFailing records whether the partition's fetching fails; false once
// the partition stopped.
func (p *partition) setFailing(v bool) bool {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	if p.stopped {
		return false
	}
	if v || p.failing {
		p.s.fetchFailed(p, v)
	}
	p.failing = v
	return true
}

// stopFailing clears the partition's failure for good: a stopped
// partition does not keep the source unready.
func (p *partition) stopFailing() {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	if p.failing {
		p.s.fetchFailed(p, false)
	}
	p.failing, p.stopped = false, true
}

// hold records that a message of this partition cannot be dead-lettered:
// the partition stops advancing until it succeeds.
func (p *partition) hold(off int64, reason string, err error) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	p.held++
	if p.held == 1 {
		p.s.held.Inc()
	}
	attrs := []any{"topic", p.topic, "partition", p.id, "offset", off, "reason", reason}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
		p.s.log.Error("kafka partition held: the dead letter could not be produced; retrying, nothing after this offset is committed", attrs...)
		return
	}
	p.s.log.Error("kafka partition held: message keeps failing and no dead_letter_topic is set; retrying, nothing after this offset is committed", attrs...)
}

func (p *partition) unhold() {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	p.held--
	if p.held == 0 {
		p.s.held.Dec()
		p.s.log.Info("kafka partition no longer held", "topic", p.topic, "partition", p.id)
	}
}
