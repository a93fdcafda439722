package claim

import (
	"context"
	"errors"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// Session is one message's claim on its key, whatever path it takes
// (claimed alone or ahead by a Batch, retried, kept, given back after a
// panic): its token, what it holds, and the local record other messages
// of the key wait on. It runs every step of the protocol, in order:
//
//	Take ─┬─ claimed ─▶ Hold ─▶ Forwarded ─┬─ commit (Succeeded)
//	      ├─ duplicate / reused            ├─ release (LetGo)
//	      └─ busy (wait, Take again)       └─ keep, until the request can have ended
//
// A Session is a value, kept in its user's per-message state so that
// beginning one costs nothing but its token; it is not safe for
// concurrent use, except that a Batch completes its commit.
type Session struct {
	p *Protocol
	// key is the stored key (ReuseKey once reused).
	key string
	// token carries the body's digest (seenset.WithDigest); it is the
	// claim the session holds, held, kept or last sent.
	token string
	state state
	// ends is when the lease runs out at the earliest: a lease from when
	// the claim or its last renewal was sent, or, kept, the kept claim's
	// end.
	ends  time.Time
	batch *Batch
}

type state uint16

const (
	// fresh: the token was never sent; the next claim uses it.
	fresh state = 1 << iota
	// prior: the token may hold the key already (an answer was lost, or
	// a claim taken ahead went unused): the next claim reuses it, and a
	// claim under the same token is idempotent, so the session does not
	// find its own lease busy.
	prior
	// ahead: claimed by a Batch and good to forward under (UseAhead).
	ahead
	// held: the token holds the key; sent: a request went out under it.
	held
	sent
	// kept: the claim was left to expire at ends (a request may still
	// run); the next claim waits for it and takes it over.
	kept
	// local: the token is recorded in the Protocol's local claims.
	local
	// off: the key goes without the seen-set (on_store_error: forward).
	off
	// reused: the key is ReuseKey's (key_reuse: forward).
	reused
)

// maxStaleRetries bounds the immediate claims after stale "busy" answers;
// each follows a real outcome here, so a few suffice.
const maxStaleRetries = 3

// keyUnusableTries is how often a claim that finds the key's entry
// unusable is tried before the error is returned.
const keyUnusableTries = 3

// ErrStopped is Take's error when its Waiter stopped a retry wait.
var ErrStopped = errors.New("claim: stopped while retrying")

// Begin starts the session of a message whose stored key is key and
// whose body has digest d. Nothing is sent yet.
func (p *Protocol) Begin(key string, d seenset.Digest) Session {
	return Session{p: p, key: key, token: seenset.WithDigest(p.tokens.Next(), d), state: fresh}
}

// Begun reports whether the session was begun (the message has a key).
func (s *Session) Begun() bool { return s.p != nil }

// Active reports whether the key goes through the seen-set: begun, and
// not failed open.
func (s *Session) Active() bool { return s.p != nil && s.state&off == 0 }

// Key is the stored key.
func (s *Session) Key() string { return s.key }

// Digest is the body's digest as the token carries it.
func (s *Session) Digest() string { return seenset.TokenDigest(s.token) }

// Reused reports whether the key is ReuseKey's (key_reuse: forward).
func (s *Session) Reused() bool { return s.state&reused != 0 }

// Reuse moves the session to ReuseKey: the key was done for another body
// and this one is forwarded under its own key.
func (s *Session) Reuse() {
	s.key = s.key + reuseSep + s.Digest()
	s.state |= reused
}

// FailOpen takes the key out of the seen-set for the rest of the session
// (the store is down and on_store_error is forward).
func (s *Session) FailOpen() { s.state |= off }

// NotBefore is when a claim this session kept runs out (zero when it kept
// none): the request under it may run until then, so the next Take must
// not be sooner.
func (s *Session) NotBefore() time.Time {
	if s.state&kept == 0 {
		return time.Time{}
	}
	return s.ends
}

// KeptHere reports whether this process left the key claimed, for this
// session or another, because a request may still run, and until when.
func (s *Session) KeptHere() (time.Time, bool) { return s.p.kept.until(s.key) }

// TakenHere reports whether another session of this process holds the key
// now (this session's lease ran out and it claimed the key).
func (s *Session) TakenHere() bool { return s.p.locals.takenHere(s.key, s.token) }

// Waiter is its user's side of a Take's retries.
type Waiter interface {
	// ClaimFailed is told of each failed try; false stops the retries
	// and Take returns err.
	ClaimFailed(try int, err error) bool
	// Wait sleeps for d unless its user stops; it reports whether all of
	// d passed (false: Take returns ErrStopped).
	Wait(d time.Duration) bool
}

// Take claims the key. A store error is tried again after the Protocol's
// backoff for as long as w agrees (a nil w: once); an unusable entry
// keyUnusableTries times. For a busy key it returns, when this process
// holds or is claiming the key, a channel closed once it lets go (nil:
// the key is held elsewhere); a "busy" that a holder here made stale by
// letting go meanwhile is claimed again at once.
func (s *Session) Take(ctx context.Context, w Waiter) (res seenset.ClaimResult, wait <-chan struct{}, err error) {
	p := s.p
	for stale := 0; ; stale++ {
		s.nextToken()
		since := p.locals.reserve(s.key)
		res, err = s.claim(ctx, w)
		won := err == nil && res == seenset.Claimed
		letGo, wait := p.locals.unreserve(s.key, s.token, won, since)
		if won {
			s.state = s.state&^sent | held | local
		}
		if err != nil || res != seenset.Busy {
			return res, nil, err
		}
		if wait == nil {
			wait = p.locals.waitFor(s.key)
		}
		if wait == nil && letGo && stale < maxStaleRetries {
			continue
		}
		return res, wait, nil
	}
}

// nextToken picks the token of the next claim: the one the session has
// when it was never sent or may hold the key, a new one otherwise.
func (s *Session) nextToken() {
	if s.state&(fresh|prior|kept) != 0 {
		s.state &^= fresh | prior | kept
		return
	}
	s.dropLocal() // its record is of the old token
	if d := s.Digest(); d != "" {
		// The new token carries the same digest: one allocation, as
		// seenset.WithDigest.
		s.token = s.p.tokens.Next() + s.token[len(s.token)-len(d)-1:]
	} else {
		s.token = s.p.tokens.Next()
	}
}

func (s *Session) claim(ctx context.Context, w Waiter) (seenset.ClaimResult, error) {
	p := s.p
	unusable := 0
	for try := 1; ; try++ {
		s.ends = time.Now().Add(p.lease)
		res, err := p.claim(ctx, s.key, s.token)
		if err == nil {
			return res, nil
		}
		if w == nil || !w.ClaimFailed(try, err) {
			return 0, err
		}
		// Not an outage: the entry under this key is unusable, and
		// retrying for ever would pin a worker (and hold a partition).
		// A few tries, in case it was being rewritten, then give up.
		if errors.Is(err, seenset.ErrKeyUnusable) {
			if unusable++; unusable >= keyUnusableTries {
				return 0, err
			}
		}
		if !w.Wait(p.backoff.Delay(try, 0)) {
			return 0, ErrStopped
		}
	}
}

// UseAhead decides whether a claim a Batch took can be forwarded under
// now. A claim older than a third of its lease (taken while earlier
// messages were forwarded) is renewed first, as a hold would. When it
// cannot be used, it is lost (no longer the session's) or, after a
// failed renewal, left for the next Take, which claims under its token.
func (s *Session) UseAhead(ctx context.Context) bool {
	p := s.p
	if time.Until(s.ends) < p.lease*2/3 {
		s.ends = time.Now().Add(p.lease)
		if err := p.renew(ctx, s.key, s.token); err != nil {
			s.state &^= held
			if errors.Is(err, seenset.ErrNotOwner) {
				s.dropLocal()
			} else {
				s.state |= prior
			}
			return false
		}
	}
	s.state |= ahead
	return true
}

// Ahead reports whether the session holds a claim a Batch took that
// UseAhead passed, and takes it: the forward runs under it.
func (s *Session) Ahead() bool {
	if s.state&ahead == 0 {
		return false
	}
	s.state = s.state&^(ahead|sent) | held
	return true
}

// Hold keeps the claim renewed until its Stop and marks it sent: a
// request is going out under it. lost, when not nil, is told (once, from
// the renewal's goroutine) when the store says the claim is no longer
// the session's.
func (s *Session) Hold(lost Lost) *Hold {
	s.state |= sent
	return s.p.hold(s.key, s.token, s.ends.Add(-s.p.lease), lost)
}

// Committed is told what became of a commit: nil, seenset.ErrNotOwner
// (the lease had expired and another owner took the key) or the last
// store error.
type Committed interface {
	Committed(err error)
}

// Forwarded does to the claim what the forward's result asks (Decide)
// and reports what that was: a success is committed (Succeeded, c is told
// the outcome), a failure the app answered is released (the error is
// LetGo's), and a request that may still run is kept (the error is the
// renewal's) until a lease from now or, when a shutdown cut it short
// (cutShort), until it may have run app.max_request_time — no Take or
// claim elsewhere gets the key before then. Pass a context that a
// shutdown does not cancel.
func (s *Session) Forwarded(ctx context.Context, res forward.Result, cutShort bool, c Committed) (Action, error) {
	switch a := Decide(res); a {
	case Commit:
		s.Succeeded(ctx, c)
		return a, nil
	case Keep:
		return a, s.keep(ctx, res, cutShort)
	}
	return Release, s.LetGo(ctx)
}

// Succeeded records the app's success (the commit, with its retries) and
// then tells c. In a Batch the commit shares a round trip with others and
// c is told from the Batch's goroutine.
func (s *Session) Succeeded(ctx context.Context, c Committed) {
	s.state &^= held
	if s.batch != nil {
		s.batch.add(s, c)
		return
	}
	err := s.p.commit(ctx, s.key, s.token)
	s.dropLocal()
	c.Committed(err)
}

// LetGo releases the claim the session holds or may hold, so the key can
// be claimed again at once: the app answered that it failed, or no
// request went out. A failure is harmless (the lease expires by itself).
func (s *Session) LetGo(ctx context.Context) error {
	s.state &^= held | sent | ahead | prior
	err := s.p.release(ctx, s.key, s.token)
	s.dropLocal()
	return err
}

// LetGoPrior releases a claim the session may hold without knowing it
// (taken by a Batch, its answer lost), so the next owner need not wait
// for the lease to run out.
func (s *Session) LetGoPrior(ctx context.Context) error {
	if s.state&prior == 0 {
		return nil
	}
	return s.LetGo(ctx)
}

// keep leaves the claim to expire (see Forwarded).
func (s *Session) keep(ctx context.Context, res forward.Result, cutShort bool) error {
	now := time.Now()
	until := now.Add(s.p.lease)
	if cutShort {
		// The app may go on with it for as long as a request may last.
		if t := now.Add(s.p.maxRequestTime - res.Duration); t.After(until) {
			until = t
		}
	}
	s.state &^= held | sent
	s.dropLocal()
	err := s.p.keep(ctx, s.key, s.token, until)
	// Kept even when that renewal failed: the lease may still run (it
	// was renewed at most lease/3 ago), and waiting too long is the safe
	// side.
	s.state |= kept
	s.ends = until
	s.p.kept.keep(s.key, until)
	return err
}

// GiveBack ends a session whose message is given back without an
// outcome (a panic): a claim whose request may have gone out is left to
// expire, since the app may act on it; one whose request never left, or
// that the session may hold from a Batch, is released.
func (s *Session) GiveBack(ctx context.Context) error {
	switch {
	case s.state&held != 0 && s.state&sent != 0:
		s.state &^= held | sent
		return nil
	case s.state&(held|prior) != 0:
		return s.LetGo(ctx)
	}
	return nil
}

// Close drops the local record of the session's claim, if any, waking
// the sessions of the key that wait for it: its message is settled or
// handed on. It does not touch the store.
func (s *Session) Close() { s.dropLocal() }

func (s *Session) dropLocal() {
	if s.state&local != 0 {
		s.p.locals.drop(s.key, s.token)
		s.state &^= local
	}
}

// StoredDigest is the digest of the body the key is done for, for the
// line that reports a reuse ("unknown" when the store cannot say).
func (s *Session) StoredDigest(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, s.p.opTimeout)
	defer cancel()
	st, err := s.p.store.Status(ctx, s.key)
	if err != nil || st.State != seenset.Done {
		return "unknown"
	}
	return seenset.TokenDigest(st.Token)
}
