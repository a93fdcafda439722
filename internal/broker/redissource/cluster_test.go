package redissource_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// On Redis Cluster every key of a queue is in the queue's slot, so the
// reserve, the settle scripts and the give-back of a dead replica's list
// work there; BabelQueue's shared list, in another slot, is taken too.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	q := newQueue(t, cl.Addrs()...)
	ctx := context.Background()
	msgs := numbered("cluster", 10)
	q.push(t, msgs...)
	// A replica that died holding two messages: registered, no heartbeat.
	ghost := "{" + q.name + "}:processing:ghost"
	q.rdb.LPush(ctx, ghost, "ghost-00", "ghost-01")
	q.rdb.SAdd(ctx, "{"+q.name+"}:replicas", "ghost")
	// BabelQueue's own runtime left one in its shared list.
	q.rdb.RPush(ctx, q.name+":processing", "babelqueue-00")

	var requeued atomic.Bool
	c := consumeWith(t, redissource.Options{Addrs: cl.Addrs(), Queue: q.name, DeadLetter: q.dead, Workers: 2,
		HeartbeatTTL: 3 * time.Second, TakeBabelQueueProcessing: true},
		func(d broker.Delivery) error {
			switch b := string(d.Message().Body); {
			case b == "cluster-00":
				return d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "permanent: status 400", LastStatus: 400})
			case b == "cluster-01" && requeued.CompareAndSwap(false, true):
				return d.Requeue(ctx)
			}
			return d.Ack(ctx)
		})
	want := len(msgs) + 1 + 2 + 1 // the requeue, the ghost's two, BabelQueue's one
	testutil.Eventually(t, 20*time.Second, "every message settled", func() bool { return len(c.messages()) == want })
	c.stop(t)
	seen := map[string]int{}
	for _, m := range c.messages() {
		seen[string(m.Body)]++
		if m.Body[0] == 'g' && !m.Redelivered {
			t.Errorf("%s from the dead replica's list not marked redelivered", m.Body)
		}
	}
	for _, b := range append(msgs, []byte("ghost-00"), []byte("ghost-01"), []byte("babelqueue-00")) {
		if n := seen[string(b)]; n != 1 && !(string(b) == "cluster-01" && n == 2) {
			t.Errorf("%s delivered %d times", b, n)
		}
	}
	if n := q.llen(t, q.dead); n != 1 {
		t.Errorf("dead-letter list holds %d, want 1", n)
	}
	for _, k := range []string{q.name, ghost, q.name + ":processing"} {
		if n := q.llen(t, k); n != 0 {
			t.Errorf("%s holds %d, want 0", k, n)
		}
	}
	slot := func(k string) int64 { return q.rdb.ClusterKeySlot(ctx, k).Val() }
	for _, k := range []string{ghost, q.dead, q.dead + ":reasons", "{" + q.name + "}:replicas", "{" + q.name + "}:redelivered", "{" + q.name + "}:heartbeat:x"} {
		if slot(k) != slot(q.name) {
			t.Errorf("%s in slot %d, the queue in %d", k, slot(k), slot(q.name))
		}
	}
	t.Logf("queue slot %d, BabelQueue's shared list slot %d", slot(q.name), slot(q.name+":processing"))
}

// Mode stream on Redis Cluster: read, requeue, dead-letter (to a stream
// in another slot) and take over a dead consumer's entries.
func TestClusterStream(t *testing.T) {
	t.Parallel()
	cl := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	q := newQueue(t, cl.Addrs()...)
	q.dead = q.name + ".dlq" // no hash tag: another slot, two commands
	t.Cleanup(func() { q.rdb.Del(context.Background(), q.dead) })
	ctx := context.Background()
	group := "g"
	q.rdb.XGroupCreateMkStream(ctx, q.name, group, "0")
	q.xadd(t, brokertest.Message{Body: []byte("ghost-0")})
	q.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "ghost", Streams: []string{q.name, ">"}, Count: 1})
	for i := range 5 {
		q.xadd(t, brokertest.Message{Body: fmt.Appendf(nil, "c-%d", i)})
	}
	var requeued atomic.Bool
	c := consumeStream(t, redissource.Options{Addrs: cl.Addrs(), Stream: q.name, Group: group, ClaimIdle: 3 * time.Second, DeadLetter: q.dead},
		func(d broker.Delivery) error {
			switch string(d.Message().Body) {
			case "c-0":
				return d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "permanent: status 400"})
			case "c-1":
				if requeued.CompareAndSwap(false, true) {
					return d.Requeue(ctx)
				}
			}
			return d.Ack(ctx)
		})
	testutil.Eventually(t, 20*time.Second, "all settled", func() bool { return len(c.messages()) == 7 })
	testutil.Eventually(t, 5*time.Second, "nothing pending", func() bool { return q.pending(t, group) == 0 })
	if n := q.rdb.XLen(ctx, q.dead).Val(); n != 1 {
		t.Errorf("dead-letter stream holds %d, want 1", n)
	}
}
