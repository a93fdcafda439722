package redissource

import (
	"context"
	"math"
	"strconv"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// backlogSource is a stream source that is never run, for calling
// backlog by hand on a stream the test prepared; stream and group are
// removed when the test ends.
func backlogSource(t *testing.T, addr string) (*StreamSource, *metrics.SourceMetrics, redis.UniversalClient) {
	t.Helper()
	m := metrics.New(nil).ForSource("test", "redis")
	s, err := NewStream(Options{Name: "test", Addrs: []string{addr}, Stream: testutil.UniqueName("dptest.backlog."),
		Group: testutil.UniqueName("dptest-group-"), Replica: "me", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		rdb.Del(context.Background(), s.o.Stream)
		_ = rdb.Close()
		_ = s.Close()
	})
	return s, m, rdb
}

// xadd adds n entries with explicit IDs 1-0 … n-0.
func xadd(t *testing.T, rdb redis.Cmdable, stream string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: strconv.Itoa(i) + "-0", Values: []any{"body", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A nil lag from Redis (an entry deleted after the group's position) is
// counted when that costs no scan — the group is behind the stream's
// first entry, so every entry in the stream waits for it — and reported
// unknown (NaN) otherwise, never as a number Redis did not give.
func TestStreamBacklogNilLag(t *testing.T) {
	ctx := context.Background()
	addr := testutil.RedisAddr()

	t.Run("group behind the first entry", func(t *testing.T) {
		s, m, rdb := backlogSource(t, addr)
		xadd(t, rdb, s.o.Stream, 10)
		if err := rdb.XGroupCreate(ctx, s.o.Stream, s.o.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		// Entry 2 read by another consumer and held: pending, not ours.
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.o.Group, Consumer: "other", Streams: []string{s.o.Stream, ">"}, Count: 2}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.XDel(ctx, s.o.Stream, "1-0", "2-0", "5-0").Err(); err != nil {
			t.Fatal(err)
		}
		if g := rdb.XInfoGroups(ctx, s.o.Stream).Val(); len(g) != 1 || g[0].Lag != -1 {
			t.Fatalf("XINFO GROUPS %+v: the case needs a nil lag", g)
		}
		s.backlog(ctx)
		// 3-0 … 10-0 but 5-0: 7 entries after the group's 2-0.
		if got := promtest.ToFloat64(m.Queued); got != 7 {
			t.Errorf("queued %v, want 7", got)
		}
		if got := promtest.ToFloat64(m.Reserved); got != 0 {
			t.Errorf("reserved %v, want 0: the pending entries are another consumer's", got)
		}
	})

	t.Run("group inside the stream", func(t *testing.T) {
		s, m, rdb := backlogSource(t, addr)
		xadd(t, rdb, s.o.Stream, 10)
		if err := rdb.XGroupCreate(ctx, s.o.Stream, s.o.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.o.Group, Consumer: "me", Streams: []string{s.o.Stream, ">"}, Count: 3}).Err(); err != nil {
			t.Fatal(err)
		}
		m.Queued.Set(42)
		if err := rdb.XDel(ctx, s.o.Stream, "7-0").Err(); err != nil {
			t.Fatal(err)
		}
		s.backlog(ctx)
		if got := promtest.ToFloat64(m.Queued); !math.IsNaN(got) {
			t.Errorf("queued %v, want NaN (unknown)", got)
		}
		if got := promtest.ToFloat64(m.Reserved); got != 3 {
			t.Errorf("reserved %v, want 3", got)
		}
	})
}

// With the broker Redis gone the gauges keep what they last read, as in
// mode list: a failed read is no zero backlog.
func TestStreamBacklogRedisDown(t *testing.T) {
	ctx := context.Background()
	srv := testutil.StartRedis(t)
	s, m, rdb := backlogSource(t, srv.Addr())
	xadd(t, rdb, s.o.Stream, 5)
	if err := rdb.XGroupCreate(ctx, s.o.Stream, s.o.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.o.Group, Consumer: "me", Streams: []string{s.o.Stream, ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	s.backlog(ctx)
	if q, r := promtest.ToFloat64(m.Queued), promtest.ToFloat64(m.Reserved); q != 3 || r != 2 {
		t.Fatalf("queued %v reserved %v, want 3 and 2", q, r)
	}
	srv.Kill()
	s.backlog(ctx)
	if q, r := promtest.ToFloat64(m.Queued), promtest.ToFloat64(m.Reserved); q != 3 || r != 2 {
		t.Errorf("after Redis died: queued %v reserved %v, want still 3 and 2", q, r)
	}
}

// On Redis Cluster the backlog's transactions (XINFO GROUPS with
// XPENDING; XINFO GROUPS, XRANGE and XLEN) go to the stream's node, the
// fallback included.
func TestStreamBacklogCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	m := metrics.New(nil).ForSource("test", "redis")
	s, err := NewStream(Options{Name: "test", Addrs: cl.Addrs(), Stream: testutil.UniqueName("dptest.backlog."),
		Group: "g", Replica: "me", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	xadd(t, rdb, s.o.Stream, 5)
	if err := rdb.XGroupCreate(ctx, s.o.Stream, s.o.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.o.Group, Consumer: "me", Streams: []string{s.o.Stream, ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	s.backlog(ctx)
	if q, r := promtest.ToFloat64(m.Queued), promtest.ToFloat64(m.Reserved); q != 3 || r != 2 {
		t.Fatalf("queued %v reserved %v, want 3 and 2", q, r)
	}
	// The two read entries and 4-0 deleted: a nil lag, the group behind
	// the first entry (3-0), so the count is XLEN, 2.
	if err := rdb.XDel(ctx, s.o.Stream, "1-0", "2-0", "4-0").Err(); err != nil {
		t.Fatal(err)
	}
	if g := rdb.XInfoGroups(ctx, s.o.Stream).Val(); len(g) != 1 || g[0].Lag != -1 {
		t.Fatalf("XINFO GROUPS %+v: the case needs a nil lag", g)
	}
	s.backlog(ctx)
	if q, r := promtest.ToFloat64(m.Queued), promtest.ToFloat64(m.Reserved); q != 2 || r != 2 {
		t.Errorf("after XDEL: queued %v reserved %v, want 2 and 2", q, r)
	}
}
