package rediscoalesce_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// On a Cluster with waitReplicas, one batch spread over every master
// runs as one pipeline per master, each ending with its own WAIT, and
// each call gets its own reply. A master killed under the next batch
// fails the calls on its slots only: none of them reports success, and
// the calls on the other masters still do.
func TestWaitReplicasOnCluster(t *testing.T) {
	cl := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{NodeTimeout: 30 * time.Second})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	defer cc.Close()
	w := &wire{}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(w) })
	b := rediscoalesce.New(cc, 5*time.Second, 1, 5*time.Second)
	defer b.Close()
	ctx := context.Background()
	prefix := testutil.UniqueName("rediscoalesce")
	// Keys in every master's slots: 60 hash tags spread over 16384 slots.
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = "{" + prefix + strconv.Itoa(i) + "}:n"
	}
	if err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}

	batch := func(t *testing.T) []*rediscoalesce.Call {
		t.Helper()
		entered, release := w.hold()
		heldDone := make(chan error, 1)
		go func() { _, err := b.DoInt(ctx, "INCR", "{"+prefix+"held}"); heldDone <- err }()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the held call never reached Redis")
		}
		calls := make([]*rediscoalesce.Call, len(keys))
		for i, k := range keys {
			calls[i] = &rediscoalesce.Call{Cmd: []any{"INCRBY", k, i + 1}, IntReply: true}
		}
		done := make(chan []error, 1)
		go func() { done <- b.DoMany(ctx, calls) }()
		testutil.Eventually(t, 10*time.Second, "the batch queued", func() bool { return rediscoalesce.QueuedForTest(b) == len(calls) })
		w.sent()
		release()
		if err := <-heldDone; err != nil {
			t.Logf("the held call: %v", err)
		}
		for i, err := range <-done {
			if err != nil {
				t.Fatalf("call %d gone: %v", i, err)
			}
		}
		return calls
	}

	calls := batch(t)
	for i, c := range calls {
		if c.Err != nil || c.N != int64(i+1) {
			t.Errorf("INCRBY %s %d: %d %v", keys[i], i+1, c.N, c.Err)
		}
	}
	if got := w.sent(); len(got) != len(cl.Masters) {
		t.Errorf("the batch went out as %v, want one pipeline on each of %d masters", got, len(cl.Masters))
	}

	victim, err := cl.MasterOf(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	onVictim := map[int]bool{}
	for i, k := range keys {
		if m, err := cl.MasterOf(ctx, k); err == nil && m == victim {
			onVictim[i] = true
		}
	}
	victim.Kill()
	calls = batch(t)
	var lost, kept int
	for i, c := range calls {
		switch {
		case onVictim[i]:
			lost++
			if c.Err == nil {
				t.Errorf("call on the killed master %s answered %d, no error", keys[i], c.N)
			}
		default:
			kept++
			if c.Err != nil || c.N != int64(2*(i+1)) {
				t.Errorf("call on a live master %s: %d %v", keys[i], c.N, c.Err)
			}
		}
	}
	if lost == 0 || kept == 0 {
		t.Fatalf("%d calls on the killed master, %d on the others: the keys do not spread", lost, kept)
	}
}
