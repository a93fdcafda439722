package rediscoalesce_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The XAcks that wait behind one pipeline go out as one XACK per stream
// and group: Redis counts one command for them, every entry is acked,
// and each caller learns that its entry was pending (1); an entry acked
// alone that was not pending answers 0, and a shared XACK that acked
// fewer than it carried answers -1 to each of its callers.
func TestXAckMergesAndAnswersEach(t *testing.T) {
	// A private server: commandstats counts every client's XACKs.
	srv := testutil.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	stream := "{xack}"
	const n = 40
	for range n {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"body", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.XGroupCreate(ctx, stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read := func() []string {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: n / 2}).Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	xacks := func() int64 {
		st, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(st, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_xack:calls="); ok {
				calls, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				return calls
			}
		}
		return 0
	}
	b := rediscoalesce.New(c, 5*time.Second, 0, 0)
	defer b.Close()

	// ackAll holds the one pipeline in flight with a blocking read, so
	// that every XAck queues behind it and goes out in the next one.
	ackAll := func(ids []string) []int64 {
		got := make([]int64, len(ids))
		var wg sync.WaitGroup
		wg.Go(func() { _, _, _ = b.DoCmd(ctx, "BLPOP", stream+":block", "0.3") })
		time.Sleep(50 * time.Millisecond)
		for i, id := range ids {
			wg.Go(func() {
				n, err := b.XAck(ctx, stream, "g", id)
				if err != nil {
					t.Errorf("XAck %s: %v", id, err)
				}
				got[i] = n
			})
		}
		wg.Wait()
		return got
	}

	first := read()
	before := xacks()
	for i, v := range ackAll(first) {
		if v != 1 {
			t.Errorf("XAck %s = %d, want 1 (every entry was pending)", first[i], v)
		}
	}
	if sent := xacks() - before; sent != 1 {
		t.Errorf("%d acks queued behind one pipeline: Redis ran %d XACKs, want 1", len(first), sent)
	}
	if pending, err := c.XPending(ctx, stream, "g").Result(); err != nil || pending.Count != 0 {
		t.Fatalf("after the shared XACK: pending %+v %v, want none", pending, err)
	}

	if v, err := b.XAck(ctx, stream, "g", first[0]); err != nil || v != 0 {
		t.Errorf("XAck of an entry acked already, alone: %d %v, want 0", v, err)
	}

	second := read()
	if err := c.XAck(ctx, stream, "g", second[3]).Err(); err != nil {
		t.Fatal(err)
	}
	for i, v := range ackAll(second) {
		if v != -1 {
			t.Errorf("XAck %s in a shared XACK that acked one fewer = %d, want -1", second[i], v)
		}
	}
	if pending, err := c.XPending(ctx, stream, "g").Result(); err != nil || pending.Count != 0 {
		t.Errorf("after the short XACK: pending %+v %v, want none", pending, err)
	}
}
