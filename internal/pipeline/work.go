package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
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
// The claim's own steps — its token, retries, hold, what a forward's
// result does to it, the commit, and what this process holds — are the
// message's claim.Session (w.c); the trip around them is here. A message
// without a usable key has no session, and one whose store failed with
// fail-open on leaves it (claim.Session.Active false): both are
// "claimed" without the store. The batch path enters at acquire with a
// claim its claim.Batch took ahead.

// work is one delivery's trip through the pipeline.
type work struct {
	s *source
	d broker.Delivery
	// c is the message's claim on its key; begun (identify) once the
	// message has a key.
	c claim.Session
	// attempt counts tries that reached the app; down counts consecutive
	// tries that did not (refused, no socket), which never count.
	attempt, down int
	settled       bool
	// busyLooks counts the claims that found the key busy elsewhere; the
	// next look is later each time (busyDelay).
	busyLooks int
}

type acquired int

const (
	claimed   acquired = iota // forward under the session's claim (or without the store)
	duplicate                 // processed already: ack without forwarding
	reused                    // processed already, for another body: key_reuse says
	busy                      // another owner holds the key
	stop                      // settled already (requeued, given up); nothing left to do
)

// next is what settle leaves to the caller.
type next int

const (
	settled next = iota // the delivery is settled (or handed to the batch's commit)
	again               // acquire and forward once more
)

// problem is what identify found wrong with a message.
type problem int

const (
	fine problem = iota
	tooLarge
	unforwardable
	noKey
)

// identify checks the size and, once, extracts the key and begins the
// claim session; why says why there is no key.
func (w *work) identify() (_ problem, why string) {
	p, m := w.s.p, w.d.Message()
	if max := p.o.MaxBodyBytes; max > 0 && int64(len(m.Body)) > max {
		return tooLarge, ""
	}
	if m.Unforwardable != "" {
		// Never forwarded, so no session: a batch would claim it ahead.
		return unforwardable, m.Unforwardable
	}
	if !w.c.Begun() {
		var key string
		if key, why = w.s.Keys.Key(m); key == "" {
			return noKey, why
		}
		w.c = p.claims.Begin(w.s.prefix+key, w.s.Digest.DigestMessage(m))
	}
	return fine, ""
}

// bounceKey names the message in the source's bounces: its stored key,
// also for a message given up on before its session began (too large,
// unforwardable), else its message id; "" when it has neither.
func (w *work) bounceKey() string {
	if k := w.c.Key(); k != "" {
		return k
	}
	m := w.d.Message()
	if k, _ := w.s.Keys.Key(m); k != "" {
		return w.s.prefix + k
	}
	if m.MessageID != "" {
		// A control character no message key has (keys.usable).
		return w.s.prefix + "\x00id:" + m.MessageID
	}
	return ""
}

// endBounces ends the message's count of bounces: it was acked or
// dead-lettered. Only a source that counts some key looks its key up.
func (w *work) endBounces() {
	if w.s.bounced.counting() {
		w.s.bounced.end(w.bounceKey())
	}
}

// key is the message key, "" when none: the session's stored key
// without the source's prefix (and without claim.ReuseKey's suffix, as a
// message key has no control characters).
func (w *work) key() string {
	k := w.c.Key()
	if k == "" {
		return ""
	}
	k = k[len(w.s.prefix):]
	if i := strings.IndexByte(k, 0x1f); i >= 0 {
		k = k[:i]
	}
	return k
}

// halted reports whether the pipeline stops or the delivery was lost:
// starting (or going on with) a forward would only delay the shutdown.
func (w *work) halted() bool {
	// Two single-channel checks, not one select over both: each is a
	// lock-free look at an open channel, where the select locks both.
	select {
	case <-w.s.p.draining:
		return true
	default:
	}
	select {
	case <-w.d.Lost():
		return true
	default:
		return false
	}
}

// run takes a delivery from the start; it reports true when the delivery
// was handed to the waiting room (see loop).
func (w *work) run() (handedOff bool) {
	p := w.s.p
	if w.halted() {
		w.letGoPrior()
		w.requeue("stopping, or the delivery was lost")
		return
	}
	switch problem, why := w.identify(); problem {
	case tooLarge:
		n := len(w.d.Message().Body)
		w.event(metrics.EventBodyTooLarge)
		w.fail(forward.Result{}, "body too large", slog.Int("bytes", n), slog.Int64("max", p.o.MaxBodyBytes))
		w.giveUp(broker.DeadLetterInfo{Reason: "body too large"}, false)
		return
	case unforwardable:
		w.event(metrics.EventUnforwardable)
		w.fail(forward.Result{}, "cannot be forwarded: "+why)
		w.giveUp(broker.DeadLetterInfo{Reason: "unforwardable: " + why}, false)
		return
	case noKey:
		w.event(metrics.EventNoKey)
		if ok, n := w.s.noKey.Allow(); ok {
			p.log.Info("no usable key", w.attrs(slog.String("rules", w.s.rules), slog.String("reason", why), slog.Int("suppressed", n))...)
		}
		if w.s.DeadLetterMissingKey {
			w.giveUp(broker.DeadLetterInfo{Reason: "no key: " + why}, false)
			return
		}
		// Fail-open: work that cannot be identified is never dropped.
	}
	return w.loop(false)
}

// loop is acquire → attempt → settle until the delivery is settled. It
// reports true when it handed the delivery to the waiting room (a busy
// key on a source that requeues): a goroutine of the waiting room then
// owns it, and the caller must not touch it again. parked: it runs on
// that goroutine already.
func (w *work) loop(parked bool) (handedOff bool) {
	for {
		got, ch := w.acquire()
		switch got {
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
			// Never bounced through the broker: a requeue spends what the
			// broker counts (a quorum queue's delivery limit, a stream's
			// delivery count) and comes straight back. The message waits
			// here, unacked, and claims again once the holder's claim can
			// have ended — off the source's worker when it can.
			if !parked && w.park(ch) {
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
		return w.waitOr(ch, w.s.p.o.Lease)
	}
	w.busyLooks++
	return w.Wait(w.busyDelay(w.busyLooks))
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
// last request can no longer be running, and the key is claimed. For a
// busy key it returns what to wait on (see claim.Session.Take).
func (w *work) acquire() (acquired, <-chan struct{}) {
	p := w.s.p
	if w.c.Ahead() {
		return claimed, nil
	}
	if !w.waitGate() {
		w.requeue("stopped while the app was down")
		return stop, nil
	}
	if !w.c.Active() {
		return claimed, nil
	}
	if t := w.c.NotBefore(); !t.IsZero() && !w.Wait(time.Until(t)) {
		w.requeue("stopped while the last request may still run at the app")
		return stop, nil
	}
	for {
		res, ch, err := w.c.Take(p.hard, w)
		switch {
		case err == nil:
		case errors.Is(err, seenset.ErrKeyUnusable):
			w.event(metrics.EventStoreKeyError)
			w.fail(forward.Result{}, "seen-set entry of the key is unusable; an operator must remove it (keys forget)", slog.String("err", err.Error()))
			if w.giveUp(broker.DeadLetterInfo{Reason: "seen-set key unusable", LastError: err.Error()}, true) == settled {
				return stop, nil
			}
			// Held (Kafka, no dead letter): try the key again, slowly,
			// until an operator removed what is under it.
			if !w.Wait(p.o.BackoffMax) {
				w.requeue("stopped while the key was unusable")
				return stop, nil
			}
			continue
		case errors.Is(err, seenset.ErrUnavailable) && p.o.FailOpenOnStoreError:
			w.event(metrics.EventStoreFailOpen)
			p.log.Warn("seen-set unavailable, forwarding without dedupe (on_store_error: forward)", w.attrs(slog.String("err", err.Error()))...)
			w.c.FailOpen()
			return claimed, nil
		default:
			w.requeue("interrupted while the seen-set was unavailable")
			return stop, nil
		}
		switch res {
		case seenset.Duplicate:
			return duplicate, nil
		case seenset.Reused:
			return reused, nil
		case seenset.Busy:
			return busy, ch
		}
		return claimed, nil
	}
}

// ClaimFailed implements claim.Waiter: a store error is counted and
// logged, and retried (fail-closed) unless the store is down and
// on_store_error is forward.
func (w *work) ClaimFailed(try int, err error) bool {
	p := w.s.p
	w.event(metrics.EventStoreError)
	p.log.Log(context.Background(), claim.LogLevel(err), "seen-set claim failed; not forwarding", w.attrs(slog.String("err", err.Error()), slog.Int("attempt", try))...)
	return !p.o.FailOpenOnStoreError || !errors.Is(err, seenset.ErrUnavailable)
}

// useAhead decides whether the claim its batch took ahead can be
// forwarded under now (claim.Session.UseAhead); when the pipeline stops,
// the delivery was lost or the app is down it is released, and the
// message takes the slow path.
func (w *work) useAhead() bool {
	if w.halted() || !w.gateOpen() {
		w.letGo()
		return false
	}
	return w.c.UseAhead(w.s.p.calm)
}

// settle does what the app's answer asks: the claim first (committed,
// released or kept: claim.Session.Forwarded), then the message: ack a
// success (once committed), give up on a permanent failure, retry a
// retryable one.
func (w *work) settle(res forward.Result) next {
	p := w.s.p
	if w.c.Active() {
		switch act, err := w.c.Forwarded(p.calm, res, p.hard.Err() != nil, w); {
		case act == claim.Commit:
			return settled // acked by Committed
		case act == claim.Keep:
			p.log.Info("no answer from the app; the key stays claimed, so it is not sent again while the request may still run",
				w.attrs(slog.String("reason", res.Reason), slog.Time("until", w.c.NotBefore()))...)
		case err != nil:
			w.releaseFailed(err)
		}
	}
	switch res.Outcome {
	case forward.Success:
		w.ack(metrics.Forwarded)
		return settled
	case forward.Permanent:
		w.fail(res, "app answered permanent failure", slog.Int("attempt", w.attempt))
		return w.giveUp(w.info(res, "permanent: "+res.Reason, w.attempt), true)
	}
	// Retryable.
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
		w.fail(res, "retries exhausted", slog.Int("attempt", w.attempt))
		return w.giveUp(w.info(res, "max attempts: "+res.Reason, w.attempt), true)
	}
	w.event(metrics.EventRetry)
	level := slog.LevelInfo
	if res.Unreachable {
		level = slog.LevelDebug // the app's state line says it once
	}
	p.log.Log(context.Background(), level, "app failed, will retry", w.attrs(slog.Int("attempt", w.attempt), slog.String("reason", res.Reason))...)
	if !w.Wait(p.backoff(max(w.attempt, w.down), res.RetryAfter)) {
		w.requeue("stopped while waiting to retry")
		return settled
	}
	return again
}

// Committed implements claim.Committed: the success's commit is done (or
// failed), and the message is acked — only now, so that a crash before
// the commit redelivers it.
func (w *work) Committed(err error) {
	switch {
	case err == nil:
	case errors.Is(err, seenset.ErrNotOwner):
		w.leaseLost("commit refused: the lease expired")
	default:
		w.event(metrics.EventCommitFailed)
		w.s.p.log.Error("commit failed after the app succeeded; acking anyway, the Idempotency-Key is the app's defence against a redelivery", w.attrs(slog.String("err", err.Error()))...)
	}
	w.ack(metrics.Forwarded)
}

// giveUp dead-letters the message. When the source has no dead letter,
// or the dead-letter write fails, the message is not lost: RabbitMQ gets
// it requeued after a backoff; Kafka holds the partition. It returns
// again when the caller should try the message once more — Kafka without
// a dead-letter topic, for a failure that may clear (canRetry: the app
// may be fixed, an operator may remove an unusable key).
func (w *work) giveUp(info broker.DeadLetterInfo, canRetry bool) next {
	p := w.s.p
	err := w.deadLetter(info)
	if err == nil {
		return settled
	}
	noDestination := errors.Is(err, broker.ErrNoDeadLetter)
	n := max(w.attempt, 1)
	if w.s.Requeues {
		// Given back below, and handed straight back by the broker:
		// the wait grows with the times it came back (bounces).
		n = max(n, w.s.bounced.add(w.bounceKey(), time.Now()))
	}
	if !w.Wait(p.backoff(n, 0)) {
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
		if !w.Wait(p.o.BackoffMax) {
			w.requeue("stopped")
			return settled
		}
	}
}
