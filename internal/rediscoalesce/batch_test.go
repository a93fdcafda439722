package rediscoalesce_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Every kind of call gets its own reply when many share pipelines: plain
// commands with string, nil and integer replies, and scripts on two keys.
func TestRepliesAreEachCallsOwn(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	defer c.Close()
	ctx := context.Background()
	prefix := testutil.UniqueName("rediscoalesce") + ":"
	t.Cleanup(func() {
		iter := c.Scan(ctx, 0, "{"+prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	b := rediscoalesce.New(c, 5*time.Second, 0, 0)
	defer b.Close()
	move := redis.NewScript(`local v = redis.call('GET', KEYS[1]); if not v then return 0 end
redis.call('SET', KEYS[2], v); redis.call('DEL', KEYS[1]); return tonumber(v)`)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := "{" + prefix + strconv.Itoa(i) + "}"
			if n, err := b.DoInt(ctx, "INCRBY", k+":a", i); err != nil || n != int64(i) {
				t.Errorf("INCRBY %d: %d %v", i, n, err)
			}
			if v, absent, err := b.DoCmd(ctx, "GET", k+":missing"); err != nil || !absent || v != "" {
				t.Errorf("GET missing: %q %v %v", v, absent, err)
			}
			if n, err := b.Do(ctx, move, []string{k + ":a", k + ":b"}); err != nil || n != int64(i) {
				t.Errorf("move %d: %d %v", i, n, err)
			}
			if v, absent, err := b.DoCmd(ctx, "GET", k+":b"); err != nil || absent || v != strconv.Itoa(i) {
				t.Errorf("GET moved %d: %q %v %v", i, v, absent, err)
			}
		}()
	}
	wg.Wait()
	// A reply error is the call's alone.
	calls := []*rediscoalesce.Call{
		{Cmd: []any{"SET", "{" + prefix + "s}", "x"}},
		{Cmd: []any{"INCR", "{" + prefix + "s}"}, IntReply: true},
	}
	gone := b.DoMany(ctx, calls)
	if gone[0] != nil || gone[1] != nil || calls[0].Err != nil || calls[1].Err == nil {
		t.Errorf("SET then INCR of a string: gone %v, errors %v / %v; want the INCR's error only", gone, calls[0].Err, calls[1].Err)
	}
	b.Close()
	if _, err := b.DoInt(ctx, "PING"); !errors.Is(err, rediscoalesce.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
