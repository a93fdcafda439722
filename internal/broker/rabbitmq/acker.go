package rabbitmq

import (
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// acker coalesces the acks of one channel: instead of one frame (and one
// write syscall) per message, it acks every settled delivery up to the
// highest contiguous tag with one basic.ack multiple=true, at most
// ackDelay after the ack was asked for. Acks were a tenth of the proxy's
// CPU at full speed.
//
// Tags on a channel are 1, 2, 3, … in delivery order. A multiple ack of
// tag T acks every unacked delivery up to T, so it is sent only for T
// below which every delivery is settled (acked here, nacked, or acked
// alone); an ack that is not contiguous (a slow message before it) is
// sent alone at the next flush, so a stuck message never holds back the
// acks, and the prefetch window, of the ones behind it. A tag is never
// acked twice: RabbitMQ closes the channel on an unknown tag (406).
//
// The bookkeeping is O(1) amortised per settle however long a message
// stays stuck: the acker remembers the tags that are not settled yet
// (below the highest settled one: at most the prefetch window), not the
// ones that are, and the acks not sent yet (at most ackBatch).
//
// An ack still unsent when the connection dies is lost like any ack in
// flight: the broker redelivers the message and the seen-set finds it
// done.
type acker struct {
	ch  ackChannel
	log *slog.Logger

	mu sync.Mutex
	// next is the lowest tag not yet settled; hi the highest settled one
	// (next-1 when every settled tag is contiguous).
	next, hi uint64
	// open holds the tags between next and hi not settled yet, and gaps
	// the same tags in ascending order, plus some settled since (dropped
	// lazily): its front is the next tag once next settles.
	open map[uint64]struct{}
	gaps []uint64
	// top is the highest tag below next acked but not sent, 0 if none;
	// loose the acks not sent yet that were above next when asked for.
	top    uint64
	loose  []uint64
	unsent int // acks since the last flush
	timer  *time.Timer

	closed bool
}

// ackChannel is what the acker sends on: an *amqp.Channel.
type ackChannel interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

const (
	ackDelay = time.Millisecond
	ackBatch = 64
)

func newAcker(ch ackChannel, log *slog.Logger) *acker {
	return &acker{ch: ch, log: log, next: 1, open: map[uint64]struct{}{}, loose: make([]uint64, 0, ackBatch)}
}

func (a *acker) ack(tag uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return amqp.ErrClosed
	}
	if a.settledBefore(tag) {
		return broker.ErrAlreadySettled
	}
	if a.settle(tag) {
		a.top = max(a.top, tag)
	} else {
		a.loose = append(a.loose, tag)
	}
	a.unsent++
	if a.unsent >= ackBatch {
		return a.flush()
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(ackDelay, a.onTimer)
	}
	return nil
}

// nack goes out at once: it carries requeue or reject, and it must not
// wait behind a batch. It is sent before the tag counts as settled, so no
// multiple ack can cover it first.
func (a *acker) nack(tag uint64, requeue bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return amqp.ErrClosed
	}
	if a.settledBefore(tag) {
		return broker.ErrAlreadySettled
	}
	err := a.ch.Nack(tag, false, requeue)
	a.settle(tag)
	return err
}

// settledBefore guards the channel: a tag settled twice is unknown to
// RabbitMQ the second time, and it closes the channel (406). Deliveries
// settle once, so this only catches a bug. a.mu is held.
func (a *acker) settledBefore(tag uint64) bool {
	if tag < a.next {
		return true
	}
	if tag > a.hi {
		return false
	}
	_, out := a.open[tag]
	return !out
}

// settle records tag (not settled before) as settled and moves next past
// every settled tag; it reports whether tag is now below next (a multiple
// ack may cover it). a.mu is held.
func (a *acker) settle(tag uint64) bool {
	if tag > a.hi {
		// Tags between the highest settled one and this one are still
		// out: each becomes a gap once, so this loop is paid once per tag.
		for t := a.hi + 1; t < tag; t++ {
			a.open[t] = struct{}{}
			a.gaps = append(a.gaps, t)
		}
		a.hi = tag
	} else {
		delete(a.open, tag)
	}
	if tag != a.next {
		if len(a.gaps) > 2*len(a.open)+ackBatch {
			a.compact()
		}
		return false
	}
	for len(a.gaps) > 0 {
		if _, out := a.open[a.gaps[0]]; out {
			break
		}
		a.gaps = a.gaps[1:]
	}
	if len(a.gaps) > 0 {
		a.next = a.gaps[0]
	} else {
		a.next = a.hi + 1
		a.gaps = a.gaps[:0]
	}
	return true
}

// compact drops the gaps settled since: behind a stuck tag they would pile
// up. It runs when they outnumber the open ones, so it costs O(1) per gap.
func (a *acker) compact() {
	kept := make([]uint64, 0, 2*len(a.open)+ackBatch)
	for _, t := range a.gaps {
		if _, out := a.open[t]; out {
			kept = append(kept, t)
		}
	}
	a.gaps = kept
}

// flush sends what is pending; a.mu is held.
func (a *acker) flush() error {
	var err error
	alone := a.loose[:0]
	for _, t := range a.loose {
		if t < a.next {
			// Contiguous since: the multiple ack below covers it.
			a.top = max(a.top, t)
		} else {
			alone = append(alone, t)
		}
	}
	if a.top != 0 {
		err = a.ch.Ack(a.top, true)
		a.top = 0
	}
	for _, t := range alone {
		if e := a.ch.Ack(t, false); e != nil && err == nil {
			err = e
		}
	}
	a.loose = a.loose[:0]
	a.unsent = 0
	if err != nil {
		a.log.Warn("rabbitmq ack failed; the broker will redeliver and the seen-set will skip it", "err", err)
	}
	return err
}

func (a *acker) onTimer() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	if !a.closed {
		_ = a.flush()
	}
}

// close sends what is pending (flush=true, a graceful stop) and refuses
// further settles.
func (a *acker) close(flush bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if flush {
		_ = a.flush()
	}
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
