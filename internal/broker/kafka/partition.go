package kafka

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// partition is one assigned partition, from its assignment until it is
// revoked, lost or the source stops.
type partition struct {
	s     *Source
	cl    *kgo.Client
	topic string
	id    int32
	label string
	track *tracker
	lag   prometheus.Gauge
	hwm   atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the worker and every handler it started returned

	// queue holds records polled and not yet handed out, in offset
	// order; past high the partition is paused at the client, and
	// resumed once the worker took it down to low.
	qmu       sync.Mutex
	queue     []*kgo.Record
	paused    bool
	high, low int
	wake      chan struct{}

	// lost is closed when the partition stops or the link breaks; a
	// mended link gives a partition that still runs a new one.
	lostMu  sync.Mutex
	lostCh  chan struct{}
	isLost  bool
	stopped bool

	// OrderingKey: one lane per record key with messages running or
	// waiting; a lane's goroutine ends when its queue is empty.
	mu    sync.Mutex
	lanes map[string]*lane
	laneW sync.WaitGroup

	heldMu sync.Mutex
	held   int // deliveries currently held (no dead letter possible)
}

type lane struct {
	queue []*kgo.Record
}

func newPartition(s *Source, cl *kgo.Client, topic string, id int32) *partition {
	label := strconv.Itoa(int(id))
	// The worker takes a batch (partition order) or fills the window
	// (key order) from what waits; twice that waiting is enough to never
	// run dry between two fetches.
	high := 2 * s.o.BatchSize
	if s.o.Ordering == OrderingKey {
		high = 2 * s.o.MaxInFlight
	}
	p := &partition{
		s:      s,
		cl:     cl,
		topic:  topic,
		id:     id,
		label:  label,
		track:  newTracker(-1),
		lag:    s.m.Lag.WithLabelValues(topic, label),
		done:   make(chan struct{}),
		high:   max(high, 2),
		wake:   make(chan struct{}, 1),
		lostCh: make(chan struct{}),
		lanes:  map[string]*lane{},
	}
	p.low = p.high / 2
	p.hwm.Store(-1)
	if s.link.isDown() {
		p.breakLost()
	}
	return p
}

// start runs the partition's worker until stop or the end of runCtx.
func (p *partition) start(runCtx context.Context, h broker.BatchHandler) {
	p.ctx, p.cancel = context.WithCancel(runCtx)
	go func() {
		defer close(p.done)
		p.run(p.ctx, h)
	}()
}

// stop ends the partition: Lost closes and nothing more is handed out.
func (p *partition) stop() {
	p.lostMu.Lock()
	p.stopped = true
	p.lostMu.Unlock()
	p.breakLost()
	p.cancel()
}

// release forgets the partition's metrics (another member owns it now, or
// nobody does) and its pause, which the client would keep for a later
// assignment of the same partition.
func (p *partition) release() {
	p.s.m.Lag.DeleteLabelValues(p.topic, p.label)
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if p.paused {
		p.paused = false
		p.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.id}})
	}
	clear(p.queue)
	p.queue = nil
}

func (p *partition) lost() <-chan struct{} {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	return p.lostCh
}

func (p *partition) breakLost() {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	if !p.isLost {
		close(p.lostCh)
		p.isLost = true
	}
}

func (p *partition) renewLost() {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	if p.isLost && !p.stopped {
		p.lostCh = make(chan struct{})
		p.isLost = false
	}
}

// enqueue appends polled records; the partition is paused once enough
// wait. Pausing under qmu keeps a pause and the resume that follows it in
// order.
func (p *partition) enqueue(recs []*kgo.Record, hwm int64) {
	if hwm > p.hwm.Load() {
		p.hwm.Store(hwm)
		p.updateLag()
	}
	p.qmu.Lock()
	p.queue = append(p.queue, recs...)
	if !p.paused && len(p.queue) >= p.high {
		p.paused = true
		p.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.id}})
	}
	p.qmu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns up to n queued records, waiting for one; false once ctx
// ended. Every record it returns is tracked as unfinished.
func (p *partition) take(ctx context.Context, n int) ([]*kgo.Record, bool) {
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		p.qmu.Lock()
		if len(p.queue) > 0 {
			n = min(n, len(p.queue))
			out := make([]*kgo.Record, 0, n)
			for _, r := range p.queue[:n] {
				if p.track.add(r.Offset) {
					out = append(out, r)
				}
			}
			clear(p.queue[:n])
			p.queue = p.queue[n:]
			if p.paused && len(p.queue) <= p.low {
				p.paused = false
				p.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.id}})
			}
			p.qmu.Unlock()
			if len(out) > 0 {
				return out, true
			}
			continue
		}
		p.qmu.Unlock()
		select {
		case <-p.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// run hands the partition's records to h (in order, or per key) until
// ctx ends, and returns only after every handler it started has returned.
// Records taken and never handed out stay unfinished: they are not
// committed past and are delivered again.
func (p *partition) run(ctx context.Context, h broker.BatchHandler) {
	if p.s.o.Ordering == OrderingKey {
		for ctx.Err() == nil {
			if !p.waitForRoom(ctx) {
				break
			}
			recs, ok := p.take(ctx, 1)
			if !ok {
				break
			}
			p.dispatchByKey(ctx, recs[0], h)
		}
		p.laneW.Wait()
		return
	}
	for {
		batch, ok := p.take(ctx, p.s.o.BatchSize)
		if !ok || ctx.Err() != nil {
			return
		}
		p.handle(ctx, batch, h)
	}
}

// waitForRoom holds the worker (key mode) while MaxInFlight handed-out
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

// dispatchByKey runs r after every earlier message with the same record
// key; a message without a key is ordered with the other keyless ones.
func (p *partition) dispatchByKey(ctx context.Context, r *kgo.Record, h broker.BatchHandler) {
	k := string(r.Key)
	p.mu.Lock()
	if l, ok := p.lanes[k]; ok {
		l.queue = append(l.queue, r)
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
				p.handle(ctx, []*kgo.Record{r}, h)
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
			r = l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			p.mu.Unlock()
		}
	}()
}

// handle gives rs to h until each is finished (acked or dead-lettered)
// or the partition stops. The pipeline leaves a Kafka message unfinished
// only when it stops or the delivery was lost; should it leave one while
// the partition is still ours, the message is handed over again, alone,
// after a backoff rather than left unfinished, which would stall the
// commits.
func (p *partition) handle(ctx context.Context, rs []*kgo.Record, h broker.BatchHandler) {
	p.handleAgain(ctx, rs, nil, h)
}

// handleAgain is handle with, per message, whether it was handed over
// before (Redelivered).
func (p *partition) handleAgain(ctx context.Context, rs []*kgo.Record, again []bool, h broker.BatchHandler) {
	ds := p.deliver(rs, again, h)
	for i, d := range ds {
		if d.finished() {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.redeliver(ctx, rs[i], d.state.Load() == stateRequeued, h)
		// What the handler left unfinished after it goes again, in
		// order, behind it.
		var rest []*kgo.Record
		var restAgain []bool
		for _, e := range ds[i+1:] {
			if !e.finished() {
				rest = append(rest, e.r)
				restAgain = append(restAgain, e.state.Load() == stateRequeued)
			}
		}
		if len(rest) > 0 && ctx.Err() == nil {
			p.handleAgain(ctx, rest, restAgain, h)
		}
		return
	}
}

// deliver hands rs to h as one batch and returns their deliveries once h
// has returned; a hold one of them took (no dead letter possible) ends
// with the call.
func (p *partition) deliver(rs []*kgo.Record, again []bool, h broker.BatchHandler) []*delivery {
	ds := make([]*delivery, len(rs))
	hs := make([]broker.Delivery, len(rs))
	lost := p.lost()
	for i, r := range rs {
		ds[i] = p.newDelivery(r, lost, again != nil && again[i])
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

// redeliver hands r over again, alone, with a growing backoff, until it
// is finished or the partition stops. After a broken link it waits for
// the link first: handing it over earlier would only see it lost again.
func (p *partition) redeliver(ctx context.Context, r *kgo.Record, settled bool, h broker.BatchHandler) {
	s := p.s
	b := backoff.New(backoff.Policy{Initial: s.o.RetryBackoff, Max: s.o.RetryBackoffMax})
	for {
		s.log.Warn("kafka message given back while its partition is still assigned; delivering it again in place",
			"topic", p.topic, "partition", p.id, "offset", r.Offset, "settled", settled)
		if !backoff.Wait(ctx, nil, b.Next()) || !s.link.wait(ctx) {
			return
		}
		d := p.deliver([]*kgo.Record{r}, []bool{true}, h)[0]
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
		p.s.requestCommit()
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
