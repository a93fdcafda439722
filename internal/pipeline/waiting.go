package pipeline

import (
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
)

// The waiting room holds the deliveries whose key is busy — claimed by
// another replica, or by this one for a request that may still run —
// without spending anything the broker counts and without holding a
// worker of the source.
//
// A requeue would cost the message a delivery: RabbitMQ's quorum queues
// drop (or dead-letter) a message past their delivery limit, 20 by
// default on 4.x, and a Redis stream's delivery count moves toward
// max_deliveries. And it comes straight back: a busy key was bounced at
// broker speed, thousands of times a second. So a busy message stays
// unacked where it is and claims again when the holder's claim can have
// ended: at once when a holder on this replica lets go, when a claim this
// replica kept for a request that may still run expires, and otherwise
// after busy_delay, then twice as long each time up to a third of the
// lease — the interval at which a live holder renews, so a holder that
// died is noticed within a lease of its last renewal.
//
// On a source that requeues (RabbitMQ, Redis) the wait runs on a goroutine
// of its own, so the source's workers go on with the messages behind it;
// up to maxParked per source, past which a busy message waits on its
// worker (which slows the source's fetching down instead of growing the
// room without bound). On Kafka the message waits where it is: the
// partition, or the key's lane, is ordered behind it.
//
// The deliveries in the room are still the source's: they stay reserved
// (RabbitMQ: unacked, within the prefetch; a Redis list: in the processing
// list; a stream: pending, renewed). On Drain they are requeued at once,
// and a source waits for them before it closes its connection.

// maxParked bounds the messages of one source waiting off a worker.
const maxParked = 1024

// busyDelay is how long a message whose key is busy elsewhere waits
// before its look number n (1 for the first).
func (w *work) busyDelay(n int) time.Duration {
	if until, ok := w.c.KeptHere(); ok {
		// This replica left the key claimed until then: no sooner.
		return max(time.Until(until), backoff.MinDelay)
	}
	return w.s.p.busy.Delay(n, 0)
}

// busyReason says who holds a key found busy that no local claim holds.
func (w *work) busyReason() string {
	if _, ok := w.c.KeptHere(); ok {
		return "key busy: claimed by this replica, whose last request for it may still run at the app"
	}
	return "key busy on another replica"
}

// waitingRoom is one source's count of parked messages.
type waitingRoom struct {
	mu sync.Mutex
	n  int
}

func (r *waitingRoom) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= maxParked {
		return false
	}
	r.n++
	return true
}

func (r *waitingRoom) leave() {
	r.mu.Lock()
	r.n--
	r.mu.Unlock()
}

// park hands a message whose key is busy to a goroutine of the waiting
// room, which waits (waitBusy) and then goes on with its trip as the
// worker would have. It reports false when the message must wait on its
// worker instead: the source is ordered (Kafka) or the room is full. A
// parked message waits on the room's goroutine (loop), never parks again.
func (w *work) park(ch <-chan struct{}) bool {
	if !w.s.Requeues || !w.s.room.enter() {
		return false
	}
	w.s.m.waiting.Inc()
	// Owned by the delivery: it ends once the delivery is settled, and a
	// drain ends its wait at once (the source waits for that settle).
	go func() {
		defer w.s.room.leave()
		defer w.s.m.waiting.Dec()
		w.guarded(func() bool {
			if !w.waitBusy(ch) {
				w.requeue(w.busyStopReason(ch))
				return false
			}
			return w.loop(true)
		})
	}()
	return true
}

// guarded runs f, a stretch of the delivery's trip, with the clean-up that
// follows it: a panic is recovered (and the message given back), the
// local claim record dropped, the in-flight gauge lowered — unless f
// handed the delivery on (it reports true), whose new owner does that.
func (w *work) guarded(f func() (handedOff bool)) {
	handedOff := false
	defer func() {
		if !handedOff {
			w.s.m.inflight.Dec()
		}
	}()
	defer func() {
		if !handedOff {
			w.c.Close()
		}
	}()
	defer w.recoverPanic()
	handedOff = f()
}
