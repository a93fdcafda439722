// Package claim is the one claim protocol of dedupe-proxy. A key moves
//
//	claim (lease) → hold (renewed while the app works) → commit | release | keep
//
// and every user of the seen-set — the pipeline (broker sources, one
// message at a time or a batch) and the webhook handler — takes every
// step through a Session begun from one Protocol, so that they keep the
// same promise by construction: a key is never sent to the app twice
// while a request for it is open, and it is done only once the app
// succeeded. The Session owns the claim's token, the claim's retries, the
// hold, the decision after the forward and what this process knows of
// the keys it holds; its user owns everything else (ordering, dead
// letters, the broker's settle, an HTTP answer).
//
// What to do with a claim after a forward is decided here too (Decide):
// a success commits, a failure the app answered releases, and a request
// that may still be running at the app keeps the claim, so that no
// replica sends the key again meanwhile.
package claim

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
)

// DefaultOpTimeout bounds each claim, commit and release round trip (up
// to a fifth more: calls starting close together share one deadline,
// see deadlines).
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
	// CommitAttempts bounds the tries of a commit (at least 1). Backoff
	// spaces a commit's tries and a claim's retries (zero:
	// DefaultCommitBackoff).
	CommitAttempts int
	Backoff        backoff.Policy
	// OpTimeout bounds each round trip; zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// MaxRequestTime is app.max_request_time: a request cut short by a
	// shutdown may run on at the app for that long from its start, and
	// its claim is kept until then. Zero: forward.DefaultMaxRequestTime.
	MaxRequestTime time.Duration
}

// Protocol takes keys through their claims: every user of the seen-set
// begins a Session per key from one Protocol, so that the settings, the
// tokens and what this process holds are the same for all of them. It is
// safe for concurrent use.
type Protocol struct {
	store          seenset.Store
	lease, ttl     time.Duration
	commitAttempts int
	backoff        backoff.Policy
	opTimeout      time.Duration
	// ops bounds each claim, commit and release by opTimeout.
	ops            *deadlines
	maxRequestTime time.Duration
	tokens         *seenset.Tokens
	// locals are the keys this process holds or is claiming, kept the
	// claims it left to expire; both are shared by every Session of the
	// Protocol (and of its Observe views).
	locals *localClaims
	kept   *keptClaims
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
	if o.MaxRequestTime <= 0 {
		o.MaxRequestTime = forward.DefaultMaxRequestTime
	}
	return &Protocol{
		store:          seenset.Observe(o.Store, o.Observers...),
		lease:          o.Lease,
		ttl:            o.TTL,
		commitAttempts: o.CommitAttempts,
		backoff:        o.Backoff,
		opTimeout:      o.OpTimeout,
		ops:            newDeadlines(o.OpTimeout),
		maxRequestTime: o.MaxRequestTime,
		tokens:         seenset.NewTokens(),
		locals:         newLocalClaims(),
		kept:           &keptClaims{},
	}
}

// Observe returns the Protocol with obs told of every store call made
// through it as well: a user's own view (its state log says in its own
// words what an outage means for it). The view shares everything else —
// settings, tokens, what this process holds — with p.
func (p *Protocol) Observe(obs ...seenset.Observer) *Protocol {
	q := *p
	q.store = seenset.Observe(p.store, obs...)
	return &q
}

// Lease is the lease every claim is taken with.
func (p *Protocol) Lease() time.Duration { return p.lease }

// claim tries once to take key under token. A claim under a token that
// already holds the key is Claimed again (the lease is reset), so a claim
// whose answer was lost is retried under the same token.
func (p *Protocol) claim(ctx context.Context, key, token string) (seenset.ClaimResult, error) {
	ctx, cancel := p.ops.bound(ctx)
	defer cancel()
	return p.store.Claim(ctx, key, token, p.lease)
}

// renew extends the lease once; the round trip is bounded by what is
// left of the lease, at most a third of it.
func (p *Protocol) renew(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, p.lease/3)
	defer cancel()
	return p.store.Renew(ctx, key, token, p.lease)
}

// commit records the app's success, trying up to commitAttempts times. It
// returns nil, seenset.ErrNotOwner (the lease had expired and another
// owner took the key; not retried) or the last store error. Pass a
// context that a shutdown does not cancel: the app already acted, and a
// lost commit is the one window in which a redelivery is sent again.
func (p *Protocol) commit(ctx context.Context, key, token string) error {
	var err error
	for try := 1; try <= p.commitAttempts; try++ {
		cctx, cancel := p.ops.bound(ctx)
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

// release gives the claim up so the key can be claimed again at once: the
// app answered that it failed, or no request went out.
func (p *Protocol) release(ctx context.Context, key, token string) error {
	ctx, cancel := p.ops.bound(ctx)
	defer cancel()
	return p.store.Release(ctx, key, token)
}

// keep leaves the claim to expire no earlier than until, and at least one
// lease from now: a request under it may still be running at the app, and
// until then no replica, this one included, may send the key again.
func (p *Protocol) keep(ctx context.Context, key, token string, until time.Time) error {
	lease := max(time.Until(until), p.lease)
	ctx, cancel := p.ops.bound(ctx)
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

// LogLevel is the level of a message's own line about a failed store
// call: a store that is down is reported once by the user's state log
// (StoreState), so each message's line about it is debug.
func LogLevel(err error) slog.Level {
	if errors.Is(err, seenset.ErrUnavailable) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
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
