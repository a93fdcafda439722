package statelog

import (
	"sync"
	"time"
)

// Limiter lets through at most one event per interval and counts the
// ones it holds back, so that a stream of identical per-message lines
// becomes at most one line per interval that says how many it stands
// for. Held-back events are reported with the next event let through,
// or, if none comes, by flush once the interval is over.
type Limiter struct {
	every time.Duration
	flush func(suppressed int)
	mu    sync.Mutex
	last  time.Time
	held  int
	timer *time.Timer
}

// NewLimiter lets one event through per every; flush reports events held
// back that no later event reported.
func NewLimiter(every time.Duration, flush func(suppressed int)) *Limiter {
	return &Limiter{every: every, flush: flush}
}

// Allow reports whether this event may be logged, and how many were held
// back since the last one that was.
func (l *Limiter) Allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.held++
		if l.timer == nil {
			l.timer = time.AfterFunc(l.last.Add(l.every).Sub(now), l.fire)
		}
		return false, 0
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	suppressed, l.held, l.last = l.held, 0, now
	return true, suppressed
}

func (l *Limiter) fire() {
	l.mu.Lock()
	n := l.held
	l.held, l.timer = 0, nil
	if n > 0 {
		l.last = time.Now()
	}
	l.mu.Unlock()
	if n > 0 {
		l.flush(n)
	}
}
