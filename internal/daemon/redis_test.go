package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// redisHarness is one test's world for a Redis list source: a queue of
// its own (and every key under its hash tag) on the broker's Redis,
// which is the shared server unless the test starts one it may kill.
type redisHarness struct {
	*harness
	rq    *redis.Client
	queue string
	dead  string
}

func newRedisHarness(t *testing.T, brokerAddr string, mutate func(*config.Config)) *redisHarness {
	t.Helper()
	h := &redisHarness{harness: &harness{t: t, app: testutil.NewApp(t)}}
	h.queue = testutil.UniqueName("dptest.redis.")
	h.dead = "{" + h.queue + "}:dead"
	h.rq = redis.NewClient(&redis.Options{Addr: brokerAddr})
	t.Cleanup(func() {
		ctx := context.Background()
		for _, pattern := range []string{h.queue, "{" + h.queue + "}*"} {
			iter := h.rq.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				h.rq.Del(ctx, iter.Val())
			}
		}
		_ = h.rq.Close()
	})
	cfg, src := testConfig(h.app.URL)
	src.Type = "redis"
	r := &src.Redis
	r.Addrs = []string{brokerAddr}
	r.Queue = h.queue
	r.DeadLetter = h.dead
	r.Workers = 4
	r.HeartbeatTTL = 3 * time.Second
	r.ReconnectInitial = 50 * time.Millisecond
	r.ReconnectMax = 300 * time.Millisecond
	h.finish(cfg, src, mutate)
	return h
}

// push is a BabelQueue producer: RPUSH of the envelope's bytes.
func (h *redisHarness) push(elems ...[]byte) {
	h.t.Helper()
	for _, e := range elems {
		if err := h.rq.RPush(context.Background(), h.queue, e).Err(); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *redisHarness) llen(key string) int64 {
	h.t.Helper()
	n, err := h.rq.LLen(context.Background(), key).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// reserved is how many elements the queue's processing lists hold.
func (h *redisHarness) reserved() int64 {
	h.t.Helper()
	ctx := context.Background()
	var n int64
	iter := h.rq.Scan(ctx, 0, "{"+h.queue+"}:processing:*", 1000).Iterator()
	for iter.Next(ctx) {
		n += h.rq.LLen(ctx, iter.Val()).Val()
	}
	return n
}

// newRedisStreamHarness is newRedisHarness for mode stream: the queue's
// name is the stream, the key is bq-message-id, then the envelope's.
func newRedisStreamHarness(t *testing.T, mutate func(*config.Config)) *redisHarness {
	return newRedisHarness(t, testutil.RedisAddr(), func(c *config.Config) {
		s := &c.Sources[0]
		s.Key = []string{"header:bq-message-id", "json:meta.id"}
		s.Redis.Mode, s.Redis.Stream, s.Redis.Queue = "stream", s.Redis.Queue, ""
		s.Redis.ClaimIdle = 3 * time.Second
		if mutate != nil {
			mutate(c)
		}
	})
}

// xadd is a producer of mode stream: the envelope in field body and
// meta.id in bq-message-id, as on Kafka.
func (h *redisHarness) xadd(id string, body []byte) {
	h.t.Helper()
	v := map[string]any{"body": body}
	if id != "" {
		v["bq-message-id"] = id
	}
	if err := h.rq.XAdd(context.Background(), &redis.XAddArgs{Stream: h.queue, Values: v}).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// Every idempotency sequence over mode stream, each delivery XADDed with
// bq-message-id.
func TestRedisStreamBabelQueueIdempotencySequences(t *testing.T) {
	cases := testutil.IdempotencySequences(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			h := newRedisStreamHarness(t, nil)
			p := h.start()
			throws := h.replaySequence(p, c, 15*time.Second, func(i int, id string) {
				h.xadd(id, envelope(id, strconv.Itoa(i)))
			})
			if got := p.result(t, "dead_lettered"); got != float64(throws) {
				t.Fatalf("dead-lettered %v, want %d (one per throw)", got, throws)
			}
			ctx := context.Background()
			if n := h.rq.XLen(ctx, h.dead).Val(); n != int64(throws) {
				t.Fatalf("dead-letter stream holds %d, want %d", n, throws)
			}
			testutil.Eventually(t, 5*time.Second, "nothing pending", func() bool {
				return h.rq.XPending(ctx, h.queue, h.cfg.Consumer).Val().Count == 0
			})
		})
	}
}

// Mode stream forwards the body field byte for byte with its other
// fields as allow-listed headers, keyed by bq-message-id.
func TestRedisStreamForwards(t *testing.T) {
	h := newRedisStreamHarness(t, func(c *config.Config) { c.App.HeaderAllowlist = []string{"x-tenant"} })
	p := h.start()
	env := envelope("env-id", "")
	if err := h.rq.XAdd(context.Background(), &redis.XAddArgs{Stream: h.queue, Values: map[string]any{
		"body": env, "bq-message-id": "hdr-id", "x-tenant": "acme", "content-type": "application/json"}}).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	r := h.app.Requests()[0]
	if !bytes.Equal(r.Body, env) {
		t.Fatalf("app got %q, want the body field byte for byte", r.Body)
	}
	for k, want := range map[string]string{"Idempotency-Key": "hdr-id", "X-Tenant": "acme", "Content-Type": "application/json", "X-Dedupe-Broker": "redis"} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// Every idempotency sequence of BabelQueue's conformance suite over
// BabelQueue's Redis binding: each delivery RPUSHed as the envelope's
// bytes, the handler's outcome played by the app's status (ok → 200,
// throw → 400: dead-lettered, id unmarked), effects = app invocations.
func TestRedisBabelQueueIdempotencySequences(t *testing.T) {
	cases := testutil.IdempotencySequences(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			h := newRedisHarness(t, testutil.RedisAddr(), nil)
			p := h.start()
			throws := h.replaySequence(p, c, 15*time.Second, func(i int, id string) {
				h.push(envelope(id, strconv.Itoa(i)))
			})
			if got := p.result(t, "dead_lettered"); got != float64(throws) {
				t.Fatalf("dead-lettered %v, want %d (one per throw)", got, throws)
			}
			if n := h.llen(h.dead); n != int64(throws) {
				t.Fatalf("dead-letter list holds %d, want %d", n, throws)
			}
			testutil.Eventually(t, 5*time.Second, "nothing left reserved", func() bool { return h.reserved() == 0 })
			if n := h.llen(h.queue); n != 0 {
				t.Fatalf("queue holds %d after every delivery settled", n)
			}
		})
	}
}

// The fixture a BabelQueue producer RPUSHes reaches the app byte for
// byte, keyed by its meta.id, with the source's headers.
func TestRedisForwardsEnvelopeUnchanged(t *testing.T) {
	env, err := os.ReadFile(filepath.Join(testutil.BabelQueueDir(t), "fixtures", "order-created.json"))
	if err != nil {
		t.Fatal(err)
	}
	h := newRedisHarness(t, testutil.RedisAddr(), nil)
	p := h.start()
	h.push(env)
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	r := h.app.Requests()[0]
	if !bytes.Equal(r.Body, env) {
		t.Fatalf("app got %q, want the element byte for byte", r.Body)
	}
	for k, want := range map[string]string{
		"Idempotency-Key": "f1e2d3c4-b5a6-4789-90ab-cdef01234567",
		"X-Dedupe-Broker": "redis",
		"X-Dedupe-Queue":  h.queue,
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// Bad elements: one that is not JSON has no key and is forwarded
// unchanged (fail-open), or dead-lettered with on_missing_key:
// dead_letter; one over max_body_bytes is dead-lettered with its reason
// readable beside the dead-letter list. Nothing is lost or left.
func TestRedisBadInput(t *testing.T) {
	notJSON := []byte("<order id=\"1\"/>")
	big := envelope("big-1", strings.Repeat("x", 2<<10))
	h := newRedisHarness(t, testutil.RedisAddr(), func(c *config.Config) { c.Delivery.MaxBodyBytes = 1 << 10 })
	p := h.start()
	h.push(notJSON, big)
	testutil.Eventually(t, 10*time.Second, "settled", func() bool { return p.settled(t) == 2 })
	if p.result(t, "forwarded") != 1 || p.event(t, "no_key") != 1 || p.event(t, "body_too_large") != 1 {
		t.Fatalf("forwarded %v no_key %v body_too_large %v, want 1 each", p.result(t, "forwarded"), p.event(t, "no_key"), p.event(t, "body_too_large"))
	}
	if rs := h.app.Requests(); len(rs) != 1 || !bytes.Equal(rs[0].Body, notJSON) {
		t.Fatalf("app got %d requests, want the non-JSON element unchanged", len(rs))
	}
	dl, err := h.rq.LRange(context.Background(), h.dead, 0, -1).Result()
	if err != nil || len(dl) != 1 || dl[0] != string(big) {
		t.Fatalf("dead-letter list %d elements (%v), want the oversized one", len(dl), err)
	}
	why, err := redissource.DeadLetterReason(context.Background(), h.rq, h.dead, big)
	if err != nil || why[broker.HeaderReason] != "body too large" || why[broker.HeaderSource] != "orders" {
		t.Fatalf("reason record %v (%v)", why, err)
	}
	p.stop(t)

	// The same non-JSON element under on_missing_key: dead_letter.
	h2 := newRedisHarness(t, testutil.RedisAddr(), func(c *config.Config) { c.Sources[0].OnMissingKey = "dead_letter" })
	h2.start()
	h2.push(notJSON)
	testutil.Eventually(t, 10*time.Second, "dead-lettered", func() bool { return h2.llen(h2.dead) == 1 })
	if h2.app.Count() != 0 {
		t.Fatal("forwarded a message with no key under on_missing_key: dead_letter")
	}
	why, _ = redissource.DeadLetterReason(context.Background(), h2.rq, h2.dead, notJSON)
	if !strings.HasPrefix(why[broker.HeaderReason], "no key") {
		t.Fatalf("reason record %v", why)
	}
	for _, x := range []*redisHarness{h, h2} {
		if n, r := x.llen(x.queue), x.reserved(); n != 0 || r != 0 {
			t.Fatalf("queue %d reserved %d left", n, r)
		}
	}
}

// The queue key holding a string (WRONGTYPE): /readyz names the key
// and the problem, the key is left alone, and consuming resumes once the
// operator fixed it.
func TestRedisWrongTypeOnReadyz(t *testing.T) {
	h := newRedisHarness(t, testutil.RedisAddr(), nil)
	ctx := context.Background()
	h.rq.Set(ctx, h.queue, "oops", 0)
	d, err := New(&h.cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon.Run: %v", err)
		}
	}()
	var ready error
	testutil.Eventually(t, 10*time.Second, "readyz names the wrong type", func() bool {
		ready = d.Ready(ctx)
		return ready != nil && strings.Contains(ready.Error(), "not a list")
	})
	if !strings.Contains(ready.Error(), "source orders") || !strings.Contains(ready.Error(), h.queue) {
		t.Errorf("Ready = %q: want the source and the key", ready)
	}
	if v := h.rq.Get(ctx, h.queue).Val(); v != "oops" {
		t.Fatalf("the key holds %q: it must be left alone", v)
	}
	h.rq.Del(ctx, h.queue)
	h.push(envelope("after-fix", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded after the fix", func() bool { return h.app.Count() == 1 })
	testutil.Eventually(t, 5*time.Second, "ready", func() bool { return d.Ready(ctx) == nil })
}

// The broker's Redis killed mid-stream and restarted from its append
// only file, in both modes: /readyz says the source is not connected,
// and why; after the restart every message has had exactly one effect
// and nothing is left in the queue, reserved or pending.
func TestRedisBrokerRestart(t *testing.T) {
	for _, mode := range []string{"list", "stream"} {
		t.Run(mode, func(t *testing.T) { t.Parallel(); redisBrokerRestart(t, mode) })
	}
}

func redisBrokerRestart(t *testing.T, mode string) {
	srv := testutil.StartRedisPersistent(t)
	h := newRedisHarness(t, srv.Addr(), func(c *config.Config) {
		if mode == "stream" {
			s := &c.Sources[0]
			s.Key = []string{"header:bq-message-id", "json:meta.id"}
			s.Redis.Mode, s.Redis.Stream, s.Redis.Queue = "stream", s.Redis.Queue, ""
			s.Redis.ClaimIdle = 3 * time.Second
		}
	})
	h.app.SetRespond(func(*testutil.Request, int) int { time.Sleep(20 * time.Millisecond); return 200 })
	p := h.start()
	const n = 200
	for i := range n {
		id := fmt.Sprintf("restart-%03d", i)
		if mode == "stream" {
			h.xadd(id, envelope(id, ""))
		} else {
			h.push(envelope(id, ""))
		}
	}
	testutil.Eventually(t, 10*time.Second, "consuming", func() bool { return h.app.Count() >= 10 })
	srv.Kill()
	var ready error
	testutil.Eventually(t, 10*time.Second, "readyz names the broker", func() bool {
		ready = p.d.Ready(context.Background())
		return ready != nil && strings.Contains(ready.Error(), "source orders")
	})
	if want := "not connected to redis " + map[string]string{"list": "queue", "stream": "stream"}[mode]; !strings.Contains(ready.Error(), want) {
		t.Errorf("Ready = %q: want a line saying %q", ready, want)
	}
	if h.app.Count() >= n {
		t.Fatal("every message went through before the kill: the case needs some left")
	}
	time.Sleep(time.Second)
	srv.Restart()
	// Stream entries in hand at the kill are taken over after claim_idle.
	testutil.Eventually(t, 60*time.Second, "every message effected", func() bool { return len(h.app.Effects()) == n })
	testutil.Eventually(t, 10*time.Second, "ready again", func() bool { return p.d.Ready(context.Background()) == nil })
	testutil.Eventually(t, 10*time.Second, "nothing left", func() bool {
		if mode == "stream" {
			return h.rq.XPending(context.Background(), h.queue, h.cfg.Consumer).Val().Count == 0
		}
		return h.llen(h.queue) == 0 && h.reserved() == 0
	})
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("%s effected %d times", k, c)
		}
	}
}

// A stream key holding another type: /readyz names the stream and the
// problem; the key is left alone.
func TestRedisStreamWrongTypeOnReadyz(t *testing.T) {
	h := newRedisStreamHarness(t, nil)
	ctx := context.Background()
	h.rq.RPush(ctx, h.queue, "a list")
	d, err := New(&h.cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon.Run: %v", err)
		}
	}()
	var ready error
	testutil.Eventually(t, 10*time.Second, "readyz names the wrong type", func() bool {
		ready = d.Ready(ctx)
		return ready != nil && strings.Contains(ready.Error(), "is not a stream")
	})
	if !strings.Contains(ready.Error(), "source orders") || !strings.Contains(ready.Error(), h.queue) {
		t.Errorf("Ready = %q: want the source and the key", ready)
	}
	if v := h.rq.LRange(ctx, h.queue, 0, -1).Val(); len(v) != 1 || v[0] != "a list" {
		t.Fatalf("the key holds %q: it must be left alone", v)
	}
}

// Mode stream, bad entries: a non-JSON body without bq-message-id is
// forwarded unchanged (fail-open); a body over max_body_bytes is
// dead-lettered to the dead-letter stream with its reason.
func TestRedisStreamBadInput(t *testing.T) {
	notJSON := []byte("<order id=\"1\"/>")
	big := envelope("big-1", strings.Repeat("x", 2<<10))
	h := newRedisStreamHarness(t, func(c *config.Config) { c.Delivery.MaxBodyBytes = 1 << 10 })
	p := h.start()
	h.xadd("", notJSON)
	h.xadd("big-1", big)
	testutil.Eventually(t, 10*time.Second, "settled", func() bool { return p.settled(t) == 2 })
	if rs := h.app.Requests(); len(rs) != 1 || !bytes.Equal(rs[0].Body, notJSON) {
		t.Fatalf("app got %d requests, want the non-JSON body unchanged", len(rs))
	}
	dl := h.rq.XRange(context.Background(), h.dead, "-", "+").Val()
	if len(dl) != 1 || dl[0].Values["body"] != string(big) || dl[0].Values[broker.HeaderReason] != "body too large" {
		t.Fatalf("dead-letter stream %d entries, want the oversized one with its reason", len(dl))
	}
	testutil.Eventually(t, 5*time.Second, "nothing pending", func() bool {
		return h.rq.XPending(context.Background(), h.queue, h.cfg.Consumer).Val().Count == 0
	})
}

// Mode stream, an entry without the body field: its data is in fields
// the app would not see, so it is never forwarded (an empty POST that the
// app answers 2xx would mark its key done); it is dead-lettered with its
// fields and the reason, or, without a dead letter, stays pending.
func TestRedisStreamEntryWithoutBodyField(t *testing.T) {
	entry := map[string]any{"payload": string(envelope("nobody-1", "")), "bq-message-id": "nobody-1"}
	h := newRedisStreamHarness(t, nil)
	p := h.start()
	if err := h.rq.XAdd(context.Background(), &redis.XAddArgs{Stream: h.queue, Values: entry}).Err(); err != nil {
		t.Fatal(err)
	}
	h.xadd("ok-1", envelope("ok-1", "")) // the entries around it go on
	testutil.Eventually(t, 10*time.Second, "settled", func() bool { return p.settled(t) == 2 })
	if rs := h.app.Requests(); len(rs) != 1 || rs[0].Key != "ok-1" {
		t.Fatalf("app got %d requests, want only ok-1's", len(rs))
	}
	dl := h.rq.XRange(context.Background(), h.dead, "-", "+").Val()
	if len(dl) != 1 || dl[0].Values["payload"] != entry["payload"] ||
		dl[0].Values[broker.HeaderReason] != `unforwardable: no "body" field (body_field)` {
		t.Fatalf("dead-letter stream = %v, want the entry with its fields and reason", dl)
	}
	if got := p.event(t, "unforwardable"); got != 1 {
		t.Fatalf("unforwardable events = %v, want 1", got)
	}

	// No dead letter: given back, never forwarded, never acked.
	h2 := newRedisStreamHarness(t, func(c *config.Config) {
		c.Sources[0].Redis.DeadLetter = ""
		c.Delivery.BackoffInitial = 50 * time.Millisecond
	})
	p2 := h2.start()
	if err := h2.rq.XAdd(context.Background(), &redis.XAddArgs{Stream: h2.queue, Values: entry}).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "given back", func() bool { return p2.result(t, "requeued") >= 1 })
	if n := h2.app.Count(); n != 0 {
		t.Fatalf("app got %d requests for an entry without its body field", n)
	}
	if c := h2.rq.XPending(context.Background(), h2.queue, h2.cfg.Consumer).Val().Count; c != 1 {
		t.Fatalf("%d entries pending, want the one given back", c)
	}
}

// A replica that died holding messages (registered, its heartbeat gone):
// the proxy gives them back and forwards them, and the metrics say so.
func TestRedisDeadReplicaReclaimedMetrics(t *testing.T) {
	h := newRedisHarness(t, testutil.RedisAddr(), nil)
	ctx := context.Background()
	tag := "{" + h.queue + "}"
	h.rq.LPush(ctx, tag+":processing:ghost", envelope("ghost-1", ""), envelope("ghost-2", ""))
	h.rq.SAdd(ctx, tag+":replicas", "ghost")
	h.push(envelope("live-1", ""))
	p := h.start()
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 3 })
	if got := p.gauge(t, "dedupe_proxy_redis_reclaimed_total"); got != 2 {
		t.Errorf("reclaimed = %v, want 2", got)
	}
	for _, r := range h.app.Requests() {
		if want := strings.HasPrefix(r.Key, "ghost-"); (r.Header.Get("X-Dedupe-Redelivered") == "true") != want {
			t.Errorf("%s: X-Dedupe-Redelivered %q", r.Key, r.Header.Get("X-Dedupe-Redelivered"))
		}
	}
	// Read at every heartbeat (a third of 3s).
	testutil.Eventually(t, 5*time.Second, "gauges", func() bool {
		return p.gauge(t, "dedupe_proxy_redis_queue_length") == 0 && p.gauge(t, "dedupe_proxy_redis_processing_length") == 0
	})
}
