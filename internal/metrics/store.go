package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// StoreObserver feeds dedupe_proxy_seenset_duration_seconds and
// dedupe_proxy_seenset_errors_total from an observed store
// (seenset.Observe). Its series are resolved once: WithLabelValues hashes
// its labels on every call, and the claim path makes several per message.
type StoreObserver struct {
	ops map[string]storeSeries
}

type storeSeries struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// Store returns the observer of store calls for these metrics.
func (m *Metrics) Store() *StoreObserver {
	o := &StoreObserver{ops: make(map[string]storeSeries, len(storeOps))}
	for _, op := range storeOps {
		o.ops[op] = storeSeries{m.StoreDuration.WithLabelValues(op), m.StoreErrors.WithLabelValues(op)}
	}
	return o
}

// StoreCall implements seenset.Observer. A lost lease (ErrNotOwner) is an
// answer, not an error (seenset.Failed).
func (o *StoreObserver) StoreCall(op string, took time.Duration, err error) {
	s, ok := o.ops[op]
	if !ok {
		return
	}
	s.duration.Observe(took.Seconds())
	if seenset.Failed(err) {
		s.errors.Inc()
	}
}
