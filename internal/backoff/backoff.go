// Package backoff is the one retry delay of the proxy: every loop that
// waits before trying again (a reconnect, a reopened channel, a failed
// store call, a retried forward) takes its delay from a Policy, so a
// change to how the proxy backs off is made once.
//
// The delay before attempt n is Initial·2^(n-1), capped at Max, scaled by
// a random factor in [1-Jitter, 1+Jitter] so replicas that failed together
// do not retry together, and never below a floor the caller passes (a
// Retry-After), which is itself capped at Max so a hostile or mistaken
// header cannot park a worker.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// MinDelay is the shortest delay a Policy gives: a retry loop with no
// wait at all would spin.
const MinDelay = time.Millisecond

// Policy says how long to wait before each attempt. The zero value waits
// MinDelay; a Max below Initial is taken as Initial.
type Policy struct {
	// Initial is the delay before the first retry (attempt 1).
	Initial time.Duration
	// Max caps the exponential delay and any floor.
	Max time.Duration
	// Jitter, from 0 to 1, spreads each delay over ±Jitter of itself; 0
	// gives the exact exponential sequence.
	Jitter float64
}

// Delay is the wait before attempt (1 for the first retry; lower counts
// as 1), at least floor when floor is positive, floor capped at Max.
func (p Policy) Delay(attempt int, floor time.Duration) time.Duration {
	ceil := max(p.Max, p.Initial)
	d := p.Initial
	for i := 1; i < attempt && d < ceil; i++ {
		if d > ceil/2 {
			d = ceil
			break
		}
		d *= 2
	}
	d = min(d, ceil)
	if p.Jitter > 0 {
		j := min(p.Jitter, 1)
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	if floor > d {
		d = min(floor, ceil)
	}
	return max(d, MinDelay)
}

// Backoff is one retry loop's place in its Policy: Next after each
// failure, Reset after a success. It is not safe for concurrent use; each
// loop has its own.
type Backoff struct {
	Policy
	attempt int
}

// New returns a Backoff at the start of p.
func New(p Policy) *Backoff { return &Backoff{Policy: p} }

// Next counts a failure and returns the delay before the next attempt.
func (b *Backoff) Next() time.Duration {
	b.attempt++
	return b.Delay(b.attempt, 0)
}

// Reset starts over from Initial.
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempts is the number of failures since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Wait waits d and reports true, or returns false as soon as ctx ends or
// stop is closed (a nil stop never is). Its timer is stopped on return,
// unlike a time.After left behind in a select.
func Wait(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	done := ctx.Done()
	select {
	case <-done:
		return false
	case <-stop:
		return false
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-stop:
		return false
	}
}
