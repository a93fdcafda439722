// Package claim is the one claim protocol of dedupe-proxy. A key moves
//
//	claim (lease) → hold (renewed while the app works) → commit | release | keep
//
// and both users of the seen-set, the pipeline (broker sources) and the
// webhook handler, take every step through a Protocol, so that they keep
// the same promise by construction: a key is never sent to the app twice
// while a request for it is open, and it is done only once the app
// succeeded.
//
// What to do with a claim after a forward is decided here too (Decide):
// a success commits, a failure the app answered releases, and a request
// that may still be running at the app keeps the claim, so that no
// replica sends the key again meanwhile.
package claim

import (
	"context"
	"errors"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
)

// DefaultOpTimeout bounds each claim, commit and release round trip.
const DefaultOpTimeout = 5 * time.Second

// DefaultCommitBackoff spaces a commit's tries when no policy is given:
// short, since the app already acted and the window is open meanwhile.
var DefaultCommitBackoff = backoff.Policy{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: 0.2}

// Options configure a Protocol.
type Options struct {
	// Store is the seen-set; New wraps it with Observers.
	Store     seenset.Store
	Observers []seenset.Observer
	// Lease is how long a claim holds without a renewal; TTL how long a
	// done key is remembered.
	Lease, TTL time.Duration
	// CommitAttempts bounds the tries of a commit (at least 1), spaced by
	// Backoff (zero: DefaultCommitBackoff).
	CommitAttempts int
	Backoff        backoff.Policy
	// OpTimeout bounds each round trip; zero means DefaultOpTimeout.
	OpTimeout time.Duration
}

// Protocol takes a key through its claim. It is safe for concurrent use.
type Protocol struct {
	store          seenset.Store
	lease, ttl     time.Duration
	commitAttempts int
	backoff        backoff.Policy
	opTimeout      time.Duration
	tokens         *seenset.Tokens
}

// New returns a Protocol.
func New(o Options) *Protocol {
	if o.CommitAttempts < 1 {
		o.CommitAttempts = 1
	}
	if o.Backoff == (backoff.Policy{}) {
		o.Backoff = DefaultCommitBackoff
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	return &Protocol{
		store:          seenset.Observe(o.Store, o.Observers...),
		lease:          o.Lease,
		ttl:            o.TTL,
		commitAttempts: o.CommitAttempts,
		backoff:        o.Backoff,
		opTimeout:      o.OpTimeout,
		tokens:         seenset.NewTokens(),
	}
}

// Store is the observed store, for the batch calls (ClaimMany, CommitMany).
func (p *Protocol) Store() seenset.Store { return p.store }

// Lease is the lease every claim is taken with.
func (p *Protocol) Lease() time.Duration { return p.lease }

// TTL is how long a done key is remembered.
func (p *Protocol) TTL() time.Duration { return p.ttl }

// NewToken returns a claim token no other claim of any process uses.
func (p *Protocol) NewToken() string { return p.tokens.Next() }

// Claim tries once to take key under token. A claim under a token that
// already holds the key is Claimed again (the lease is reset), so a claim
// whose answer was lost is retried under the same token.
func (p *Protocol) Claim(ctx context.Context, key, token string) (seenset.ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opTimeout)
	defer cancel()
	return p.store.Claim(ctx, key, token, p.lease)
}

// Renew extends the lease once; the round trip is bounded by what is
// left of the lease, at most a third of it.
func (p *Protocol) Renew(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, p.lease/3)
	defer cancel()
	return p.store.Renew(ctx, key, token, p.lease)
}

// Commit records the app's success, trying up to CommitAttempts times. It
// returns nil, seenset.ErrNotOwner (the lease had expired and another
// owner took the key; not retried) or the last store error. Pass a
// context that a shutdown does not cancel: the app already acted, and a
// lost commit is the one window in which a redelivery is sent again.
func (p *Protocol) Commit(ctx context.Context, key, token string) error {
	var err error
	for try := 1; try <= p.commitAttempts; try++ {
		cctx, cancel := context.WithTimeout(ctx, p.opTimeout)
		err = p.store.Commit(cctx, key, token, p.ttl)
		cancel()
		if err == nil || errors.Is(err, seenset.ErrNotOwner) {
			return err
		}
		if try < p.commitAttempts && !backoff.Wait(ctx, nil, p.backoff.Delay(try, 0)) {
			return err
		}
	}
	return err
}

// Release gives the claim up so the key can be claimed again at once: the
// app answered that it failed, or no request went out.
func (p *Protocol) Release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opTimeout)
	defer cancel()
	return p.store.Release(ctx, key, token)
}

// Keep leaves the claim to expire no earlier than until, and at least one
// lease from now: a request under it may still be running at the app, and
// until then no replica, this one included, may send the key again.
func (p *Protocol) Keep(ctx context.Context, key, token string, until time.Time) error {
	lease := max(time.Until(until), p.lease)
	ctx, cancel := context.WithTimeout(ctx, p.opTimeout)
	defer cancel()
	return p.store.Renew(ctx, key, token, lease)
}

// Action is what becomes of a claim after a forward.
type Action int

const (
	// Commit: the app succeeded.
	Commit Action = iota + 1
	// Release: the app answered that it failed (or never got the
	// request), so the key may be sent again at once.
	Release
	// Keep: the request may still be running at the app (no answer came
	// back), so the claim is left to expire instead of being released.
	Keep
)

// Decide is the one rule, for every source, of what a forward's result
// does to its claim.
func Decide(res forward.Result) Action {
	switch {
	case res.Outcome == forward.Success:
		return Commit
	case res.MayBeRunning:
		return Keep
	}
	return Release
}

// StoreState is the observer that feeds a statelog.Tracker: a store
// that is unavailable is down, and any answer, even "not the owner",
// means it is up. Each user gives its own tracker, which says in its own
// words what an outage means for its messages.
type StoreState struct{ Tracker *statelog.Tracker }

// StoreCall implements seenset.Observer.
func (s StoreState) StoreCall(_ string, _ time.Duration, err error) {
	if errors.Is(err, seenset.ErrUnavailable) {
		s.Tracker.Down(err)
	} else {
		s.Tracker.Up()
	}
}
