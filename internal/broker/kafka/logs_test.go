package kafka_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Connections to the broker cut under three partitions: fetching fails on
// each, but the log says so once for the source, and once that it works
// again — not a warning per partition and retry.
func TestFetchFailureLoggedOncePerOutage(t *testing.T) {
	c := kafkatest.Start(t, 3, []string{"orders"})
	o := options(c, "orders")
	var logs testutil.LogBuffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var col collector
	r := start(t, o, col.handle)
	c.Produce(t, "orders", records(3, 2)...)
	testutil.Eventually(t, 20*time.Second, "consumed", func() bool { return col.count() == 6 })
	c.Cut()
	testutil.Eventually(t, 15*time.Second, "fetch failures seen", func() bool {
		return strings.Contains(logs.String(), "kafka fetch failed, retrying")
	})
	testutil.Eventually(t, 15*time.Second, "ready again", func() bool { return r.s.Ready() == nil })
	testutil.Eventually(t, 15*time.Second, "fetching again", func() bool {
		return strings.Contains(logs.String(), "kafka fetching again")
	})
	out := logs.String()
	down, up := strings.Count(out, "kafka fetch failing"), strings.Count(out, "kafka fetching again")
	perPartition := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "kafka fetch failed, retrying") && !strings.Contains(line, "level=DEBUG") {
			perPartition++
		}
	}
	if down != 1 || up != 1 || perPartition != 0 {
		t.Fatalf("%d down, %d up, %d per-partition lines above debug; want 1, 1, 0:\n%s", down, up, perPartition, out)
	}
}
