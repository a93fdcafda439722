package redissource_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// consumer runs a source whose handler acks everything and records it.
type consumer struct {
	src    *redissource.Source
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	got    []broker.Message
}

func consume(t *testing.T, o redissource.Options) *consumer {
	t.Helper()
	return consumeWith(t, o, func(d broker.Delivery) error { return d.Ack(context.Background()) })
}

func consumeWith(t *testing.T, o redissource.Options, settle func(broker.Delivery) error) *consumer {
	t.Helper()
	if o.Name == "" {
		o.Name = "test"
	}
	if os.Getenv("DEDUPE_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.ReconnectInitial == 0 {
		o.ReconnectInitial, o.ReconnectMax = 50*time.Millisecond, 300*time.Millisecond
	}
	src, err := redissource.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{src: src, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- src.Run(ctx, func(d broker.Delivery) {
			if err := settle(d); err != nil {
				t.Errorf("settle %q: %v", d.Message().Body, err)
			}
			c.mu.Lock()
			c.got = append(c.got, *d.Message())
			c.mu.Unlock()
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *consumer) stop(t *testing.T) {
	t.Helper()
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel")
	}
	_ = c.src.Close()
}

func (c *consumer) messages() []broker.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *consumer) bodies() []string {
	var out []string
	for _, m := range c.messages() {
		out = append(out, string(m.Body))
	}
	slices.Sort(out)
	return out
}

func numbered(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s-%02d", prefix, i)
	}
	return out
}

func sortedStrings(bs [][]byte) []string {
	var out []string
	for _, b := range bs {
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// BabelQueue's redis.payload_identity: the element a producer RPUSHed
// reaches the handler byte for byte, no wrapping, nothing added.
func TestPayloadIdentity(t *testing.T) {
	env, err := os.ReadFile(filepath.Join(testutil.BabelQueueDir(t), "fixtures", "order-created.json"))
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, testutil.RedisAddr())
	q.push(t, env)
	c := consume(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name})
	testutil.Eventually(t, 10*time.Second, "delivered", func() bool { return len(c.messages()) == 1 })
	m := c.messages()[0]
	if !bytes.Equal(m.Body, env) {
		t.Fatalf("body %q, want the fixture byte for byte %q", m.Body, env)
	}
	if m.Kind != "redis" || m.Queue != q.name || m.ContentType != "" || m.Headers != nil || m.Redelivered {
		t.Fatalf("message %+v: want kind redis, queue %q, nothing invented", m, q.name)
	}
}

// A replica SIGKILLed while it holds reserved messages: a live replica
// gives them back to the head of the queue within the heartbeat TTL and
// one scan (a third of it), marked redelivered, before the messages
// published after them; the dead replica is forgotten.
func TestKilledReplicaMessagesBackInQueue(t *testing.T) {
	const ttl = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	held := numbered("held", 3)
	q.push(t, held...)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "REDISQ_HOLD=1", "REDISQ_ADDRS="+testutil.RedisAddr(), "REDISQ_QUEUE="+q.name, "REDISQ_TTL="+ttl.String())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewScanner(out)
	var replica string
	var got []string
	for len(got) < len(held) && lines.Scan() {
		if id, ok := strings.CutPrefix(lines.Text(), "replica "); ok {
			replica = id
		} else if b, ok := strings.CutPrefix(lines.Text(), "held "); ok {
			got = append(got, b)
		}
	}
	if len(got) != len(held) {
		t.Fatalf("the replica held %q, want all of %q", got, held)
	}
	proc := "{" + q.name + "}:processing:" + replica
	if n := q.llen(t, proc); n != int64(len(held)) {
		t.Fatalf("%s holds %d, want %d", proc, n, len(held))
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()
	later := numbered("later", 2)
	q.push(t, later...)

	// One worker, busy with the first of the later messages until the
	// dead replica's are back in the queue: they must be at its head.
	first := true
	c := consumeWith(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, HeartbeatTTL: ttl, Workers: 1},
		func(d broker.Delivery) error {
			if first {
				first = false
				deadline := time.Now().Add(2 * ttl)
				for q.llen(t, q.name) < int64(len(held)+1) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
			}
			return d.Ack(context.Background())
		})
	// TTL, plus one scan a third of it later, plus the one-second
	// granularity of the scan's wait.
	bound := ttl + ttl/3 + 1500*time.Millisecond
	testutil.Eventually(t, bound+5*time.Second, "every message delivered", func() bool { return len(c.messages()) == len(held)+len(later) })
	if took := time.Since(killed); took > bound {
		t.Errorf("the dead replica's messages came back %s after the kill, want within %s", took, bound)
	}
	var order []string
	for _, m := range c.messages() {
		order = append(order, fmt.Sprintf("%s:%v", m.Body, m.Redelivered))
	}
	want := []string{"later-00:false", "held-00:true", "held-01:true", "held-02:true", "later-01:false"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("deliveries %v, want %v: the dead replica's messages at the head of the queue, in reservation order, marked redelivered", order, want)
	}
	if n := q.llen(t, proc); n != 0 {
		t.Errorf("the dead replica's list still holds %d", n)
	}
	if ok, _ := q.rdb.SIsMember(context.Background(), "{"+q.name+"}:replicas", replica).Result(); ok {
		t.Error("the dead replica is still registered")
	}
}

// A live replica's processing list is left alone, however long it
// holds a message.
func TestLiveReplicaKeepsItsMessages(t *testing.T) {
	const ttl = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	q.push(t, []byte("slow"))
	release, holding := make(chan struct{}), make(chan struct{})
	slow := consumeWith(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, HeartbeatTTL: ttl},
		func(d broker.Delivery) error { close(holding); <-release; return d.Ack(context.Background()) })
	<-holding
	other := consume(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, HeartbeatTTL: ttl})
	time.Sleep(2 * ttl)
	if got := other.bodies(); len(got) != 0 {
		t.Fatalf("a second replica got %q while the first was holding it", got)
	}
	close(release)
	testutil.Eventually(t, 5*time.Second, "acked", func() bool { return len(slow.messages()) == 1 })
	slow.stop(t)
	other.stop(t)
	if n := q.llen(t, q.name); n != 0 {
		t.Fatalf("queue holds %d after the ack", n)
	}
}

// BabelQueue's own Go runtime leaves reserved messages in the shared
// "<queue>:processing" list; they are taken back to the queue only when
// the setting says so.
func TestBabelQueueProcessingOnlyWhenAsked(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	shared := q.name + ":processing"
	left := numbered("babelqueue", 3)
	for _, e := range left {
		if err := q.rdb.RPush(context.Background(), shared, e).Err(); err != nil {
			t.Fatal(err)
		}
	}
	o := redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name}
	c := consume(t, o)
	time.Sleep(1500 * time.Millisecond)
	c.stop(t)
	if got := c.bodies(); len(got) != 0 {
		t.Fatalf("took %q from %s without take_babelqueue_processing", got, shared)
	}
	if n := q.llen(t, shared); n != 3 {
		t.Fatalf("%s holds %d, want 3 untouched", shared, n)
	}
	o.TakeBabelQueueProcessing = true
	c = consume(t, o)
	testutil.Eventually(t, 10*time.Second, "taken", func() bool { return len(c.messages()) == 3 })
	if got, want := c.bodies(), sortedStrings(left); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if n := q.llen(t, shared); n != 0 {
		t.Fatalf("%s still holds %d", shared, n)
	}
}

// A queue key holding another type: Ready says so, with the key, the
// key is not touched, and consuming resumes once it is a list.
func TestWrongTypeQueue(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	ctx := context.Background()
	if err := q.rdb.Set(ctx, q.name, "not a list", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c := consume(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name})
	var ready error
	testutil.Eventually(t, 10*time.Second, "Ready reports the wrong type", func() bool {
		ready = c.src.Ready()
		return errors.Is(ready, redissource.ErrWrongType)
	})
	if !strings.Contains(ready.Error(), q.name) || !strings.Contains(ready.Error(), "not a list") {
		t.Errorf("Ready = %q: want the key and what is wrong", ready)
	}
	if v, err := q.rdb.Get(ctx, q.name).Result(); err != nil || v != "not a list" {
		t.Fatalf("the key now holds %q (%v): it must be left alone", v, err)
	}
	// The operator moves the value away and the producers' list appears.
	if err := q.rdb.Del(ctx, q.name).Err(); err != nil {
		t.Fatal(err)
	}
	q.push(t, []byte("after"))
	testutil.Eventually(t, 10*time.Second, "delivered once the key is a list", func() bool { return len(c.messages()) == 1 })
	testutil.Eventually(t, 5*time.Second, "ready again", func() bool { return c.src.Ready() == nil })
}

// The broker's Redis killed mid-stream and restarted (with its append
// only file, as a production queue would run): Ready names the failure
// while it is down, and every message is delivered after the restart —
// the ones reserved when it died included — and none is left.
func TestRedisRestartLosesNothing(t *testing.T) {
	srv := testutil.StartRedisPersistent(t)
	q := newQueue(t, srv.Addr())
	msgs := numbered("restart", 100)
	q.push(t, msgs...)
	var mu sync.Mutex
	acked := map[string]bool{}
	ackErrs := map[string][]string{} // why each failed ack failed, for the failure message
	c := consumeWith(t, redissource.Options{Addrs: []string{srv.Addr()}, Queue: q.name, Workers: 4, HeartbeatTTL: 3 * time.Second},
		func(d broker.Delivery) error {
			time.Sleep(50 * time.Millisecond)
			if err := d.Ack(context.Background()); err != nil {
				mu.Lock()
				ackErrs[string(d.Message().Body)] = append(ackErrs[string(d.Message().Body)], err.Error())
				mu.Unlock()
				return nil // the server went away: the element stays reserved and is given back
			}
			mu.Lock()
			acked[string(d.Message().Body)] = true
			mu.Unlock()
			return nil
		})
	testutil.Eventually(t, 10*time.Second, "consuming", func() bool { return len(c.messages()) >= 5 })
	srv.Kill()
	mu.Lock()
	if len(acked) == len(msgs) {
		t.Fatal("every message acked before the kill: the case needs some left")
	}
	mu.Unlock()
	var ready error
	testutil.Eventually(t, 10*time.Second, "not ready while Redis is down", func() bool { ready = c.src.Ready(); return ready != nil })
	if !errors.Is(ready, broker.ErrNotConnected) || !strings.Contains(ready.Error(), q.name) {
		t.Errorf("Ready = %v: want not connected, naming the queue", ready)
	}
	time.Sleep(time.Second)
	srv.Restart()
	// where says which lists hold each element now.
	where := func() map[string][]string {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		lists, _ := rdb.Keys(context.Background(), "*").Result()
		in := map[string][]string{}
		for _, l := range lists {
			if vs, err := rdb.LRange(context.Background(), l, 0, -1).Result(); err == nil {
				for _, v := range vs {
					in[v] = append(in[v], l)
				}
			}
		}
		return in
	}
	// A failed ack is not always an ack that did not happen: with fsync
	// always, Redis applies the LREM and writes it to disk before it
	// replies, so a kill in between loses only the reply ("EOF"). Such a
	// message is settled, not lost, if the append-only file holds its
	// LREM and no list holds it; anything else must be acked after the
	// restart.
	logged := map[string]bool{}
	unsettled := func() []string {
		mu.Lock()
		var open []string
		for _, m := range msgs {
			if !acked[string(m)] {
				open = append(open, string(m))
			}
		}
		failed := maps.Clone(ackErrs)
		mu.Unlock()
		if len(open) == 0 {
			return nil
		}
		written, err := srv.Written()
		if err != nil {
			t.Fatal(err)
		}
		removed := map[string]bool{}
		for _, cmd := range written {
			if len(cmd) == 4 && strings.EqualFold(cmd[0], "LREM") {
				removed[cmd[3]] = true
			}
		}
		in := where()
		return slices.DeleteFunc(open, func(m string) bool {
			applied := len(failed[m]) > 0 && removed[m] && len(in[m]) == 0
			if applied && !logged[m] {
				logged[m] = true
				t.Logf("%s: the ack failed (%q) but Redis had applied it: settled, reply lost", m, failed[m])
			}
			return applied
		})
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		open := unsettled()
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			// Say where each message that was never acked is, so that a
			// failure names its cause.
			in := where()
			delivered := map[string]int{}
			for _, m := range c.messages() {
				delivered[string(m.Body)]++
			}
			mu.Lock()
			var missing []string
			for _, m := range open {
				missing = append(missing, fmt.Sprintf("%s: delivered %d time(s), failed acks %q, in lists %v",
					m, delivered[m], ackErrs[m], in[m]))
			}
			mu.Unlock()
			t.Fatalf("timed out after 30s waiting for every message acked; %d not:\n%s", len(missing), strings.Join(missing, "\n"))
		}
	}
	testutil.Eventually(t, 10*time.Second, "ready again", func() bool { return c.src.Ready() == nil })
	c.stop(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "*processing*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n := rdb.LLen(context.Background(), k).Val(); n != 0 {
			t.Errorf("%s holds %d after every message was acked", k, n)
		}
	}
	if n := rdb.LLen(context.Background(), q.name).Val(); n != 0 {
		t.Errorf("queue holds %d after every message was acked", n)
	}
}

// Dead-lettering moves the element and records why, readable by an
// operator under the element's digest in "<dead list>:reasons".
func TestDeadLetterReasonReadable(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	q.push(t, []byte(`{"meta":{"id":"bad-1"}}`))
	c := consumeWith(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, DeadLetter: q.dead},
		func(d broker.Delivery) error {
			return d.DeadLetter(context.Background(), broker.DeadLetterInfo{Reason: "permanent: status 422", LastStatus: 422, Attempts: 1})
		})
	testutil.Eventually(t, 10*time.Second, "dead-lettered", func() bool { return q.llen(t, q.dead) == 1 })
	c.stop(t)
	ctx := context.Background()
	elem, _ := q.rdb.LIndex(ctx, q.dead, 0).Bytes()
	raw, err := q.rdb.HGetAll(ctx, q.dead+":reasons").Result()
	if err != nil || len(raw) != 1 {
		t.Fatalf("reasons hash %v (%v), want one record", raw, err)
	}
	var why map[string]string
	for _, v := range raw {
		_ = json.Unmarshal([]byte(v), &why)
	}
	if why[broker.HeaderReason] != "permanent: status 422" || why[broker.HeaderLastStatus] != "422" || why[broker.HeaderOriginalQueue] != q.name {
		t.Fatalf("reason record %v", why)
	}
	if got, _ := redissource.DeadLetterReason(ctx, q.rdb, q.dead, elem); got[broker.HeaderReason] != why[broker.HeaderReason] {
		t.Fatalf("DeadLetterReason = %v", got)
	}
	if n := q.llen(t, q.name); n != 0 {
		t.Fatalf("queue holds %d", n)
	}
}

// A dead-letter list outside the queue's hash tag is refused: on
// Cluster it would be in another slot, out of the settle script's reach.
func TestDeadLetterMustShareHashTag(t *testing.T) {
	_, err := redissource.New(redissource.Options{Addrs: []string{"127.0.0.1:1"}, Queue: "orders", DeadLetter: "orders.dead"})
	if err == nil || !strings.Contains(err.Error(), "{orders}") {
		t.Fatalf("New = %v, want a refusal naming the hash tag {orders}", err)
	}
	for _, ok := range []struct{ queue, dead string }{{"orders", "{orders}:dead"}, {"{jobs}.high", "{jobs}:dead"}} {
		s, err := redissource.New(redissource.Options{Addrs: []string{"127.0.0.1:1"}, Queue: ok.queue, DeadLetter: ok.dead})
		if err != nil {
			t.Errorf("queue %q dead %q: %v", ok.queue, ok.dead, err)
			continue
		}
		_ = s.Close()
	}
}

// Stopping waits for a handler still finishing, and the heartbeat goes
// on meanwhile: another replica does not take the element it holds,
// however long past the TTL the handler takes.
func TestStopKeepsHeartbeatWhileHandlersFinish(t *testing.T) {
	const ttl = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	q.push(t, []byte("finishing"))
	holding := make(chan struct{})
	slow := consumeWith(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, HeartbeatTTL: ttl},
		func(d broker.Delivery) error {
			close(holding)
			time.Sleep(2 * ttl)
			return d.Ack(context.Background())
		})
	<-holding
	other := consume(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Queue: q.name, HeartbeatTTL: ttl})
	slow.stop(t) // returns once the handler acked
	if got := other.bodies(); len(got) != 0 {
		t.Fatalf("another replica got %q while the stopping one finished it", got)
	}
	other.stop(t)
	if n := q.llen(t, q.name); n != 0 {
		t.Fatalf("queue holds %d", n)
	}
}
