package pipeline

import (
	"context"
	"log/slog"
	"slices"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// token is a new claim token carrying the message's body digest.
func (w *work) token() string {
	return seenset.WithDigest(w.p.newToken(), w.digest)
}

// keyReused handles a message whose key is done for another body, by
// the source's key_reuse. It returns again when the message is to be
// forwarded under its own key (claim.ReuseKey).
func (w *work) keyReused() next {
	p := w.p
	w.s.m.keyReuse.Inc()
	attrs := w.attrs(slog.String("digest", w.digest.String()), slog.String("stored_digest", w.storedDigest()))
	switch w.s.KeyReuse {
	case claim.KeyReuseDeadLetter:
		p.log.Warn("key reused with a different body: dead-lettered (key_reuse: dead_letter)", attrs...)
		return w.giveUp(broker.DeadLetterInfo{Reason: claim.ReasonKeyReused}, false)
	case claim.KeyReuseForward:
		p.log.Warn("key reused with a different body: forwarded with "+claim.ReusedHeader+": true (key_reuse: forward)", attrs...)
		w.reused = true
		w.full = claim.ReuseKey(w.full, w.digest)
		return again
	}
	p.log.Warn("key reused with a different body: acked as a duplicate (key_reuse: warn)", attrs...)
	w.ack(metrics.Duplicate)
	return settled
}

// storedDigest reads the done mark's digest for the log line; a reuse is
// rare, so the extra round trip is too.
func (w *work) storedDigest() string {
	ctx, cancel := context.WithTimeout(w.p.calm, w.p.o.Lease/3)
	defer cancel()
	st, err := w.p.claims.Store().Status(ctx, w.full)
	if err != nil || st.State != seenset.Done {
		return "unknown"
	}
	return seenset.TokenDigest(st.Token)
}

// reuseMeta adds the reuse mark to the request's metadata headers, which
// may be shared with other messages of the queue: appended to a copy.
func (w *work) reuseMeta(h []forward.Header) []forward.Header {
	if !w.reused {
		return h
	}
	return append(slices.Clip(h), forward.Header{Name: claim.ReusedHeader, Value: "true"})
}
