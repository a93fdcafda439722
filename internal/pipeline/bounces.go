package pipeline

import (
	"sync"
	"sync/atomic"
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
// A success or a dead letter of the key ends its count. The count is this
// replica's own (another replica that gets the message starts at one) and
// lives only in memory; past maxBounced keys a new one is not counted, and
// its wait stays at backoff_initial, as before.
type bounces struct {
	// n is len(m): every settle reads it, and only takes the lock when
	// some key is counted.
	n  atomic.Int32
	mu sync.Mutex
	m  map[string]int
}

// add counts one more bounce of key and returns how many there were,
// this one included; 1 for a message without a key.
func (b *bounces) add(key string) int {
	if key == "" {
		return 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.m[key]
	if !ok && len(b.m) >= maxBounced {
		return 1
	}
	if b.m == nil {
		b.m = make(map[string]int)
	}
	n++
	b.m[key] = n
	b.n.Store(int32(len(b.m)))
	return n
}

// end forgets key's count: its message succeeded or was dead-lettered.
func (b *bounces) end(key string) {
	if b.n.Load() == 0 || key == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
	b.n.Store(int32(len(b.m)))
}
