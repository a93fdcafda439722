package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The summary line says what happened since the last one, summed over
// the sources, and how many messages are in flight now.
func TestSummaryLine(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.InitSource("a", "rabbitmq")
	m.InitSource("b", "kafka")
	wh := m.ForWebhook("c")
	m.Messages.WithLabelValues("a", metrics.Forwarded).Add(3)
	var logs testutil.LogBuffer
	d := &Daemon{log: logs.JSONLogger(), reg: reg}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.summarize(ctx, 100*time.Millisecond) }()
	time.Sleep(20 * time.Millisecond) // the first reading is taken
	m.Messages.WithLabelValues("a", metrics.Forwarded).Add(2)
	m.Messages.WithLabelValues("b", metrics.Forwarded).Add(5)
	m.Messages.WithLabelValues("b", metrics.Duplicate).Add(4)
	m.Messages.WithLabelValues("a", metrics.DeadLettered).Inc()
	m.Events.WithLabelValues("b", metrics.EventRetry).Add(6)
	m.InFlight.WithLabelValues("a").Set(7)
	wh.Forwarded.Add(2)
	wh.Duplicates.Add(3)
	wh.Enqueued.Inc()
	testutil.Eventually(t, 5*time.Second, "a summary line", func() bool { return len(logs.With(t, "INFO", "summary")) > 0 })
	cancel()
	<-done
	r := logs.With(t, "INFO", "summary")[0]
	for k, want := range map[string]float64{"forwarded": 9, "duplicates": 7, "dead_lettered": 1, "retried": 6, "in_flight": 7, "requeued": 0, "enqueued": 1} {
		if got, _ := r[k].(float64); got != want {
			t.Errorf("summary %s = %v, want %v (line %v)", k, r[k], want, r)
		}
	}
	if tot := readTotals(reg); tot.forwarded != 12 {
		t.Errorf("totals forwarded = %v, want 12 since start", tot.forwarded)
	}
}
