//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// redisListEnv is a type: redis source in mode list (BabelQueue's
// reliable queue) on the shared Redis, reached through a relay the
// suite cuts; the seen-set is the suite's own Redis, which it restarts.
type redisListEnv struct {
	relay *testutil.Relay
	queue string
	c     *redis.Client
}

func (e *redisListEnv) name() string { return "Redis list" }

func (e *redisListEnv) sourceYAML() string {
	return fmt.Sprintf(`sources:
  - name: payments
    type: redis
    path: /payments
    redis:
      addrs: ["%s"]
      mode: list
      queue: %s
      workers: 16
      heartbeat_ttl: 3s
      reconnect_initial: 100ms
      reconnect_max: 2s
`, e.relay.Addr(), e.queue)
}

// A killed replica's list comes back within heartbeat_ttl and a third.
func (e *redisListEnv) killEvery() time.Duration { return 2500 * time.Millisecond }

func (e *redisListEnv) publisher(t *testing.T, _ bool) func([][]byte) {
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() { c.Close() })
	return func(bodies [][]byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		vals := make([]any, len(bodies))
		for i, b := range bodies {
			vals[i] = b
		}
		if err := c.RPush(ctx, e.queue, vals...).Err(); err != nil {
			t.Errorf("RPUSH: %v", err)
		}
	}
}

func (e *redisListEnv) cut() { e.relay.Cut() }

// pending is what waits in the queue and in every replica's processing
// list, dead ones' included.
func (e *redisListEnv) pending(t *testing.T) int {
	ctx := context.Background()
	tag := "{" + e.queue + "}"
	n, err := e.c.LLen(ctx, e.queue).Result()
	if err != nil {
		t.Errorf("LLEN: %v", err)
	}
	ids, _ := e.c.SMembers(ctx, tag+":replicas").Result()
	for _, id := range ids {
		m, _ := e.c.LLen(ctx, tag+":processing:"+id).Result()
		n += m
	}
	return int(n)
}

func TestChaosRedisList(t *testing.T) {
	queue := testutil.UniqueName("dptest.chaos.")
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() {
		ctx := context.Background()
		tag := "{" + queue + "}"
		keys := []string{queue}
		iter := c.Scan(ctx, 0, tag+"*", 500).Iterator() // the test's own keys only
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		c.Del(ctx, keys...)
		c.Close()
	})
	env := &redisListEnv{relay: testutil.NewRelay(t, testutil.RedisAddr()), queue: queue, c: c}
	runChaos(t, env)
}

// redisStreamEnv is a type: redis source in mode stream (a consumer
// group) on the shared Redis, reached through a relay the suite cuts;
// the seen-set is the suite's own Redis, which it restarts.
type redisStreamEnv struct {
	relay  *testutil.Relay
	stream string
	c      *redis.Client
}

func (e *redisStreamEnv) name() string { return "Redis stream" }

func (e *redisStreamEnv) sourceYAML() string {
	return fmt.Sprintf(`sources:
  - name: payments
    type: redis
    path: /payments
    redis:
      addrs: ["%s"]
      mode: stream
      stream: %s
      workers: 16
      claim_idle: 3s
      reconnect_initial: 100ms
      reconnect_max: 2s
`, e.relay.Addr(), e.stream)
}

// A killed replica's entries are taken over once idle for claim_idle,
// as a killed replica's list is in mode list.
func (e *redisStreamEnv) killEvery() time.Duration { return 2500 * time.Millisecond }

func (e *redisStreamEnv) publisher(t *testing.T, _ bool) func([][]byte) {
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() { c.Close() })
	return func(bodies [][]byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, b := range bodies {
				p.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, Values: []any{"body", b}})
			}
			return nil
		})
		if err != nil {
			t.Errorf("XADD: %v", err)
			return
		}
		if len(cmds) != len(bodies) {
			t.Errorf("XADD: %d replies for %d entries", len(cmds), len(bodies))
		}
	}
}

func (e *redisStreamEnv) cut() { e.relay.Cut() }

// pending is what the group has not acked: entries delivered and not
// acked (any consumer's, dead ones' included) and entries not yet
// delivered (the lag; nothing is ever deleted from the stream, so Redis
// knows it).
func (e *redisStreamEnv) pending(t *testing.T) int {
	groups, err := e.c.XInfoGroups(context.Background(), e.stream).Result()
	if err != nil {
		t.Errorf("XINFO GROUPS: %v", err)
		return -1
	}
	for _, g := range groups {
		if g.Name == "chaos" { // the group is the consumer's name
			if g.Lag < 0 {
				t.Errorf("XINFO GROUPS: the lag of group %q is unknown", g.Name)
				return -1
			}
			return int(g.Pending + g.Lag)
		}
	}
	t.Errorf("XINFO GROUPS: no group %q on %s", "chaos", e.stream)
	return -1
}

func TestChaosRedisStream(t *testing.T) {
	stream := testutil.UniqueName("dptest.chaos.")
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() {
		ctx := context.Background()
		keys := []string{stream}
		iter := c.Scan(ctx, 0, "{"+stream+"}*", 500).Iterator() // the replicas' session keys
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		c.Del(ctx, keys...)
		c.Close()
	})
	env := &redisStreamEnv{relay: testutil.NewRelay(t, testutil.RedisAddr()), stream: stream, c: c}
	runChaos(t, env)
}
