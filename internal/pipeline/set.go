package pipeline

import (
	"sync"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// A set is messages that need no order among them: a Kafka partition in
// key order hands over, together, fetched messages whose keys differ.
// Their keys are claimed in one round trip up front, as a batch's, and
// then every message runs at once on its own goroutine: a slow or
// failing one holds only itself (and, at the source, the later messages
// of its key). Successes go to one committer, as in a batch, so their
// commits share round trips too.
func (p *Pipeline) handleSet(src *source, ds []broker.Delivery) {
	ws := make([]work, len(ds))
	g := p.claims.NewBatch()
	for i, d := range ds {
		ws[i] = work{s: src, d: d}
	}
	claims := p.claimAhead(g, ws)
	var wg sync.WaitGroup
	for i := range ws {
		src.m.inflight.Inc()
		wg.Go(func() {
			defer src.m.inflight.Dec()
			p.setItem(&ws[i], claims[i])
		})
	}
	wg.Wait()
	g.Wait()
	// Only now: the batch drops a success's local claim itself, and must
	// not race another drop of it.
	for i := range ws {
		ws[i].c.Close()
	}
}

// setItem runs one message of a set. Unlike a batch's, a message off the
// fast path does not wait for the others' commits: nothing before it in
// the set shares its key (a dedupe key twice in a set, under two record
// keys, is claimed for the first only; the second finds it busy here
// and waits for its outcome).
func (p *Pipeline) setItem(w *work, ahead seenset.ClaimResult) {
	defer w.recoverPanic()
	switch ahead {
	case seenset.Duplicate:
		w.ack(metrics.Duplicate)
		return
	case seenset.Claimed:
		if w.useAhead() {
			w.loop(false)
			return
		}
	}
	w.run()
}
