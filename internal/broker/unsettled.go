package broker

import (
	"sync"
	"sync/atomic"
	"time"
)

// Unsettled counts a source's deliveries handed to the handler and not
// settled yet. A handler may return before its delivery is settled (the
// pipeline holds a message whose key is busy off the source's worker), so
// a source that stops waits for these, not only for its handlers, before
// it closes the connection they settle on: a settle that reaches the
// broker is a requeue that keeps the message's place and costs what the
// source decides, where a closed connection leaves it to the broker.
type Unsettled struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// Add counts a delivery handed out.
func (u *Unsettled) Add() {
	u.mu.Lock()
	u.n++
	u.mu.Unlock()
}

// Done counts a delivery settled, once: done is the delivery's own flag,
// so a delivery whose settles are retried (a failed dead letter, then a
// requeue) is counted when the first one holds.
func (u *Unsettled) Done(done *atomic.Bool) {
	if !done.CompareAndSwap(false, true) {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n--
	if u.n == 0 && u.idle != nil {
		close(u.idle)
		u.idle = nil
	}
}

// Wait waits until every delivery handed out is settled, at most
// timeout; it reports whether they all are.
func (u *Unsettled) Wait(timeout time.Duration) bool {
	u.mu.Lock()
	if u.n == 0 {
		u.mu.Unlock()
		return true
	}
	if u.idle == nil {
		u.idle = make(chan struct{})
	}
	idle := u.idle
	u.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// SettleGrace bounds how long a stopping source waits for deliveries its
// handlers handed on: the pipeline requeues them as soon as it drains.
const SettleGrace = 10 * time.Second
