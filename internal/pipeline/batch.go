package pipeline

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// A batch is a run of an ordered stream's messages (a Kafka partition)
// that were fetched together. One message at a time, each costs a claim
// round trip, the forward and a commit round trip, in sequence; so a
// partition's throughput is bounded by three round trips per message.
// In a batch (claim.Batch):
//
//   - every key is claimed in one round trip up front, so a duplicate is
//     acked in its turn without another round trip;
//   - claimed messages are forwarded one after the other, in order;
//   - a success's commit and ack are handed to the batch, which commits
//     at once, while the next message is already being forwarded; what
//     succeeds while a commit is on the wire goes in the next one.
//
// The order of effects at the app is the order of the batch, as one by
// one. Anything off the fast path (no key, a busy key, a store error, a
// claim gone stale) waits for the batch's commits and then runs exactly
// as a single message would, so a later message with the key of an
// earlier one finds it done.
func (p *Pipeline) handleBatch(src *source, ds []broker.Delivery) {
	src.m.inflight.Add(float64(len(ds)))
	defer src.m.inflight.Sub(float64(len(ds)))
	ws := make([]work, len(ds))
	g := p.claims.NewBatch()
	defer func() {
		g.Wait()
		for i := range ws {
			ws[i].c.Close()
		}
	}()
	for i, d := range ds {
		ws[i] = work{s: src, d: d}
	}
	claims := p.claimAhead(g, ws)
	for i := range ws {
		if p.batchItem(&ws[i], claims[i], g) {
			continue
		}
		// It panicked and was given back: nothing after it may overtake
		// it, so the rest goes back too, claims released, to be handed
		// over again in order behind it.
		for j := i + 1; j < len(ws); j++ {
			if claims[j] == seenset.Claimed {
				ws[j].letGo()
			}
			ws[j].requeue("an earlier message of its batch was given back")
		}
		return
	}
}

// batchItem runs one message of a batch; false when it panicked (and
// was given back by recoverPanic).
func (p *Pipeline) batchItem(w *work, ahead seenset.ClaimResult, g *claim.Batch) bool {
	defer w.recoverPanic()
	switch ahead {
	case seenset.Duplicate:
		w.ack(metrics.Duplicate)
		return true
	case seenset.Reused:
		if w.keyReused() == settled {
			return true
		}
		// Forwarded under its own key: off the fast path.
	case seenset.Claimed:
		if w.useAhead() {
			w.loop(false) // never hands off: a batch's source is ordered
			return true
		}
	}
	// Off the fast path: an earlier success may hold this key or
	// the slow path may wait long, so settle the earlier ones first.
	g.Wait()
	w.run()
	return true
}

// claimAhead identifies every message and claims, in one round trip,
// the keys of those that can take the fast path (claim.Batch.Take): each
// one's answer, zero for one not claimed ahead. The others take the slow
// path, whose claim retries with backoff (or fails open), as for a
// single message.
func (p *Pipeline) claimAhead(g *claim.Batch, ws []work) []seenset.ClaimResult {
	for i := range ws {
		ws[i].identify()
	}
	select {
	case <-p.draining:
		for i := range ws {
			g.Join(&ws[i].c)
		}
		return make([]seenset.ClaimResult, len(ws)) // the slow path requeues
	default:
	}
	return g.Take(p.hard, len(ws), func(i int) *claim.Session { return &ws[i].c })
}
