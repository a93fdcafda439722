package claim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// hold keeps the claim on key renewed until its Stop, and tells lost
// (once, from the renewal's goroutine) if the store says the claim is no
// longer token's: the lease expired and another owner may have taken the
// key. from is when the lease was last set (when the claim or renewal was
// sent, so that the lease is never assumed to run longer than it does).
//
// Renewals are scheduled from the last one that succeeded, a third of a
// lease after it, and a failed one is tried again a thirtieth of a lease
// later, each try bounded by what is left of the lease. So the lease
// survives a store that is unresponsive for up to two thirds of a lease,
// less one retry interval (0.63 × lease), whenever the outage starts; a
// renewal that hangs does not push the next one past the expiry.
//
// Stop waits for a renewal in progress, so none runs after a commit (it
// would find the key done and report a lease lost that was not).
func (p *Protocol) hold(key, token string, from time.Time, lost Lost) *Hold {
	h := &Hold{p: p, key: key, token: token, ok: from, lost: lost}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t = time.AfterFunc(time.Until(from.Add(p.lease/3)), h.tick)
	return h
}

// Lost is told, once, that a renewal found the claim no longer the
// session's. An interface rather than a func: a message's work passes
// itself, where a method value would be an allocation per message.
type Lost interface {
	LeaseLost(err error)
}

// LostFunc is a func as a Lost.
type LostFunc func(err error)

// LeaseLost calls f.
func (f LostFunc) LeaseLost(err error) { f(err) }

// RetryDivisor: a failed renewal is tried again after lease/RetryDivisor.
const RetryDivisor = 30

// Hold is a claim being renewed; Stop ends it.
type Hold struct {
	p          *Protocol
	key, token string
	lost       Lost
	mu         sync.Mutex
	stopped    bool
	ok         time.Time // when the last successful renewal (or the claim) was sent
	t          *time.Timer
}

func (h *Hold) tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	lease := h.p.lease
	sent := time.Now()
	// A try may take what is left of the lease, at most a third of it:
	// past the expiry its answer no longer matters to anyone.
	left := h.ok.Add(lease).Sub(sent)
	wait := min(max(left, lease/RetryDivisor), lease/3)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	err := h.p.store.Renew(ctx, h.key, h.token, lease)
	cancel()
	switch {
	case err == nil:
		h.ok = sent
		h.t.Reset(time.Until(sent.Add(lease / 3)))
	case errors.Is(err, seenset.ErrNotOwner):
		h.stopped = true
		if h.lost != nil {
			h.lost.LeaseLost(err)
		}
	default:
		h.t.Reset(lease / RetryDivisor)
	}
}

// Stop ends the renewals, waiting for one in progress: none runs after
// it returns.
func (h *Hold) Stop() {
	h.mu.Lock()
	h.stopped = true
	h.t.Stop()
	h.mu.Unlock()
}
