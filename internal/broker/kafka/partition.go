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

	// OrderingKey: one lane per key with a message handed out (or
	// ready to be) and the later messages of that key waiting behind it;
	// ready holds the messages the worker hands out next, a lane's next
	// message included once the one before it finished. sets counts the
	// goroutines that run handed-out sets.
	mu    sync.Mutex
	lanes map[laneKey]*lane
	ready []*delivery
	sets  sync.WaitGroup

	heldMu sync.Mutex
	held   int // deliveries currently held (no dead letter possible)
}

// laneKey is what OrderingKey orders a message by: its record key, or
// without one its dedupe key (Options.OrderKey). dedupe keeps a record
// key and a dedupe key with the same bytes in different lanes.
type laneKey struct {
	dedupe bool
	key    string
}

// lane: the messages of one key waiting behind the one handed out.
type lane struct {
	queue []*delivery
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
		lanes:  map[laneKey]*lane{},
	}
	p.low = p.high / 2
	p.hwm.Store(-1)
	if !s.link.IsUp() {
		p.breakLost()
	}
	return p
}

// start runs the partition's worker until stop or the end of runCtx.
func (p *partition) start(runCtx context.Context, h broker.BatchHandler, set broker.SetHandler) {
	p.ctx, p.cancel = context.WithCancel(runCtx)
	go func() {
		defer close(p.done)
		if p.s.o.Ordering == OrderingKey {
			p.runKeyed(p.ctx, h, set)
			return
		}
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
		if out := p.takeNow(n); len(out) > 0 {
			return out, true
		}
		select {
		case <-p.wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// takeNow is take without waiting: nil when nothing is queued.
func (p *partition) takeNow(n int) []*kgo.Record {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	for len(p.queue) > 0 {
		n := min(n, len(p.queue))
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
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// run hands the partition's records to h in order until ctx ends.
// Records taken and never handed out stay unfinished: they are not
// committed past and are delivered again.
func (p *partition) run(ctx context.Context, h broker.BatchHandler) {
	for {
		batch, ok := p.take(ctx, p.s.o.BatchSize)
		if !ok || ctx.Err() != nil {
			return
		}
		p.handle(ctx, batch, h)
	}
}

// runKeyed hands the partition's records out per key until ctx ends,
// and returns only after every handler it started has returned.
//
// A message waits only for the earlier messages of its own key (its
// lane); the worker hands out, together, up to BatchSize ready messages
// of different keys, as many as the source has MaxInFlight slots free
// for, and each holds its slot until it is settled. The partition reads
// at most ReadAhead messages past its oldest unfinished one: those are
// what a crash delivers again, and what the commit mark waits behind. A
// message without any key waits for nobody.
func (p *partition) runKeyed(ctx context.Context, h broker.BatchHandler, set broker.SetHandler) {
	defer p.sets.Wait()
	for {
		ready := p.nextReady(ctx)
		if ready == nil {
			return
		}
		n := p.acquire(ctx, len(ready))
		if n == 0 {
			return
		}
		if n < len(ready) {
			p.mu.Lock()
			p.ready = append(ready[n:len(ready):len(ready)], p.ready...)
			p.mu.Unlock()
		}
		p.dispatch(ctx, ready[:n], h, set)
	}
}

// nextReady returns the messages that may be handed out now, waiting
// until there are some; nil once ctx ended.
func (p *partition) nextReady(ctx context.Context) []*delivery {
	for ctx.Err() == nil {
		p.mu.Lock()
		ready := p.ready
		p.ready = nil
		p.mu.Unlock()
		if len(ready) > 0 {
			return ready
		}
		if room := p.s.o.ReadAhead - p.track.window(); room > 0 {
			if recs := p.takeNow(min(p.s.o.BatchSize, room)); len(recs) > 0 {
				if ready := p.intoLanes(recs); len(ready) > 0 {
					return ready
				}
				continue
			}
		}
		select {
		case <-p.wake:
		case <-p.track.space:
		case <-ctx.Done():
		}
	}
	return nil
}

// intoLanes makes deliveries of recs and returns those whose key has no
// earlier message handed out or waiting; the others join their lane.
func (p *partition) intoLanes(recs []*kgo.Record) []*delivery {
	ready := make([]*delivery, 0, len(recs))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		d := p.newDelivery(r, nil, false)
		k, ok := p.laneOf(d)
		if !ok {
			ready = append(ready, d)
			continue
		}
		d.lane, d.inLane = k, true
		if l := p.lanes[k]; l != nil {
			l.queue = append(l.queue, d)
			continue
		}
		p.lanes[k] = &lane{}
		ready = append(ready, d)
	}
	return ready
}

// laneOf is the key d is ordered by: its record key, else its dedupe
// key; false when it has neither.
func (p *partition) laneOf(d *delivery) (laneKey, bool) {
	if len(d.r.Key) > 0 {
		return laneKey{key: string(d.r.Key)}, true
	}
	if p.s.o.OrderKey != nil {
		if k := p.s.o.OrderKey(&d.msg); k != "" {
			return laneKey{dedupe: true, key: k}, true
		}
	}
	return laneKey{}, false
}

// nextInLane hands out the message waiting behind d in its lane, or
// ends the lane; d just finished.
func (p *partition) nextInLane(d *delivery) {
	if !d.inLane {
		return
	}
	p.mu.Lock()
	l := p.lanes[d.lane]
	switch {
	case l == nil:
		p.mu.Unlock()
		return
	case len(l.queue) == 0:
		delete(p.lanes, d.lane)
		p.mu.Unlock()
		return
	}
	next := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	p.ready = append(p.ready, next)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// acquire takes up to n of the source's MaxInFlight slots, waiting for
// the first; 0 once ctx ended. The handlers' app connections are sized
// for MaxInFlight across the source, not per partition.
func (p *partition) acquire(ctx context.Context, n int) int {
	select {
	case p.s.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	got := 1
	for got < n {
		select {
		case p.s.slots <- struct{}{}:
			got++
		default:
			return got
		}
	}
	return got
}

// dispatch hands ds, each holding a slot, to the handlers on a goroutine
// of their own, and hands over again, in place, what they leave
// unfinished.
func (p *partition) dispatch(ctx context.Context, ds []*delivery, h broker.BatchHandler, set broker.SetHandler) {
	lost := p.lost()
	for _, d := range ds {
		d.lost = lost
		d.slot.Store(true)
	}
	p.sets.Add(1)
	go func() {
		defer p.sets.Done()
		p.handOver(ds, h, set)
		for _, d := range ds {
			if !d.finished() && ctx.Err() == nil {
				p.redeliver(ctx, d, h)
			}
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
	lost := p.lost()
	ds := make([]*delivery, len(rs))
	for i, r := range rs {
		ds[i] = p.newDelivery(r, lost, false)
	}
	p.handleAgain(ctx, ds, h)
}

// handleAgain is handle with deliveries.
func (p *partition) handleAgain(ctx context.Context, ds []*delivery, h broker.BatchHandler) {
	p.handOver(ds, h, nil)
	for i, d := range ds {
		if d.finished() {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.redeliver(ctx, d, h)
		// What the handler left unfinished after it goes again, in
		// order, behind it.
		var rest []*delivery
		for _, e := range ds[i+1:] {
			if !e.finished() {
				rest = append(rest, p.again(e, e.state.Load() == stateRequeued))
			}
		}
		if len(rest) > 0 && ctx.Err() == nil {
			p.handleAgain(ctx, rest, h)
		}
		return
	}
}

// handOver hands ds to the handler and returns once it has returned: to
// set when there is one and ds are more than one (key order), else to h
// as one batch (partition order), or each alone on a goroutine of its
// own (key order without a set handler). A hold one of them took (no
// dead letter possible) ends with the call, and so does a slot one of
// them left unsettled.
func (p *partition) handOver(ds []*delivery, h broker.BatchHandler, set broker.SetHandler) {
	hs := make([]broker.Delivery, len(ds))
	for i, d := range ds {
		hs[i] = d
	}
	switch {
	case len(ds) == 1 || p.s.o.Ordering != OrderingKey:
		h(hs)
	case set != nil:
		set(hs)
	default:
		var wg sync.WaitGroup
		for _, d := range hs {
			wg.Go(func() { h([]broker.Delivery{d}) })
		}
		wg.Wait()
	}
	for _, d := range ds {
		if d.held.Load() {
			p.unhold()
		}
		d.freeSlot()
	}
}

// again is a new delivery of d's message, handed over again in place;
// redelivered: d reached the handler and was given back.
func (p *partition) again(d *delivery, redelivered bool) *delivery {
	e := p.newDelivery(d.r, p.lost(), redelivered)
	e.lane, e.inLane = d.lane, d.inLane
	return e
}

// redeliver hands d's message over again, alone, with a growing backoff,
// until it is finished or the partition stops. After a broken link it
// waits for the link first: handing it over earlier would only see it
// lost again.
func (p *partition) redeliver(ctx context.Context, d *delivery, h broker.BatchHandler) {
	s := p.s
	b := backoff.New(backoff.Policy{Initial: s.o.RetryBackoff, Max: s.o.RetryBackoffMax})
	for {
		s.log.Warn("kafka message given back while its partition is still assigned; delivering it again in place",
			"topic", p.topic, "partition", p.id, "offset", d.r.Offset, "settled", d.state.Load() == stateRequeued)
		if !backoff.Wait(ctx, nil, b.Next()) || !s.link.Wait(ctx) {
			return
		}
		d = p.again(d, true)
		if s.o.Ordering == OrderingKey {
			if p.acquire(ctx, 1) == 0 {
				return
			}
			d.slot.Store(true)
		}
		p.handOver([]*delivery{d}, h, nil)
		if d.finished() || ctx.Err() != nil {
			return
		}
	}
}

// finish marks a settled message, hands out the next message of its key
// (key order) and asks for a commit once CommitEvery messages finished
// since the last one.
func (p *partition) finish(d *delivery) {
	d.freeSlot()
	n := p.track.finish(d.r.Offset)
	p.nextInLane(d)
	if n >= p.s.o.CommitEvery {
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
