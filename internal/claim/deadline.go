package claim

import (
	"context"
	"sync"
	"time"
)

// deadlines hands out the contexts that bound the claim, commit and
// release round trips. One context.WithTimeout per call is a timer and
// two allocations per message on a path that runs tens of thousands of
// times a second; the calls that start within one tick under the same
// parent share one context instead, so each round trip is bounded by
// between opTimeout and opTimeout+tick, and a second's worth of
// messages costs one timer. Only calls under the same parent share (a
// pipeline's two, a webhook request's own), so no call runs under
// another caller's values or cancellation; a parent new to the cache
// takes the least recently filled of its few slots.
type deadlines struct {
	timeout, tick time.Duration
	mu            sync.Mutex
	slots         [4]deadlineSlot
	next          int
}

type deadlineSlot struct {
	parent context.Context
	ctx    context.Context
	// reuseUntil is the last start time at which ctx still leaves a
	// call at least timeout.
	reuseUntil time.Time
}

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, tick: max(timeout/5, time.Millisecond)}
}

// bound returns a context that ends no earlier than the timeout from now
// and no later than a tick after that, or when parent ends. Its cancel
// func must be called when the call is done; for a shared context it
// does nothing (the shared timer ends it).
func (d *deadlines) bound(parent context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.slots {
		s := &d.slots[i]
		if s.parent == parent && s.ctx != nil {
			if !now.After(s.reuseUntil) && s.ctx.Err() == nil {
				return s.ctx, noCancel
			}
			d.fill(s, parent, now)
			return s.ctx, noCancel
		}
	}
	s := &d.slots[d.next]
	d.next = (d.next + 1) % len(d.slots)
	d.fill(s, parent, now)
	return s.ctx, noCancel
}

// fill starts a new shared context in s. The one it replaces is not
// cancelled: calls under it run on to its own deadline.
func (d *deadlines) fill(s *deadlineSlot, parent context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(parent, d.timeout+d.tick)
	_ = cancel // its timer ends it; no caller may cut the others' calls short
	s.parent, s.ctx, s.reuseUntil = parent, ctx, now.Add(d.tick)
}

func noCancel() {}
