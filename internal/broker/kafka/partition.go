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
// revoked, lost or the source stops. What it holds is in parts, each
// with its own lock: the records fetched and not yet taken (fetched),
// which taken messages are finished and so what may be committed
// (track), the Lost channel of its deliveries (gate), the key lanes of
// OrderingKey (lanes), the holds of messages that cannot be
// dead-lettered (holds) and the lag gauge (lag).
type partition struct {
	s *Source
	// cl is the client the partition was assigned through: its fetches
	// and its dead letters go through it.
	cl    *kgo.Client
	topic string
	id    int32

	fetched *fetched
	track   *tracker
	gate    lostGate
	lanes   lanes
	holds   holds
	lag     lagMeter

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the worker and every handler it started returned
	// wake tells the worker there may be something to hand out: records
	// fetched, or a lane's next message ready.
	wake chan struct{}
	// sets counts the goroutines that run handed-out sets (OrderingKey).
	sets sync.WaitGroup
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
	high = max(high, 2)
	p := &partition{
		s:       s,
		cl:      cl,
		topic:   topic,
		id:      id,
		fetched: &fetched{cl: cl, topic: topic, id: id, high: high, low: high / 2},
		track:   newTracker(-1),
		gate:    lostGate{ch: make(chan struct{})},
		lanes:   lanes{byKey: map[laneKey]*lane{}},
		holds:   holds{gauge: s.held},
		lag:     lagMeter{gauge: s.m.Lag.WithLabelValues(topic, label), label: label},
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	p.lag.hwm.Store(-1)
	if !s.link.IsUp() {
		p.gate.close()
	}
	return p
}

// fetched holds the records polled for one partition and not yet taken,
// in offset order. Past high the partition is paused at the client, and
// resumed once the worker took it down to low; pausing under mu keeps a
// pause and the resume that follows it in order.
type fetched struct {
	cl        *kgo.Client
	topic     string
	id        int32
	high, low int

	mu     sync.Mutex
	recs   []*kgo.Record
	paused bool
}

// add appends polled records, pausing the partition once enough wait.
func (f *fetched) add(recs []*kgo.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs = append(f.recs, recs...)
	if !f.paused && len(f.recs) >= f.high {
		f.paused = true
		f.cl.PauseFetchPartitions(map[string][]int32{f.topic: {f.id}})
	}
}

// take returns up to n records that keep accepts, without waiting: nil
// when none is queued. Records keep refuses are dropped.
func (f *fetched) take(n int, keep func(off int64) bool) []*kgo.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.recs) > 0 {
		n := min(n, len(f.recs))
		out := make([]*kgo.Record, 0, n)
		for _, r := range f.recs[:n] {
			if keep(r.Offset) {
				out = append(out, r)
			}
		}
		clear(f.recs[:n])
		f.recs = f.recs[n:]
		if f.paused && len(f.recs) <= f.low {
			f.paused = false
			f.cl.ResumeFetchPartitions(map[string][]int32{f.topic: {f.id}})
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// release drops what waits and the pause, which the client would keep
// for a later assignment of the same partition.
func (f *fetched) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused {
		f.paused = false
		f.cl.ResumeFetchPartitions(map[string][]int32{f.topic: {f.id}})
	}
	clear(f.recs)
	f.recs = nil
}

// lostGate is the Lost channel of a partition's deliveries: closed when
// the partition stops or the link breaks; a mended link gives a
// partition that still runs a new one.
type lostGate struct {
	mu      sync.Mutex
	ch      chan struct{}
	closed  bool
	stopped bool
}

func (g *lostGate) current() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

func (g *lostGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closeLocked()
}

func (g *lostGate) closeLocked() {
	if !g.closed {
		close(g.ch)
		g.closed = true
	}
}

// stop closes the gate for good.
func (g *lostGate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	g.closeLocked()
}

func (g *lostGate) renew() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed && !g.stopped {
		g.ch = make(chan struct{})
		g.closed = false
	}
}

// lanes (OrderingKey): one lane per key with a message handed out (or
// ready to be) and the later messages of that key waiting behind it;
// ready holds the messages the worker hands out next, a lane's next
// message included once the one before it finished.
type lanes struct {
	mu    sync.Mutex
	byKey map[laneKey]*lane
	ready []*delivery
}

// takeReady returns, and forgets, what is ready.
func (l *lanes) takeReady() []*delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	ready := l.ready
	l.ready = nil
	return ready
}

// putBack puts ds, taken and not handed out, before what is ready.
func (l *lanes) putBack(ds []*delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready = append(ds[:len(ds):len(ds)], l.ready...)
}

// join adds d to its lane (key k); true when its lane was empty, so it
// may be handed out now.
func (l *lanes) join(d *delivery, k laneKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.lane, d.inLane = k, true
	if ln := l.byKey[k]; ln != nil {
		ln.queue = append(ln.queue, d)
		return false
	}
	l.byKey[k] = &lane{}
	return true
}

// next makes the message waiting behind d in its lane ready, or ends
// the lane; d just finished. It reports whether one became ready.
func (l *lanes) next(d *delivery) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.byKey[d.lane]
	switch {
	case ln == nil:
		return false
	case len(ln.queue) == 0:
		delete(l.byKey, d.lane)
		return false
	}
	next := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	l.ready = append(l.ready, next)
	return true
}

// holds counts the partition's messages that cannot be dead-lettered;
// the source's partitions-held gauge counts the partitions with one.
type holds struct {
	gauge prometheus.Gauge
	mu    sync.Mutex
	n     int
}

func (h *holds) add() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if h.n == 1 {
		h.gauge.Inc()
	}
}

// done ends a hold; true when it was the last.
func (h *holds) done() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.n == 0 {
		h.gauge.Dec()
		return true
	}
	return false
}

// lagMeter is the partition's lag gauge: the high watermark past the
// committed offset (or, before a commit, the oldest unfinished one).
type lagMeter struct {
	gauge prometheus.Gauge
	label string
	hwm   atomic.Int64
}

// update sets the gauge from the tracker.
func (m *lagMeter) update(t *tracker) {
	hwm := m.hwm.Load()
	if hwm < 0 {
		return
	}
	base := t.committedOffset()
	if base < 0 {
		base = t.lowestUnfinished()
	}
	if base < 0 {
		return
	}
	m.gauge.Set(float64(max(hwm-base, 0)))
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
	p.gate.stop()
	p.cancel()
}

// release forgets the partition's metrics (another member owns it now, or
// nobody does) and its fetched records and pause.
func (p *partition) release() {
	p.s.m.Lag.DeleteLabelValues(p.topic, p.lag.label)
	p.fetched.release()
}

func (p *partition) lost() <-chan struct{} { return p.gate.current() }
func (p *partition) breakLost()            { p.gate.close() }
func (p *partition) renewLost()            { p.gate.renew() }

// poke wakes the worker.
func (p *partition) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// enqueue appends polled records.
func (p *partition) enqueue(recs []*kgo.Record, hwm int64) {
	if hwm > p.lag.hwm.Load() {
		p.lag.hwm.Store(hwm)
		p.updateLag()
	}
	p.fetched.add(recs)
	p.poke()
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
	return p.fetched.take(n, p.track.add)
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
			p.lanes.putBack(ready[n:])
		}
		p.dispatch(ctx, ready[:n], h, set)
	}
}

// nextReady returns the messages that may be handed out now, waiting
// until there are some; nil once ctx ended.
func (p *partition) nextReady(ctx context.Context) []*delivery {
	for ctx.Err() == nil {
		if ready := p.lanes.takeReady(); len(ready) > 0 {
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
	for _, r := range recs {
		d := p.newDelivery(r, nil, false)
		if k, ok := p.laneOf(d); !ok || p.lanes.join(d, k) {
			ready = append(ready, d)
		}
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
	if d.inLane && p.lanes.next(d) {
		p.poke()
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

func (p *partition) updateLag() { p.lag.update(p.track) }

// hold records that a message of this partition cannot be dead-lettered:
// the partition stops advancing until it succeeds.
func (p *partition) hold(off int64, reason string, err error) {
	p.holds.add()
	attrs := []any{"topic", p.topic, "partition", p.id, "offset", off, "reason", reason}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
		p.s.log.Error("kafka partition held: the dead letter could not be produced; retrying, nothing after this offset is committed", attrs...)
		return
	}
	p.s.log.Error("kafka partition held: message keeps failing and no dead_letter_topic is set; retrying, nothing after this offset is committed", attrs...)
}

func (p *partition) unhold() {
	if p.holds.done() {
		p.s.log.Info("kafka partition no longer held", "topic", p.topic, "partition", p.id)
	}
}
