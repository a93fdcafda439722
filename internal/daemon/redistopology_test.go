package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// withCluster points the seen-set at a private Redis Cluster (3 masters,
// 1 replica each) by listing every node, as an operator lists seeds.
func withCluster(c *testutil.RedisCluster, wait int) func(*config.Config) {
	return func(cfg *config.Config) {
		withAdmin(cfg)
		cfg.SeenSet.Redis.Addrs = c.Addrs()
		cfg.SeenSet.Redis.WaitReplicas = wait
		cfg.SeenSet.Redis.WaitTimeout = 500 * time.Millisecond
	}
}

// clusterPlan is n unique ids, each published once and 30% of them a
// second time right after.
func clusterPlan(prefix string, n int) (ids []string, sends []string) {
	for i := range n {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		ids = append(ids, id)
		sends = append(sends, id)
		if i%10 < 3 {
			sends = append(sends, id)
		}
	}
	return ids, sends
}

// checkCluster checks every id was effected once, is done in the seen-set
// and that the keys spread over every master, and that the proxy reports
// the cluster on /readyz and in its start-up log.
func checkCluster(t *testing.T, h *harness, p *proxy, c *testutil.RedisCluster, ids []string, log *testutil.LogBuffer) {
	t.Helper()
	effects := h.app.Effects()
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("id %s effected %d times, want 1", id, effects[id])
		}
	}
	if len(effects) != len(ids) {
		t.Errorf("%d keys effected, want %d", len(effects), len(ids))
	}
	ctx := context.Background()
	masters := map[*testutil.RedisNode]bool{}
	for _, id := range ids {
		st, err := p.d.Store().Status(ctx, storedKey(id))
		if err != nil || st.State != seenset.Done {
			t.Fatalf("%s: %+v, %v; want done", id, st, err)
		}
		m, err := c.MasterOf(ctx, h.cfg.SeenSet.Redis.Prefix+storedKey(id))
		if err != nil {
			t.Fatal(err)
		}
		masters[m] = true
	}
	if len(masters) != 3 {
		t.Errorf("keys on %d masters, want 3", len(masters))
	}
	code, body := adminDo(t, p, "GET", "/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "seenset: ok (redis cluster, 3 masters, 1 replica each)\n") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if !strings.Contains(log.String(), `"msg":"seen-set redis","mode":"cluster","masters":3`) {
		t.Errorf("no start-up line naming the cluster in the log:\n%s", log.String())
	}
}

// Two proxies on one RabbitMQ queue, the seen-set on a Redis Cluster:
// every message effected once, every duplicate skipped, every delivery
// acked.
func TestRabbitOnRedisCluster(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	h := newHarness(t, withCluster(c, 0))
	var log testutil.LogBuffer
	h.logger = slog.New(slog.NewJSONHandler(&log, nil))
	p1, p2 := h.start(), h.start()
	ids, sends := clusterPlan("rc", 300)
	for _, id := range sends {
		publishJSON(h, envelope(id, ""))
	}
	// A duplicate that meets its original in flight is requeued (busy) and
	// counted again when it comes back: count the final outcomes.
	acked := func() float64 {
		return p1.result(t, "forwarded") + p2.result(t, "forwarded") + p1.result(t, "duplicate") + p2.result(t, "duplicate")
	}
	testutil.Eventually(t, 60*time.Second, "every delivery acked", func() bool { return acked() == float64(len(sends)) })
	testutil.Eventually(t, 10*time.Second, "queue empty", func() bool { return h.rabbit.Ready(h.queue) == 0 })
	if dup := p1.result(t, "duplicate") + p2.result(t, "duplicate"); dup != float64(len(sends)-len(ids)) {
		t.Errorf("duplicates skipped %v, want %d", dup, len(sends)-len(ids))
	}
	checkCluster(t, h, p1, c, ids, &log)
}

// Kafka (six partitions, two proxies) with the seen-set on a Redis
// Cluster and every claim and commit waiting for its replica.
func TestKafkaOnRedisClusterWithReplicaWait(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	h := newKafkaHarness(t, 6, withCluster(c, 1))
	var log testutil.LogBuffer
	h.logger = slog.New(slog.NewJSONHandler(&log, nil))
	p1, p2 := h.start(), h.start()
	ids, sends := clusterPlan("kc", 300)
	var recs []kafkatest.Record
	for i, id := range sends {
		recs = append(recs, kmsg(i%6, "c"+strconv.Itoa(i%17), id, ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 60*time.Second, "committed to the end", func() bool { return h.committedTotal() == int64(len(sends)) })
	if dup := p1.result(t, "duplicate") + p2.result(t, "duplicate"); dup != float64(len(sends)-len(ids)) {
		t.Errorf("duplicates skipped %v, want %d", dup, len(sends)-len(ids))
	}
	checkCluster(t, h.harness, p1, c, ids, &log)
}

// RabbitMQ with the seen-set behind Sentinel (master, 2 replicas, 3
// sentinels), every write waiting for one replica.
func TestRabbitOnRedisSentinelWithReplicaWait(t *testing.T) {
	t.Parallel()
	s := testutil.StartRedisSentinel(t, testutil.RedisSentinelOptions{})
	h := newHarness(t, func(cfg *config.Config) {
		withAdmin(cfg)
		cfg.SeenSet.Redis.Addrs = s.SentinelAddrs()
		cfg.SeenSet.Redis.MasterName = s.MasterName
		cfg.SeenSet.Redis.WaitReplicas = 1
		cfg.SeenSet.Redis.WaitTimeout = 500 * time.Millisecond
	})
	p := h.start()
	ids, sends := clusterPlan("rs", 200)
	for _, id := range sends {
		publishJSON(h, envelope(id, ""))
	}
	testutil.Eventually(t, 60*time.Second, "every delivery acked", func() bool {
		return p.result(t, "forwarded")+p.result(t, "duplicate") == float64(len(sends))
	})
	effects := h.app.Effects()
	for _, id := range ids {
		if effects[id] != 1 {
			t.Errorf("id %s effected %d times, want 1", id, effects[id])
		}
		if st, err := p.d.Store().Status(context.Background(), storedKey(id)); err != nil || st.State != seenset.Done {
			t.Fatalf("%s: %+v, %v; want done", id, st, err)
		}
	}
	code, body := adminDo(t, p, "GET", "/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "seenset: ok (redis sentinel, 1 master, 2 replicas)\n") {
		t.Errorf("/readyz = %d %q", code, body)
	}
}
