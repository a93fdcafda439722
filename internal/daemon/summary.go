package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// summaryEvery is how often the proxy logs what it did: an operator
// tailing the log of a long run sees progress without a dashboard.
const summaryEvery = time.Minute

// totals are the proxy's counts since it started, over every source,
// webhook listeners included: a webhook event forwarded to the app counts
// as forwarded, a redelivered one as a duplicate, and one stored on a
// broker as enqueued (its forward is counted by the source consuming it).
type totals struct {
	forwarded, duplicates, deadLettered, requeued, retried, inFlight, enqueued float64
}

// readTotals sums the message and event counters of reg over sources.
func readTotals(reg prometheus.Gatherer) totals {
	var t totals
	mfs, err := reg.Gather()
	if err != nil {
		return t
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			label := func(name string) string {
				for _, l := range m.GetLabel() {
					if l.GetName() == name {
						return l.GetValue()
					}
				}
				return ""
			}
			switch mf.GetName() {
			case "dedupe_proxy_messages_total":
				v := m.GetCounter().GetValue()
				switch label("result") {
				case "forwarded":
					t.forwarded += v
				case "duplicate":
					t.duplicates += v
				case "dead_lettered":
					t.deadLettered += v
				case "requeued":
					t.requeued += v
				}
			case "dedupe_proxy_webhook_accepted_total":
				switch label("how") {
				case "forwarded":
					t.forwarded += m.GetCounter().GetValue()
				case "enqueued":
					t.enqueued += m.GetCounter().GetValue()
				}
			case "dedupe_proxy_webhook_duplicates_total":
				t.duplicates += m.GetCounter().GetValue()
			case "dedupe_proxy_events_total":
				if label("event") == "retry" {
					t.retried += m.GetCounter().GetValue()
				}
			case "dedupe_proxy_inflight_messages":
				t.inFlight += m.GetGauge().GetValue()
			}
		}
	}
	return t
}

func (t totals) attrs() []any {
	return []any{"forwarded", int64(t.forwarded), "duplicates", int64(t.duplicates), "dead_lettered", int64(t.deadLettered),
		"requeued", int64(t.requeued), "retried", int64(t.retried), "in_flight", int64(t.inFlight), "enqueued", int64(t.enqueued)}
}

// since is what happened between earlier and t; in flight is t's.
func (t totals) since(earlier totals) totals {
	return totals{forwarded: t.forwarded - earlier.forwarded, duplicates: t.duplicates - earlier.duplicates,
		deadLettered: t.deadLettered - earlier.deadLettered, requeued: t.requeued - earlier.requeued,
		retried: t.retried - earlier.retried, inFlight: t.inFlight, enqueued: t.enqueued - earlier.enqueued}
}

// summarize logs, every interval until ctx ends, what the proxy did
// since the last line.
func (d *Daemon) summarize(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := readTotals(d.reg)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := readTotals(d.reg)
			d.log.Info("summary", append([]any{"over", interval.String()}, now.since(last).attrs()...)...)
			last = now
		}
	}
}
