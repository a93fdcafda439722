package redissource_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Mode stream fills the backlog gauges mode list fills from LLEN: the
// group's lag (entries not yet delivered to it) and the entries pending
// for this replica's consumer, read at every renewal. 20 entries, 3
// acked, the rest held by the handlers or not read yet: the two gauges
// add up to 17 and each is what Redis says. An entry deleted after the
// group's position makes Redis' lag unknown, and so is the gauge.
func TestStreamBacklogGauges(t *testing.T) {
	const n, acked = 20, 3
	ctx := context.Background()
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ids := make([]string, n)
	for i := range n {
		id, err := q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.name, Values: map[string]any{"body": fmt.Sprint("b-", i)}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	m := metrics.New(nil).ForSource("test", "redis")
	release := make(chan struct{})
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group,
		Workers: 2, ClaimIdle: 3 * time.Second, Metrics: m},
		func(d broker.Delivery) error {
			i, _ := strconv.Atoi(strings.TrimPrefix(string(d.Message().Body), "b-"))
			if i < acked {
				return d.Ack(ctx)
			}
			<-release
			return d.Requeue(ctx)
		})
	// Before the consumer stops (cleanups run last first).
	t.Cleanup(func() { close(release) })

	var lag, pending int64
	testutil.Eventually(t, 10*time.Second, "gauges = lag, pending", func() bool {
		// Until the source created its group, XINFO lists none.
		gs := q.rdb.XInfoGroups(ctx, q.name).Val()
		if len(gs) != 1 {
			return false
		}
		p, err := q.rdb.XPending(ctx, q.name, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		lag, pending = gs[0].Lag, p.Consumers[c.src.Consumer()]
		return promtest.ToFloat64(m.Queued) == float64(lag) && promtest.ToFloat64(m.Reserved) == float64(pending) && lag+pending == n-acked
	})
	if lag == 0 || pending == 0 {
		t.Fatalf("lag %d, pending %d: the case needs entries both waiting and held", lag, pending)
	}

	// The last entry was never read: deleting it leaves a hole after the
	// group's position, and Redis answers a nil lag.
	if err := q.rdb.XDel(ctx, q.name, ids[n-1]).Err(); err != nil {
		t.Fatal(err)
	}
	if gs := q.rdb.XInfoGroups(ctx, q.name).Val(); len(gs) != 1 || gs[0].Lag != -1 {
		t.Fatalf("XINFO GROUPS after XDEL: %+v, want a nil lag", gs)
	}
	testutil.Eventually(t, 5*time.Second, "lag unknown", func() bool {
		return math.IsNaN(promtest.ToFloat64(m.Queued))
	})
	if got := promtest.ToFloat64(m.Reserved); got != float64(pending) {
		t.Errorf("reserved %v with the lag unknown, want still %d", got, pending)
	}
}
