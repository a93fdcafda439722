package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// A batch is a run of an ordered stream's messages (a Kafka partition)
// that were fetched together. One message at a time, each costs a claim
// round trip, the forward and a commit round trip, in sequence; so a
// partition's throughput is bounded by three round trips per message.
// In a batch:
//
//   - every key is claimed in one round trip up front (ClaimMany), so a
//     duplicate is acked in its turn without another round trip;
//   - claimed messages are forwarded one after the other, in order;
//   - a success's commit and ack are handed to a committer, which commits
//     at once, while the next message is already being forwarded; what
//     succeeds while a commit is on the wire goes in the next one.
//
// The order of effects at the app is the order of the batch, as one by
// one. Anything off the fast path (no key, a busy key, a store error, a
// claim gone stale) waits for the committer and then runs exactly as a
// single message would, so a later message with the key of an earlier
// one finds it done.
func (p *Pipeline) handleBatch(src *source, ds []broker.Delivery) {
	src.m.inflight.Add(float64(len(ds)))
	defer src.m.inflight.Sub(float64(len(ds)))
	ws := make([]work, len(ds))
	g := newCommitter(p)
	defer func() {
		g.wait()
		for i := range ws {
			ws[i].dropLocal()
		}
	}()
	for i, d := range ds {
		ws[i] = work{p: p, s: src, d: d, m: d.Message(), group: g}
	}
	claims, claimedAt := p.claimAhead(ws)
	for i := range ws {
		if p.batchItem(&ws[i], claims[i], claimedAt, g) {
			continue
		}
		// It panicked and was given back: nothing after it may overtake
		// it, so the rest goes back too, claims released, to be handed
		// over again in order behind it.
		for j := i + 1; j < len(ws); j++ {
			if c := claims[j]; c.token != "" && c.result == seenset.Claimed {
				ws[j].release(c.token)
			}
			ws[j].requeue("an earlier message of its batch was given back")
		}
		return
	}
}

// batchItem runs one message of a batch; false when it panicked (and
// was given back by recoverPanic).
func (p *Pipeline) batchItem(w *work, c aheadClaim, claimedAt time.Time, g *committer) bool {
	defer w.recoverPanic()
	if c.token != "" {
		switch c.result {
		case seenset.Duplicate:
			w.ack(metrics.Duplicate)
			return true
		case seenset.Reused:
			if w.keyReused() == settled {
				return true
			}
			// Forwarded under its own key: off the fast path.
		case seenset.Claimed:
			w.c.held = c.token
			ok := w.useAhead(c.token, claimedAt)
			w.c.held = ""
			if ok {
				w.loop() // never hands off: a batch's source is ordered
				return true
			}
		}
	}
	// Off the fast path: an earlier success may hold this key or
	// the slow path may wait long, so settle the earlier ones first.
	g.wait()
	w.run()
	return true
}

type aheadClaim struct {
	token  string // "" when not claimed ahead
	result seenset.ClaimResult
}

// claimAhead claims the keys of every message that can take the fast
// path in one round trip. On any error it releases what it claimed and
// claims nothing: those messages take the slow path, whose claim retries
// with backoff (or fails open), as for a single message; one whose answer
// was lost retries under the token it may hold.
func (p *Pipeline) claimAhead(ws []work) ([]aheadClaim, time.Time) {
	claims := make([]aheadClaim, len(ws))
	select {
	case <-p.draining:
		return claims, time.Time{} // the slow path requeues
	default:
	}
	items := make([]seenset.KeyToken, 0, len(ws))
	at := make([]int, 0, len(ws))
	// A key twice in one batch is claimed once, for its first message:
	// were both claimed, the first could find the key busy under the
	// second's claim (another replica let go between the two) and wait
	// for a lease that only it can end. The later one takes the slow
	// path after the earlier ones settled, and finds the key done.
	var inBatch map[string]struct{}
	for i := range ws {
		w := &ws[i]
		if w.identify() != fine {
			continue
		}
		if inBatch == nil {
			inBatch = make(map[string]struct{}, len(ws))
		}
		if _, twice := inBatch[w.full]; twice {
			continue
		}
		inBatch[w.full] = struct{}{}
		claims[i].token = w.token()
		items = append(items, seenset.KeyToken{Key: w.full, Token: claims[i].token})
		at = append(at, i)
	}
	if len(items) == 0 {
		return claims, time.Time{}
	}
	// The leases start no earlier than this.
	claimedAt := time.Now()
	ctx, cancel := context.WithTimeout(p.hard, claim.DefaultOpTimeout)
	replies := seenset.ClaimMany(ctx, p.claims.Store(), items, p.o.Lease)
	cancel()
	var err error
	for _, r := range replies {
		if r.Err != nil {
			err = r.Err
			break
		}
	}
	if err == nil {
		for j, i := range at {
			claims[i].result = replies[j].Result
			if replies[j].Result == seenset.Claimed {
				ws[i].holdLocal(claims[i].token)
			}
		}
		return claims, claimedAt
	}
	for j, i := range at {
		switch r := replies[j]; {
		case r.Err != nil:
			// It may have been claimed: the slow path claims under
			// the same token.
			ws[i].c.prior = claims[i].token
		case r.Result == seenset.Claimed:
			ws[i].release(claims[i].token)
		}
		claims[i] = aheadClaim{}
	}
	return claims, claimedAt
}

// committer commits and acks the successes of a batch in the background
// while the partition's next forwards run: while one CommitMany is on the
// wire, successes queue up and go together in the next. It never waits
// to fill a round trip: a success waiting for its commit is the one crash
// window (the app acted, the key is not done), so delaying commits to
// share round trips would widen it by as many messages as they share. A
// message is acked only after its commit, as on its own.
type committer struct {
	p       *Pipeline
	mu      sync.Mutex
	idle    sync.Cond // broadcast when the flush loop ends
	pending []pendingCommit
	running bool
}

type pendingCommit struct {
	w     *work
	token string
}

func newCommitter(p *Pipeline) *committer {
	c := &committer{p: p}
	c.idle.L = &c.mu
	return c
}

func (c *committer) add(w *work, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, pendingCommit{w, token})
	if !c.running {
		c.running = true
		go c.loop()
	}
}

func (c *committer) loop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 {
		todo := c.pending
		c.pending = nil
		c.mu.Unlock()
		c.commit(todo)
		c.mu.Lock()
	}
	c.running = false
	c.idle.Broadcast()
}

// wait returns once every success added so far is committed and acked.
func (c *committer) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.running {
		c.idle.Wait()
	}
}

func (c *committer) commit(todo []pendingCommit) {
	p := c.p
	items := make([]seenset.KeyToken, len(todo))
	for i, t := range todo {
		items[i] = seenset.KeyToken{Key: t.w.full, Token: t.token}
	}
	// As commit: even during shutdown, the app already acted.
	ctx, cancel := context.WithTimeout(p.calm, claim.DefaultOpTimeout)
	errs := seenset.CommitMany(ctx, p.claims.Store(), items, p.o.TTL)
	cancel()
	for i, t := range todo {
		switch err := errs[i]; {
		case err == nil:
		case errors.Is(err, seenset.ErrNotOwner):
			t.w.leaseLost("commit refused: the lease expired")
		default:
			p.log.Log(context.Background(), storeErrLevel(err), "batched commit failed; retrying it alone", t.w.attrs(slog.String("err", err.Error()))...)
			t.w.commit(t.token)
		}
		t.w.dropLocal()
		t.w.ack(metrics.Forwarded)
	}
}
