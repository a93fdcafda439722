package testutil

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The cluster forms with every slot served, and a killed master's replica
// takes its slots; the killed node rejoins as a replica.
func TestRedisClusterFormsAndFailsOver(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartRedisCluster(t, RedisClusterOptions{})
	t.Logf("cluster of %d nodes formed in %v", len(c.Nodes()), time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for i := range 100 {
		if err := cc.Set(ctx, "k"+strconv.Itoa(i), "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.MasterOf(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: without this, a master killed at once
	// may take k1 with it, which is Redis, not the set-up, at fault. WAIT
	// counts the writes of its own connection, so k1 is written on it.
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer mc.Close()
	if err := mc.Set(ctx, "k1", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n := mc.Wait(ctx, 1, 5*time.Second).Val(); n != 1 {
		t.Fatalf("WAIT 1 on k1's master: %d replicas acknowledged", n)
	}
	m.Kill()
	Eventually(t, 20*time.Second, "the replica promoted", func() bool {
		now, err := c.MasterOf(ctx, "k1")
		return err == nil && now == r
	})
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if v, err := cc.Get(ctx, "k1").Result(); err != nil || v != "v" {
		t.Fatalf("k1 after the failover: %q, %v", v, err)
	}
}

func TestRedisSentinelFormsAndFailsOver(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartRedisSentinel(t, RedisSentinelOptions{})
	t.Logf("sentinel group formed in %v", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs()})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n := fc.Wait(ctx, 2, 5*time.Second).Val(); n != 2 {
		t.Fatalf("WAIT 2: %d replicas acknowledged", n)
	}
	m, err := s.Master(ctx)
	if err != nil || m != s.Servers[0] {
		t.Fatalf("master %v, %v", m, err)
	}
	m.Kill()
	Eventually(t, 30*time.Second, "a replica promoted", func() bool {
		now, err := s.Master(ctx)
		return err == nil && now != m
	})
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if v, err := fc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("k after the failover: %q, %v", v, err)
	}
}
