// Package statelog logs a dependency's state changes instead of its every
// failure: one line when it goes down, one when it is back. While Redis,
// a broker or the app is down every message fails the same way, and a
// line per message (or per retry) buries the one line that matters.
package statelog

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Tracker follows one dependency. Its methods are safe for concurrent
// use, and a nil *Tracker does nothing. Up is one atomic load while the
// dependency is up, so it can sit on a per-message path.
//
// A dependency coming back often flickers: go-redis, for one, keeps
// answering with its last dial error for a moment after the server is
// back. So the "back" line waits until successes have gone on for Settle
// with no failure; a failure meanwhile is part of the same outage.
type Tracker struct {
	log            *slog.Logger
	downMsg, upMsg string
	attrs          []any
	// Settle is how long successes must last before the dependency is
	// reported back. Set it before use; default 1s.
	Settle time.Duration

	down     atomic.Bool
	mu       sync.Mutex
	since    time.Time // when it went down
	fails    int
	lastFail time.Time
	pending  *time.Timer // confirms the "back" line
	upFrom   time.Time   // first success of the pending run
}

// New returns a Tracker that logs downMsg (warn) at the first failure
// after a success, or at start, and upMsg (info) once successes went on
// for Settle; attrs are added to both lines.
func New(log *slog.Logger, downMsg, upMsg string, attrs ...any) *Tracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tracker{log: log, downMsg: downMsg, upMsg: upMsg, attrs: attrs, Settle: time.Second}
}

// Down records a failure. Only the first of an outage is logged, with
// err. It reports whether this call logged.
func (t *Tracker) Down(err error) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fails++
	t.lastFail = time.Now()
	if t.down.Load() {
		return false
	}
	t.down.Store(true)
	t.since, t.fails = t.lastFail, 1
	a := append([]any{"err", errString(err)}, t.attrs...)
	t.log.Warn(t.downMsg, a...)
	return true
}

// Up records a success. After an outage, the "back" line follows once
// no failure was seen for Settle. Call it on every success, not only the
// first after a failure: a failure within Settle cancels the pending
// line, and only a later Up arms it again.
func (t *Tracker) Up() {
	if t == nil || !t.down.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.down.Load() || t.pending != nil {
		return
	}
	t.upFrom = time.Now()
	t.pending = time.AfterFunc(t.Settle, t.confirm)
}

func (t *Tracker) confirm() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = nil
	if !t.down.Load() || !t.lastFail.Before(t.upFrom) {
		return // failed again: still the same outage; the next success re-arms
	}
	t.down.Store(false)
	a := append([]any{"down_for", t.upFrom.Sub(t.since).Round(time.Millisecond).String(), "failures", t.fails}, t.attrs...)
	t.log.Info(t.upMsg, a...)
}

// IsDown reports whether the dependency is down, or back for less than
// Settle.
func (t *Tracker) IsDown() bool { return t != nil && t.down.Load() }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
