package seenset_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset/storetest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func randomPrefix(tb testing.TB) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return "dptest:" + hex.EncodeToString(b[:]) + ":"
}

// sharedRedis returns a client of the shared server, failing the test if it
// is unreachable: CI provides it, and a skipped Redis suite would hide a
// broken backend behind a green run.
func sharedRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		tb.Fatalf("Redis test server at %s is unreachable (%v); start redis-server there or set DEDUPE_TEST_REDIS_ADDR", testutil.RedisAddr(), err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// cleanPrefix deletes the keys under prefix, and only those.
func cleanPrefix(tb testing.TB, c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			if err := c.Del(ctx, batch...).Err(); err != nil {
				tb.Errorf("cleaning %s*: %v", prefix, err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		tb.Errorf("scanning %s*: %v", prefix, err)
	}
}

// newSharedStore returns a store on the shared server under a fresh prefix
// and removes that prefix's keys when the test ends.
func newSharedStore(tb testing.TB) (*seenset.Redis, *redis.Client, string) {
	tb.Helper()
	c := sharedRedis(tb)
	prefix := randomPrefix(tb)
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{testutil.RedisAddr()}, Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	// Cleanups run last-in first-out: the store closes, then the keys go,
	// then the cleanup client closes.
	tb.Cleanup(func() { cleanPrefix(tb, c, prefix) })
	tb.Cleanup(func() { _ = s.Close() })
	return s, c, prefix
}

func TestRedis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) seenset.Store {
		s, _, _ := newSharedStore(t)
		return s
	})
}

// The script path a Redis older than 7.0 takes (it refuses SET … NX …
// GET) passes the same suite.
func TestRedisScriptsOnlyConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) seenset.Store {
		s, _, _ := newSharedStore(t)
		seenset.UseScriptsOnly(s)
		return s
	})
}

// The common path is plain commands: a forwarded message costs one SET to
// claim and one SET to commit, a duplicate one SET, and no script runs.
// On a private server: the shared one runs other packages' scripts at
// the same time, which its server-wide counts cannot tell apart.
func TestRedisCommonPathIsTwoPlainCommands(t *testing.T) {
	srv := testutil.StartRedis(t)
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}, Prefix: "dptest:common:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	before := commandCounts(t, c)
	if res, err := s.Claim(ctx, "k", "A", time.Minute); err != nil || res != seenset.Claimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	if err := s.Commit(ctx, "k", "A", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, "k", "B", time.Minute); err != nil || res != seenset.Duplicate {
		t.Fatalf("duplicate claim: %v %v", res, err)
	}
	after := commandCounts(t, c)
	if d := after["set"] - before["set"]; d != 3 {
		t.Fatalf("%d SET calls, want 3", d)
	}
	for _, cmd := range []string{"evalsha", "eval", "get"} {
		if d := after[cmd] - before[cmd]; d != 0 {
			t.Fatalf("%d %s calls on the common path, want none", d, cmd)
		}
	}
}

// commandCounts reads INFO commandstats: calls per command, server-wide.
// Other tests share the server, so callers check only what they alone
// can have caused (no script at all here would be racy: use a private
// server when a test needs exact totals).
func commandCounts(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.Atoi(n)
	}
	return out
}

// The stored layout is what operators see with redis-cli and what a future
// migration must read, so pin it.
func TestRedisLayout(t *testing.T) {
	t.Parallel()
	s, c, prefix := newSharedStore(t)
	ctx := context.Background()
	if _, err := s.Claim(ctx, "orders:42", "tok:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, prefix+"orders:42").Val(); v != "inflight:tok:1" {
		t.Fatalf("inflight value %q", v)
	}
	if ms := c.PTTL(ctx, prefix+"orders:42").Val(); ms <= 0 || ms > time.Minute {
		t.Fatalf("inflight PTTL %v", ms)
	}
	if err := s.Commit(ctx, "orders:42", "tok:1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, prefix+"orders:42").Val(); v != "done:tok:1" {
		t.Fatalf("done value %q", v)
	}
	if ms := c.PTTL(ctx, prefix+"orders:42").Val(); ms <= time.Minute || ms > time.Hour {
		t.Fatalf("done PTTL %v", ms)
	}
	if n := c.Exists(ctx, "orders:42").Val(); n != 0 {
		t.Fatalf("key written without prefix")
	}
}

func TestRedisOwnership(t *testing.T) {
	t.Parallel()
	c := sharedRedis(t)
	s := seenset.NewRedisWithClient(c, randomPrefix(t))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Close closed a client it does not own: %v", err)
	}

	owned, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{testutil.RedisAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Close(); err != nil {
		t.Fatal(err)
	}
	if err := owned.Ping(context.Background()); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("Ping after Close: %v, want ErrUnavailable", err)
	}
}

func TestNewRedisRejectsBadOptions(t *testing.T) {
	for _, o := range []seenset.RedisOptions{
		{},
		{Addrs: []string{""}},
		{Addrs: []string{"127.0.0.1:1"}, DialTimeout: -1},
		{Addrs: []string{"127.0.0.1:1"}, PoolSize: -1},
	} {
		if s, err := seenset.NewRedis(o); err == nil {
			_ = s.Close()
			t.Errorf("NewRedis(%+v) accepted", o)
		}
	}
}

// A caller that is shutting down must be able to tell its own cancellation
// from an outage.
func TestRedisCancelledContext(t *testing.T) {
	t.Parallel()
	s, _, _ := newSharedStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, "k", "A", time.Minute)
	if !errors.Is(err, seenset.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with cancelled context: %v, want ErrUnavailable and context.Canceled", err)
	}
}

// Redis dies and comes back empty (no persistence, as after losing a cache
// node): every call must fail fast with ErrUnavailable while it is down, and
// the store must recover by itself, including reloading its scripts.
func TestRedisUnavailableAndRecovery(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedis(t)
	s, err := seenset.NewRedis(seenset.RedisOptions{
		Addrs:        []string{srv.Addr()},
		Prefix:       "dptest:outage:",
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if r, err := s.Claim(ctx, "before", "A", time.Minute); err != nil || r != seenset.Claimed {
		t.Fatalf("Claim before the outage: %v, %v", r, err)
	}

	srv.Kill()
	// go-redis retries dials and commands; with the short timeouts above the
	// whole call must still give up quickly.
	const bound = 5 * time.Second
	calls := []struct {
		name string
		fn   func() error
	}{
		{"Claim", func() error { _, err := s.Claim(ctx, "k", "A", time.Minute); return err }},
		{"Renew", func() error { return s.Renew(ctx, "k", "A", time.Minute) }},
		{"Commit", func() error { return s.Commit(ctx, "k", "A", time.Minute) }},
		{"Release", func() error { return s.Release(ctx, "k", "A") }},
		{"Forget", func() error { _, err := s.Forget(ctx, "k"); return err }},
		{"Status", func() error { _, err := s.Status(ctx, "k"); return err }},
		{"Ping", func() error { return s.Ping(ctx) }},
		{"ClaimMany", func() error {
			return firstErr(s.ClaimMany(ctx, []seenset.KeyToken{{Key: "k", Token: "A"}, {Key: "k2", Token: "A"}}, time.Minute))
		}},
		{"CommitMany", func() error {
			errs := s.CommitMany(ctx, []seenset.KeyToken{{Key: "k", Token: "A"}, {Key: "k2", Token: "A"}}, time.Minute)
			if !errors.Is(errs[1], seenset.ErrUnavailable) {
				return errs[1]
			}
			return errs[0]
		}},
	}
	// In parallel: each call is bounded on its own, and the test stays short.
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := c.fn()
			took := time.Since(start)
			if !errors.Is(err, seenset.ErrUnavailable) {
				t.Errorf("%s while Redis is down: %v, want ErrUnavailable", c.name, err)
			}
			if errors.Is(err, seenset.ErrNotOwner) || errors.Is(err, redis.Nil) {
				t.Errorf("%s while Redis is down: %v leaks a misleading error", c.name, err)
			}
			if took > bound {
				t.Errorf("%s while Redis is down took %v, want < %v", c.name, took, bound)
			}
			t.Logf("%s while down: %v after %v", c.name, err, took.Round(time.Millisecond))
		}()
	}
	wg.Wait()

	srv.Restart()
	// The first call after the restart may find a pooled connection to the
	// dead server; go-redis retries it, but allow a short settling window
	// rather than depend on that.
	deadline := time.Now().Add(bound)
	var (
		r       seenset.ClaimResult
		lastErr error
	)
	for {
		r, lastErr = s.Claim(ctx, "after", "A", time.Minute)
		if lastErr == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lastErr != nil || r != seenset.Claimed {
		t.Fatalf("Claim after restart: %v, %v", r, lastErr)
	}
	if err := s.Commit(ctx, "after", "A", time.Minute); err != nil {
		t.Fatalf("Commit after restart: %v", err)
	}
	if st, err := s.Status(ctx, "after"); err != nil || st.State != seenset.Done {
		t.Fatalf("Status after restart: %+v, %v", st, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
}

// SCRIPT FLUSH (failover to a replica, an operator) empties the script
// cache; EVALSHA must fall back to EVAL. Done on a private server because
// flushing the shared one would affect other users.
func TestRedisScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedis(t)
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for i := range 3 {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		k := "k" + strconv.Itoa(i)
		if r, err := s.Claim(ctx, k, "A", time.Minute); err != nil || r != seenset.Claimed {
			t.Fatalf("Claim after SCRIPT FLUSH: %v, %v", r, err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, k, "A", time.Minute); err != nil {
			t.Fatalf("Commit after SCRIPT FLUSH: %v", err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// A pipelined batch falls back per item, in order.
		rs := s.ClaimMany(ctx, []seenset.KeyToken{{Key: k, Token: "B"}, {Key: k + "b", Token: "B"}, {Key: k + "b", Token: "C"}}, time.Minute)
		if rs[0].Result != seenset.Duplicate || rs[1].Result != seenset.Claimed || rs[2].Result != seenset.Busy || firstErr(rs) != nil {
			t.Fatalf("ClaimMany after SCRIPT FLUSH: %+v", rs)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if errs := s.CommitMany(ctx, []seenset.KeyToken{{Key: k + "b", Token: "B"}}, time.Minute); errs[0] != nil {
			t.Fatalf("CommitMany after SCRIPT FLUSH: %v", errs[0])
		}
	}
}

func firstErr(rs []seenset.ClaimReply) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

func BenchmarkRedisClaimCommit(b *testing.B) {
	s, _, _ := newSharedStore(b)
	// Round-trip bound: model a proxy's concurrent workers (16 per CPU,
	// 32 goroutines on a 2-CPU machine) rather than one per CPU.
	b.SetParallelism(16)
	benchClaimCommit(b, s)
}

func BenchmarkMemoryClaimCommit(b *testing.B) {
	s := seenset.NewMemory()
	b.Cleanup(func() { _ = s.Close() })
	benchClaimCommit(b, s)
}

// BenchmarkRedisClaimCommitMany is a Kafka batch's store cost: 32 keys
// claimed in one pipeline, then committed in one. Per op: one message.
func BenchmarkRedisClaimCommitMany(b *testing.B) {
	s, _, _ := newSharedStore(b)
	const batch = 32
	ctx := context.Background()
	items := make([]seenset.KeyToken, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		for i := range items {
			items[i] = seenset.KeyToken{Key: "bench:many:" + strconv.Itoa(n+i), Token: "T"}
		}
		for i, r := range s.ClaimMany(ctx, items, 30*time.Second) {
			if r.Err != nil || r.Result != seenset.Claimed {
				b.Fatalf("ClaimMany %d: %v, %v", i, r.Result, r.Err)
			}
		}
		for i, err := range s.CommitMany(ctx, items, 5*time.Minute) {
			if err != nil {
				b.Fatalf("CommitMany %d: %v", i, err)
			}
		}
	}
}

// benchClaimCommit measures the per-message store cost of the happy path:
// one claim, one commit, each on a new key.
func benchClaimCommit(b *testing.B, s seenset.Store) {
	var n atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := "bench:" + strconv.FormatInt(n.Add(1), 10)
			if r, err := s.Claim(ctx, k, "T", 30*time.Second); err != nil || r != seenset.Claimed {
				b.Errorf("Claim: %v, %v", r, err)
				return
			}
			// A short done TTL so an interrupted run leaves little behind.
			if err := s.Commit(ctx, k, "T", 5*time.Minute); err != nil {
				b.Errorf("Commit: %v", err)
				return
			}
		}
	})
}

// A server that accepts connections and never answers (stopped process,
// half-dead network path): the caller's deadline, not the long ReadTimeout,
// must end the call.
func TestRedisHonoursContextDeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	s, err := seenset.NewRedis(seenset.RedisOptions{
		Addrs:        []string{l.Addr().String()},
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Claim(ctx, "k", "A", time.Minute)
	took := time.Since(start)
	if !errors.Is(err, seenset.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim against a silent server: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if took > 3*time.Second {
		t.Fatalf("Claim against a silent server took %v; the context deadline was 300ms", took)
	}
	t.Logf("gave up after %v: %v", took.Round(time.Millisecond), err)
}

// A key that holds something the seen-set did not write — another type,
// or a string without our state prefix — is reported as ErrKeyUnusable,
// not ErrUnavailable: the store is fine, and retrying cannot clear it.
// No transition but a commit changes it; a commit records the app's
// success over a foreign string (one SET, no script to refuse it) and
// still reports the key as unusable. Another type is never touched.
func TestRedisForeignValueIsKeyUnusable(t *testing.T) {
	c := sharedRedis(t)
	prefix := randomPrefix(t)
	t.Cleanup(func() { cleanPrefix(t, c, prefix) })
	st := seenset.NewRedisWithClient(c, prefix)
	defer st.Close()
	ctx := context.Background()
	if err := c.HSet(ctx, prefix+"hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, prefix+"foreign", "someone else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want := func(op, key string, err error) {
		t.Helper()
		if !errors.Is(err, seenset.ErrKeyUnusable) || errors.Is(err, seenset.ErrUnavailable) {
			t.Errorf("%s on %s: err = %v, want ErrKeyUnusable and not ErrUnavailable", op, key, err)
		}
	}
	for _, key := range []string{"hash", "foreign"} {
		items := []seenset.KeyToken{{Key: key, Token: "tok"}}
		_, err := st.Claim(ctx, key, "tok", time.Minute)
		want("claim", key, err)
		want("claim many", key, st.ClaimMany(ctx, items, time.Minute)[0].Err)
		want("renew", key, st.Renew(ctx, key, "tok", time.Minute))
		want("release", key, st.Release(ctx, key, "tok"))
		_, err = st.Status(ctx, key)
		want("status", key, err)
	}
	if v, err := c.Get(ctx, prefix+"foreign").Result(); err != nil || v != "someone else's" {
		t.Fatalf("foreign value changed before any commit: %q %v", v, err)
	}
	for _, key := range []string{"hash", "foreign"} {
		want("commit", key, st.Commit(ctx, key, "tok", time.Hour))
	}
	want("commit many", "hash", st.CommitMany(ctx, []seenset.KeyToken{{Key: "hash", Token: "tok"}}, time.Hour)[0])
	if ty, _ := c.Type(ctx, prefix+"hash").Result(); ty != "hash" {
		t.Fatalf("hash key changed type: %s", ty)
	}
	if v, _ := c.Get(ctx, prefix+"foreign").Result(); v != "done:tok" {
		t.Fatalf("foreign string after a commit = %q, want the success recorded", v)
	}
}

// BenchmarkSumDigest is the body digest of a 256-byte envelope. Run it
// with GODEBUG=cpu.sha=off too: callgrind (valgrind 3.19) hides SHA-NI,
// so instruction counts taken under it pay the AVX2 form.
func BenchmarkSumDigest(b *testing.B) {
	body := make([]byte, 256)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = seenset.SumDigest(body)
	}
}
