package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
)

// TestSourceExportsOnlyItsKindsSeries: a source's handle exports the
// series of its own broker kind only, so the dashboard's Kafka and Redis
// panels draw no line for a RabbitMQ source; what a source writes to
// another kind's fields goes nowhere.
func TestSourceExportsOnlyItsKindsSeries(t *testing.T) {
	kafkaOnly := []string{"dedupe_proxy_kafka_partitions_held", "dedupe_proxy_kafka_commits_total", "dedupe_proxy_kafka_lag_messages"}
	redisOnly := []string{"dedupe_proxy_redis_queue_length", "dedupe_proxy_redis_processing_length", "dedupe_proxy_redis_reclaimed_total"}
	for _, tc := range []struct {
		kind      string
		want, not []string
	}{
		{"rabbitmq", nil, append(append([]string{}, kafkaOnly...), redisOnly...)},
		{"kafka", kafkaOnly, redisOnly},
		{"redis", redisOnly, kafkaOnly},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			m.InitSource("src", tc.kind)
			sm := m.ForSource("src", tc.kind)
			// Every field is writable whatever the kind.
			sm.Commits.Inc()
			sm.CommitFailures.Inc()
			sm.PartitionsHeld.Set(1)
			sm.Lag.WithLabelValues("orders", "0").Set(3)
			sm.Reclaimed.Inc()
			sm.Queued.Set(2)
			sm.Reserved.Set(1)
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, f := range fams {
				for _, s := range f.GetMetric() {
					for _, l := range s.GetLabel() {
						if l.GetName() == "source" && l.GetValue() == "src" {
							seen[f.GetName()] = true
						}
					}
				}
			}
			for _, n := range tc.want {
				if !seen[n] {
					t.Errorf("%s source: no %s series", tc.kind, n)
				}
			}
			for _, n := range tc.not {
				if seen[n] {
					t.Errorf("%s source: exports %s", tc.kind, n)
				}
			}
		})
	}
}
