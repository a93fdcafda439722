package pipeline

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxBounced bounds the keys one source counts bounces of.
const maxBounced = 4096

// bounces counts, per key, the times this replica gave a message back to
// its broker after giving up on it: a failure for good on a source without
// a dead letter (RabbitMQ's mode none, a Redis source's requeue), or a
// dead letter that could not be written. The broker hands it straight
// back, and each delivery counts its attempts afresh (X-Dedupe-Attempt is
// within a delivery), so the wait before giving it back, taken from the
// attempt alone, was backoff_initial every time: the app was sent the same
// message five times a second, for as long as it stayed. With the count
// the wait grows as a retry's does, to backoff_max.
//
// A success or a dead letter of the key on this source ends its count.
// A message can also leave without either (another replica settles it,
// a quorum queue's delivery limit drops it, an operator purges the
// queue), so a count not added to for stale, longer than a bounce's
// longest wait, counts as ended: the key starts at one again, and a full
// map makes room by dropping such counts. The count is this replica's
// and this source's own, in memory; past maxBounced live keys a new one
// is not counted, and its wait stays at backoff_initial.
type bounces struct {
	stale time.Duration
	// n is len(m): every settle reads it, and only takes the lock when
	// some key is counted.
	n  atomic.Int32
	mu sync.Mutex
	m  map[string]bounce
}

type bounce struct {
	n    int
	last time.Time
}

// add counts one more bounce of key, at now, and returns how many there
// were, this one included; 1 for a message without a key.
func (b *bounces) add(key string, now time.Time) int {
	if key == "" {
		return 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.m[key]
	if ok && now.Sub(c.last) > b.stale {
		c.n = 0
	}
	if !ok && len(b.m) >= maxBounced {
		for k, o := range b.m {
			if now.Sub(o.last) > b.stale {
				delete(b.m, k)
			}
		}
		if len(b.m) >= maxBounced {
			b.n.Store(int32(len(b.m)))
			return 1
		}
	}
	if b.m == nil {
		b.m = make(map[string]bounce)
	}
	c.n++
	c.last = now
	b.m[key] = c
	b.n.Store(int32(len(b.m)))
	return c.n
}

// counting reports whether any key is counted: the only case in which a
// settle has a count to end.
func (b *bounces) counting() bool { return b.n.Load() != 0 }

// end forgets key's count: its message succeeded or was dead-lettered.
func (b *bounces) end(key string) {
	if key == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
	b.n.Store(int32(len(b.m)))
}
