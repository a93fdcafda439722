package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// A delivery's trip, in one place:
//
//	identify (size, key)
//	  └─ acquire ─┬─ claimed ──▶ attempt ──▶ settle ─┬─ settled: done
//	              ├─ duplicate ─▶ ack                └─ again: acquire
//	              ├─ busy ──────▶ wait (off the worker where the source requeues), acquire
//	              └─ stop ──────▶ (already requeued or given up)
//
// A message without a usable key, or with the store down and fail-open
// on, is acquired "claimed" without the store (w.withStore false). The
// batch path enters at acquire with a claim taken ahead (w.c.ahead).

// work is one delivery's trip through the pipeline.
type work struct {
	p    *Pipeline
	s    *source
	d    broker.Delivery
	m    *broker.Message
	key  string // message key, "" when none
	full string // "<consumer>:<key space>:<key>" (claim.ReuseKey once reused)
	// digest is the body's (key_reuse_fields), carried by every claim.
	digest seenset.Digest
	// reused: the key was done for another body and the message is
	// forwarded under claim.ReuseKey (key_reuse: forward).
	reused bool
	// identified: identify ran; why says why there is no key.
	identified bool
	why        string
	// withStore: the key goes through the seen-set (false: no key, or
	// fail-open after a store error).
	withStore bool
	// c is the message's claim on its key.
	c claimState
	// attempt counts tries that reached the app; down counts consecutive
	// tries that did not (refused, no socket), which never count.
	attempt, down int
	last          forward.Result
	meta          []forward.Header
	// group, when set (a batch), takes the commit and ack of a success,
	// so that the next message's forward need not wait for them.
	group   *committer
	settled bool
	// staleBusy: a holder in this process let go of the key while the
	// last claim was on its way; staleRetries counts the claims sent
	// again at once for that.
	staleBusy    bool
	staleRetries int
	// busyWait, after a lost claim, is closed when this process no longer
	// holds or claims the key (nil: it neither held nor claimed it).
	busyWait <-chan struct{}
	// busyLooks counts the claims that found the key busy elsewhere; the
	// next look is later each time (busyDelay).
	busyLooks int
	// parked: the delivery waits in the waiting room, off the worker.
	parked bool
	// panicked: a bug hit while handling it; its requeue counts as a
	// delivery (a message that panics every time must reach max_deliveries).
	panicked bool
}

// claimState is one message's claim on its key, as far as the message
// knows it: one claim, whatever path (batch ahead, retry, panic) it took.
type claimState struct {
	// token is the claim the current attempt runs under.
	token string
	// held is the token of the claim this message holds now ("" when
	// none) and sent whether a request went out under it: after a panic
	// only a claim whose request never left may be released.
	held string
	sent bool
	// ahead is a claim taken ahead by the batch (ClaimMany), used by the
	// first acquire if it is still good.
	ahead string
	// prior is a token this message may hold a claim under already (a
	// batch claim whose answer was lost): the first claim reuses it, and
	// a claim under the same token is idempotent, so the message does not
	// find its own lease busy.
	prior string
	// from is when the held claim's lease was last set (the claim or a
	// renewal was sent): its renewals are scheduled from it.
	from time.Time
	// local is the token recorded in the pipeline's localClaims.
	local string
	// notBefore: the last request may still be running at the app (it was
	// cut short or given up), so the key is not claimed again before then
	// — by the lease it was left with, by no replica. kept is that
	// claim's token: the retry claims under it, so that it takes its own
	// claim over rather than racing the lease's expiry.
	notBefore time.Time
	kept      string
}

// maxStaleRetries bounds the immediate re-claims after stale "busy"
// answers; each follows a real outcome here, so a few suffice.
const maxStaleRetries = 3

type acquired int

const (
	claimed   acquired = iota // forward under w.c.token (or without the store)
	duplicate                 // processed already: ack without forwarding
	reused                    // processed already, for another body: key_reuse says
	busy                      // another owner holds the key
	stop                      // settled already (requeued, given up); nothing left to do
)

// next is what settle leaves to the caller.
type next int

const (
	settled next = iota // the delivery is settled (or handed to the committer)
	again               // acquire and forward once more
)

// problem is what identify found wrong with a message.
type problem int

const (
	fine problem = iota
	tooLarge
	noKey
)

// identify checks the size and extracts the key, once.
func (w *work) identify() problem {
	if max := w.p.o.MaxBodyBytes; max > 0 && int64(len(w.m.Body)) > max {
		return tooLarge
	}
	if !w.identified {
		w.identified = true
		w.key, w.why = w.s.Keys.Key(w.m)
		if w.key != "" {
			w.full = w.s.prefix + w.key
			w.withStore = true
			w.digest = w.s.Digest.Digest(w.m.Body)
		}
	}
	if w.key == "" {
		return noKey
	}
	return fine
}

// halted reports whether the pipeline stops or the delivery was lost:
// starting (or going on with) a forward would only delay the shutdown.
func (w *work) halted() bool {
	select {
	case <-w.p.draining:
		return true
	case <-w.d.Lost():
		return true
	default:
		return false
	}
}

// run takes a delivery from the start; it reports true when the delivery
// was handed to the waiting room (see loop).
func (w *work) run() (handedOff bool) {
	p := w.p
	if w.halted() {
		w.releasePrior()
		w.requeue("stopping, or the delivery was lost")
		return
	}
	switch w.identify() {
	case tooLarge:
		w.event(metrics.EventBodyTooLarge)
		w.fail("body too large", slog.Int("bytes", len(w.m.Body)), slog.Int64("max", p.o.MaxBodyBytes))
		w.giveUp(broker.DeadLetterInfo{Reason: "body too large"}, false)
		return
	case noKey:
		w.event(metrics.EventNoKey)
		if ok, n := w.s.noKey.Allow(); ok {
			p.log.Info("no usable key", w.attrs(slog.String("rules", w.s.rules), slog.String("reason", w.why), slog.Int("suppressed", n))...)
		}
		if w.s.DeadLetterMissingKey {
			w.giveUp(broker.DeadLetterInfo{Reason: "no key: " + w.why}, false)
			return
		}
		// Fail-open: work that cannot be identified is never dropped.
	}
	return w.loop()
}

// loop is acquire → attempt → settle until the delivery is settled. It
// reports true when it handed the delivery to the waiting room (a busy
// key on a source that requeues): a goroutine of the waiting room then
// owns it, and the caller must not touch it again.
func (w *work) loop() (handedOff bool) {
	for {
		switch w.acquire() {
		case stop:
			return false
		case duplicate:
			w.ack(metrics.Duplicate)
			return false
		case reused:
			if w.keyReused() == settled {
				return false
			}
			continue
		case busy:
			w.event(metrics.EventBusy)
			ch := w.busyWait
			if ch == nil {
				ch = w.p.locals.waitFor(w.full)
			}
			if ch == nil && w.staleBusy && w.staleRetries < maxStaleRetries {
				// The holder here let go while this claim was on its
				// way: the answer is stale, look again now.
				w.staleRetries++
				continue
			}
			// Never bounced through the broker: a requeue spends what the
			// broker counts (a quorum queue's delivery limit, a stream's
			// delivery count) and comes straight back. The message waits
			// here, unacked, and claims again once the holder's claim can
			// have ended — off the source's worker when it can.
			if w.park(ch) {
				return true
			}
			if !w.waitBusy(ch) {
				w.requeue(w.busyStopReason(ch))
				return false
			}
			continue
		}
		if w.settle(w.forward()) == settled {
			return false
		}
	}
}

// waitBusy waits until the key found busy may be free: ch (this replica
// holds or claims the key) is closed, or, for a key held elsewhere, the
// next look is due. It reports false when the pipeline drains or the
// delivery is lost.
func (w *work) waitBusy(ch <-chan struct{}) bool {
	if ch != nil {
		// This replica is forwarding the key: its outcome is moments
		// away and will be known here (bounded: a claim whose lease ran
		// out unrenewed is claimed again by whoever asks next).
		return w.waitOr(ch, w.p.o.Lease)
	}
	w.busyLooks++
	return w.wait(w.p.busyDelay(w.full, w.busyLooks))
}

// busyStopReason is the requeue reason of a message stopped while its
// key was busy.
func (w *work) busyStopReason(ch <-chan struct{}) string {
	if ch != nil {
		return "stopped while the key was held here"
	}
	return "stopped while waiting: " + w.busyReason()
}

// acquire makes the message ready to forward: the app is up (gate), the
// last request can no longer be running, and the key is claimed.
func (w *work) acquire() acquired {
	p := w.p
	if tok := w.c.ahead; tok != "" {
		w.c.ahead = ""
		w.c.token, w.c.held, w.c.sent = tok, tok, false
		return claimed
	}
	if !w.waitGate() {
		w.requeue("stopped while the app was down")
		return stop
	}
	if !w.withStore {
		w.c.token = ""
		return claimed
	}
	if !w.c.notBefore.IsZero() {
		if !w.wait(time.Until(w.c.notBefore)) {
			w.requeue("stopped while the last request may still run at the app")
			return stop
		}
		w.c.notBefore = time.Time{}
		w.c.prior, w.c.kept = w.c.kept, ""
	}
	for {
		token := w.c.prior
		w.c.prior = ""
		if token == "" {
			token = w.token()
		}
		since := p.locals.reserve(w.full)
		res, err := w.claim(token)
		w.staleBusy, w.busyWait = p.locals.unreserve(w.full, token, err == nil && res == seenset.Claimed, since)
		switch {
		case err == nil:
		case errors.Is(err, seenset.ErrKeyUnusable):
			w.event(metrics.EventStoreKeyError)
			w.fail("seen-set entry of the key is unusable; an operator must remove it (keys forget)", slog.String("err", err.Error()))
			if w.giveUp(broker.DeadLetterInfo{Reason: "seen-set key unusable", LastError: err.Error()}, true) == settled {
				return stop
			}
			// Held (Kafka, no dead letter): try the key again, slowly,
			// until an operator removed what is under it.
			if !w.wait(p.o.BackoffMax) {
				w.requeue("stopped while the key was unusable")
				return stop
			}
			continue
		case errors.Is(err, seenset.ErrUnavailable) && p.o.FailOpenOnStoreError:
			w.event(metrics.EventStoreFailOpen)
			p.log.Warn("seen-set unavailable, forwarding without dedupe (on_store_error: forward)", w.attrs(slog.String("err", err.Error()))...)
			w.withStore, w.c.token = false, ""
			return claimed
		default:
			w.requeue("interrupted while the seen-set was unavailable")
			return stop
		}
		switch res {
		case seenset.Duplicate:
			return duplicate
		case seenset.Reused:
			return reused
		case seenset.Busy:
			return busy
		}
		w.c.token, w.c.held, w.c.sent = token, token, false
		w.c.local = token // recorded by unreserve
		return claimed
	}
}

// useAhead decides whether a claim the batch took ahead can be forwarded
// under now, and leaves it in w.c.ahead when it can. When it cannot, the
// message takes the slow path: the claim is released (the app is down),
// left in w.c.prior (perhaps still ours: reused by the next claim; released
// by run if it stops), or lost (no longer ours).
func (w *work) useAhead(token string, claimedAt time.Time) bool {
	p := w.p
	if w.halted() {
		w.c.prior = token
		return false
	}
	if !w.gateOpen() {
		w.release(token)
		return false
	}
	// Claimed while earlier messages were forwarded: a lease older than
	// a third of its life is renewed first, as a forward would.
	w.c.from = claimedAt
	if time.Since(claimedAt) > p.o.Lease/3 {
		if err := w.renew(token); err != nil {
			if !errors.Is(err, seenset.ErrNotOwner) {
				w.c.prior = token
			}
			return false
		}
	}
	w.c.ahead = token
	return true
}

// settle does what the app's answer asks: commit and ack a success, give
// up on a permanent failure, retry a retryable one.
func (w *work) settle(res forward.Result) next {
	p := w.p
	w.last = res
	switch res.Outcome {
	case forward.Success:
		if w.withStore && w.group != nil {
			w.c.held = ""
			w.group.add(w, w.c.token)
			return settled
		}
		if w.withStore {
			w.commit(w.c.token)
		}
		w.ack(metrics.Forwarded)
		return settled
	case forward.Permanent:
		w.releaseClaim()
		w.fail("app answered permanent failure", slog.Int("attempt", w.attempt))
		return w.giveUp(w.info("permanent: "+res.Reason, w.attempt), true)
	}
	// Retryable.
	if w.withStore {
		if claim.Decide(res) == claim.Keep {
			until := time.Time{}
			if p.hard.Err() != nil {
				// Cut short by the shutdown: the app may go on with it for
				// as long as a request may last.
				until = time.Now().Add(p.o.MaxRequestTime - res.Duration)
			}
			w.keepClaim(w.c.token, until)
		} else {
			w.releaseClaim()
		}
	}
	if p.hard.Err() != nil {
		w.requeue("shutdown timeout reached during the forward")
		return settled
	}
	if res.Unreachable {
		// The app is not there (refused, no socket): the message has not
		// failed, so this try does not count towards max_attempts — it
		// waits unacked until the app is back instead of being
		// dead-lettered by a restart.
		w.attempt--
		w.down++
	} else {
		w.down = 0
	}
	if w.attempt >= p.o.MaxAttempts {
		w.fail("retries exhausted", slog.Int("attempt", w.attempt))
		return w.giveUp(w.info("max attempts: "+res.Reason, w.attempt), true)
	}
	w.event(metrics.EventRetry)
	level := slog.LevelInfo
	if res.Unreachable {
		level = slog.LevelDebug // the app's state line says it once
	}
	p.log.Log(context.Background(), level, "app failed, will retry", w.attrs(slog.Int("attempt", w.attempt), slog.String("reason", res.Reason))...)
	if !w.wait(p.backoff(max(w.attempt, w.down), res.RetryAfter)) {
		w.requeue("stopped while waiting to retry")
		return settled
	}
	return again
}

// releaseClaim releases the current claim, if the forward had one.
func (w *work) releaseClaim() {
	if w.withStore {
		w.release(w.c.token)
	}
}

// giveUp dead-letters the message. When the source has no dead letter,
// or the dead-letter write fails, the message is not lost: RabbitMQ gets
// it requeued after a backoff; Kafka holds the partition. It returns
// again when the caller should try the message once more — Kafka without
// a dead-letter topic, for a failure that may clear (canRetry: the app
// may be fixed, an operator may remove an unusable key).
func (w *work) giveUp(info broker.DeadLetterInfo, canRetry bool) next {
	p := w.p
	err := w.deadLetter(info)
	if err == nil {
		return settled
	}
	noDestination := errors.Is(err, broker.ErrNoDeadLetter)
	if !w.wait(p.backoff(max(w.attempt, 1), 0)) {
		w.requeue("stopped")
		return settled
	}
	if w.s.Requeues {
		w.requeue("not dead-lettered: " + info.Reason)
		return settled
	}
	if noDestination && canRetry {
		return again
	}
	// A dead-letter topic exists but the write failed, or the message can
	// never be forwarded (too large, no key): retry only the dead letter,
	// never the app, while the partition holds.
	for {
		if w.deadLetter(info) == nil {
			return settled
		}
		if !w.wait(p.o.BackoffMax) {
			w.requeue("stopped")
			return settled
		}
	}
}
