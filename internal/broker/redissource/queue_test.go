package redissource_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// queue is one test's list and every key under its hash tag, removed
// when the test ends (never a flush: the server is shared).
type queue struct {
	rdb  redis.UniversalClient
	name string
	dead string
}

func newQueue(t testing.TB, addrs ...string) *queue {
	t.Helper()
	name := testutil.UniqueName("dptest.redissource.")
	q := &queue{rdb: redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs}), name: name, dead: "{" + name + "}:dead"}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, pattern := range []string{name, name + ":*", "{" + name + "}*"} {
			var (
				mu   sync.Mutex
				keys []string
			)
			scan := func(ctx context.Context, c *redis.Client) error {
				iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
				for iter.Next(ctx) {
					mu.Lock()
					keys = append(keys, iter.Val())
					mu.Unlock()
				}
				return iter.Err()
			}
			if cc, ok := q.rdb.(*redis.ClusterClient); ok {
				_ = cc.ForEachMaster(ctx, scan)
			} else if c, ok := q.rdb.(*redis.Client); ok {
				_ = scan(ctx, c)
			}
			for _, k := range keys {
				q.rdb.Del(ctx, k)
			}
		}
		_ = q.rdb.Close()
	})
	return q
}

// push is what a BabelQueue producer does: RPUSH the bytes.
func (q *queue) push(t testing.TB, elems ...[]byte) {
	t.Helper()
	for _, e := range elems {
		if err := q.rdb.RPush(context.Background(), q.name, e).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func (q *queue) llen(t testing.TB, key string) int64 {
	t.Helper()
	n, err := q.rdb.LLen(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
