package redissource_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// streamConsumer runs a StreamSource with settle as its handler.
type streamConsumer struct {
	src    *redissource.StreamSource
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	got    []broker.Message
}

func consumeStream(t *testing.T, o redissource.Options, settle func(broker.Delivery) error) *streamConsumer {
	t.Helper()
	o.Name = "test"
	o.ReconnectInitial, o.ReconnectMax = 50*time.Millisecond, 300*time.Millisecond
	if os.Getenv("DEDUPE_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	src, err := redissource.NewStream(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &streamConsumer{src: src, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- src.Run(ctx, func(d broker.Delivery) {
			c.mu.Lock()
			c.got = append(c.got, *d.Message())
			c.mu.Unlock()
			if err := settle(d); err != nil {
				t.Errorf("settle %q: %v", d.Message().Body, err)
			}
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *streamConsumer) stop(t *testing.T) {
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

func (c *streamConsumer) messages() []broker.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func ack(d broker.Delivery) error { return d.Ack(context.Background()) }

func (q *queue) pending(t *testing.T, group string) int64 {
	t.Helper()
	p, err := q.rdb.XPending(context.Background(), q.name, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// A replica that read entries and died (a consumer of the group that
// never acks nor renews): a live replica takes them over once they were
// idle for claim_idle, not before, marked redelivered.
func TestStreamDeadConsumerTakenOver(t *testing.T) {
	const idle = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ctx := context.Background()
	q.rdb.XGroupCreateMkStream(ctx, q.name, group, "0")
	for i := range 3 {
		q.xadd(t, brokertest.Message{Body: fmt.Appendf(nil, "dead-%d", i), Key: fmt.Sprint("k-", i)})
	}
	if err := q.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "ghost", Streams: []string{q.name, ">"}, Count: 3}).Err(); err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group, ClaimIdle: idle}, ack)
	testutil.Eventually(t, idle+5*time.Second, "taken over", func() bool { return len(c.messages()) == 3 })
	if took := time.Since(read); took < idle {
		t.Errorf("taken over %s after the read, before claim_idle %s", took, idle)
	}
	for _, m := range c.messages() {
		if !m.Redelivered || !strings.HasPrefix(m.MessageID, "k-") || m.Headers[redissource.FieldMessageID] != m.MessageID {
			t.Errorf("%q: redelivered %v MessageID %q headers %v", m.Body, m.Redelivered, m.MessageID, m.Headers)
		}
	}
	testutil.Eventually(t, 5*time.Second, "acked", func() bool { return q.pending(t, group) == 0 })
}

// A live replica holding an entry longer than claim_idle renews it: a
// second replica does not take it.
func TestStreamLiveConsumerKeepsItsEntries(t *testing.T) {
	const idle = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	q.xadd(t, brokertest.Message{Body: []byte("slow")})
	o := redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group, ClaimIdle: idle}
	release, holding := make(chan struct{}), make(chan struct{})
	slow := consumeStream(t, o, func(d broker.Delivery) error { close(holding); <-release; return ack(d) })
	<-holding
	other := consumeStream(t, o, ack)
	time.Sleep(3 * idle)
	if got := other.messages(); len(got) != 0 {
		t.Fatalf("a second replica got %q while the first renewed it", got[0].Body)
	}
	close(release)
	testutil.Eventually(t, 5*time.Second, "acked", func() bool { return q.pending(t, group) == 0 })
	slow.stop(t)
	other.stop(t)
	if len(slow.messages()) != 1 {
		t.Fatalf("the slow replica got %d deliveries, want 1", len(slow.messages()))
	}
}

// The delivery count decides: an entry requeued until its count exceeds
// max_deliveries is dead-lettered (XADD, then XACK) with the reason,
// not handed out again; the body comes from the configured field.
func TestStreamMaxDeliveriesDeadLetters(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ctx := context.Background()
	if err := q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.name, Values: map[string]any{"payload": "poison", "bq-message-id": "p-1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group,
		ClaimIdle: 3 * time.Second, MaxDeliveries: 3, BodyField: "payload", DeadLetter: q.dead},
		func(d broker.Delivery) error { return d.Requeue(context.Background()) })
	testutil.Eventually(t, 20*time.Second, "dead-lettered", func() bool { return q.rdb.XLen(ctx, q.dead).Val() == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := len(c.messages()); n != 3 {
		t.Errorf("handed out %d times, want max_deliveries 3", n)
	}
	for _, m := range c.messages() {
		if string(m.Body) != "poison" {
			t.Errorf("body %q, want the payload field", m.Body)
		}
	}
	dl := q.rdb.XRange(ctx, q.dead, "-", "+").Val()[0].Values
	if dl["payload"] != "poison" || dl[broker.HeaderReason] != "max deliveries" || dl["bq-message-id"] != "p-1" || dl[broker.HeaderOriginalQueue] != q.name {
		t.Errorf("dead letter %v", dl)
	}
	if n := q.pending(t, group); n != 0 {
		t.Errorf("%d pending after the dead letter", n)
	}
}

// Stopping waits for a handler still finishing, renewing its entry
// meanwhile: another replica does not take it over past claim_idle.
func TestStreamStopKeepsRenewingWhileHandlersFinish(t *testing.T) {
	const idle = 3 * time.Second
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	q.xadd(t, brokertest.Message{Body: []byte("finishing")})
	o := redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group, ClaimIdle: idle}
	holding := make(chan struct{})
	slow := consumeStream(t, o, func(d broker.Delivery) error { close(holding); time.Sleep(2 * idle); return ack(d) })
	<-holding
	other := consumeStream(t, o, ack)
	slow.stop(t)
	if got := other.messages(); len(got) != 0 {
		t.Fatalf("another replica took %q over while the stopping one finished it", got[0].Body)
	}
	other.stop(t)
	if n := q.pending(t, group); n != 0 {
		t.Fatalf("%d pending", n)
	}
}

// The group deleted under a running source (an operator's XGROUP
// DESTROY): the source creates it again and goes on consuming.
func TestStreamGroupDeletedIsCreatedAgain(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ctx := context.Background()
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group, ClaimIdle: 3 * time.Second}, ack)
	q.xadd(t, brokertest.Message{Body: []byte("before")})
	testutil.Eventually(t, 10*time.Second, "first", func() bool { return len(c.messages()) == 1 })
	// The handler records a message before it acks it: destroying the
	// group in between would fail that ack, which is not what this tests.
	testutil.Eventually(t, 10*time.Second, "first acked", func() bool {
		p, err := q.rdb.XPending(ctx, q.name, group).Result()
		return err == nil && p.Count == 0
	})
	if err := q.rdb.XGroupDestroy(ctx, q.name, group).Err(); err != nil {
		t.Fatal(err)
	}
	q.xadd(t, brokertest.Message{Body: []byte("after")})
	testutil.Eventually(t, 15*time.Second, "consuming again", func() bool {
		for _, m := range c.messages() {
			if string(m.Body) == "after" {
				return true
			}
		}
		return false
	})
	testutil.Eventually(t, 5*time.Second, "ready", func() bool { return c.src.Ready() == nil })
}

// An entry given back untried (GiveBack: it never reached the app this
// time, its key was busy) costs no delivery: however often, it is never
// dead-lettered "max deliveries", and its delivery count stays that of
// the first read (so it is not marked redelivered either).
func TestStreamGiveBackCostsNoDelivery(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ctx := context.Background()
	if err := q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.name, Values: map[string]any{"body": "waiting"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var given atomic.Int32
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group,
		ClaimIdle: 3 * time.Second, MaxDeliveries: 2, DeadLetter: q.dead},
		func(d broker.Delivery) error {
			if given.Add(1) <= 6 {
				return d.(broker.GiveBacker).GiveBack(context.Background())
			}
			return d.Ack(context.Background())
		})
	testutil.Eventually(t, 20*time.Second, "acked after 6 give-backs", func() bool { return len(c.messages()) == 7 && q.pending(t, group) == 0 })
	if n := q.rdb.XLen(ctx, q.dead).Val(); n != 0 {
		t.Fatalf("%d dead letters after give-backs", n)
	}
	// Never at the app: the app is not told it may have seen it before.
	for i, m := range c.messages() {
		if m.Redelivered {
			t.Errorf("delivery %d marked redelivered", i)
		}
	}
}

// A stopping source waits for a delivery its handler handed on (the
// pipeline holds a busy key off the worker) and keeps renewing it: the
// give-back lands before the session ends, so no other replica takes
// it over after claim_idle with its count raised.
func TestStreamStopWaitsForHandedOnDeliveries(t *testing.T) {
	q := newQueue(t, testutil.RedisAddr())
	group := testutil.UniqueName("dptest-group-")
	ctx := context.Background()
	if err := q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.name, Values: map[string]any{"body": "handed-on"}}).Err(); err != nil {
		t.Fatal(err)
	}
	handedOn := make(chan broker.Delivery, 1)
	c := consumeStream(t, redissource.Options{Addrs: []string{testutil.RedisAddr()}, Stream: q.name, Group: group, ClaimIdle: 3 * time.Second},
		func(d broker.Delivery) error { handedOn <- d; return nil })
	d := <-handedOn
	stopped := make(chan struct{})
	go func() { c.stop(t); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("the source stopped with a delivery handed on and not settled")
	case <-time.After(500 * time.Millisecond):
	}
	if err := d.(broker.GiveBacker).GiveBack(ctx); err != nil {
		t.Fatal(err)
	}
	<-stopped
	p, err := q.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.name, Group: group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].RetryCount != 0 {
		t.Fatalf("pending %v (%v), want the entry with its read undone", p, err)
	}
}
