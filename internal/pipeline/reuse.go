package pipeline

import (
	"log/slog"
	"slices"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
)

// keyReused handles a message whose key is done for another body, by
// the source's key_reuse. It returns again when the message is to be
// forwarded under its own key (claim.ReuseKey).
func (w *work) keyReused() next {
	p := w.s.p
	w.s.m.keyReuse.Inc()
	attrs := w.attrs(slog.String("digest", w.c.Digest()), slog.String("stored_digest", w.c.StoredDigest(p.calm)))
	switch w.s.KeyReuse {
	case claim.KeyReuseDeadLetter:
		p.log.Warn("key reused with a different body: dead-lettered (key_reuse: dead_letter)", attrs...)
		return w.giveUp(broker.DeadLetterInfo{Reason: claim.ReasonKeyReused}, false)
	case claim.KeyReuseForward:
		p.log.Warn("key reused with a different body: forwarded with "+claim.ReusedHeader+": true (key_reuse: forward)", attrs...)
		w.c.Reuse()
		return again
	}
	p.log.Warn("key reused with a different body: acked as a duplicate (key_reuse: warn)", attrs...)
	w.ack(metrics.Duplicate)
	return settled
}

// reuseMeta adds the reuse mark to the request's metadata headers, which
// may be shared with other messages of the queue: appended to a copy.
func (w *work) reuseMeta(h []forward.Header) []forward.Header {
	if !w.c.Reused() {
		return h
	}
	return append(slices.Clip(h), forward.Header{Name: claim.ReusedHeader, Value: "true"})
}
