package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

var groupSeq atomic.Int64

func options(c *kafkatest.Cluster, topic string) kafka.Options {
	return kafka.Options{
		Name:              "orders",
		Brokers:           c.Addrs,
		Topics:            []string{topic},
		Group:             fmt.Sprintf("g%d-%d", time.Now().UnixNano(), groupSeq.Add(1)),
		CommitInterval:    100 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  10 * time.Second,
		RetryBackoff:      50 * time.Millisecond,
		RetryBackoffMax:   500 * time.Millisecond,
		Metrics:           metrics.New(nil).ForSource("orders", "kafka"),
		Logger:            debugLogger(),
	}
}

type running struct {
	s      *kafka.Source
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, o kafka.Options, h broker.Handler) *running {
	t.Helper()
	return startWith(t, o, func(ctx context.Context, s *kafka.Source) error { return s.Run(ctx, h) })
}

func startBatches(t *testing.T, o kafka.Options, h broker.BatchHandler) *running {
	t.Helper()
	return startWith(t, o, func(ctx context.Context, s *kafka.Source) error { return s.RunBatches(ctx, h) })
}

func startWith(t *testing.T, o kafka.Options, run func(context.Context, *kafka.Source) error) *running {
	t.Helper()
	s, err := kafka.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, s) }()
	t.Cleanup(func() { r.stop(t) })
	testutil.Eventually(t, 15*time.Second, "source ready", func() bool { return s.Ready() == nil })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancel")
	}
	_ = r.s.Close()
}

func records(partitions, perPartition int) []kafkatest.Record {
	var recs []kafkatest.Record
	for i := range perPartition {
		for p := range partitions {
			recs = append(recs, kafkatest.Record{
				Partition: p,
				Key:       []byte(fmt.Sprintf("k%d", i%5)),
				Value:     []byte(fmt.Sprintf(`{"meta":{"id":"p%d-%d"}}`, p, i)),
				Headers: []kgo.RecordHeader{
					{Key: "content-type", Value: []byte("application/json")},
					{Key: "bq-message-id", Value: []byte(fmt.Sprintf("p%d-%d", p, i))},
				},
			})
		}
	}
	return recs
}

func allCommitted(t testing.TB, c *kafkatest.Cluster, group, topic string, want map[int]int64) func() bool {
	return func() bool {
		got := c.Committed(t, group, topic, len(want))
		for p, w := range want {
			if got[p] != w {
				return false
			}
		}
		return true
	}
}

func uniform(n int, off int64) map[int]int64 {
	m := map[int]int64{}
	for p := range n {
		m[p] = off
	}
	return m
}

// collector acks every delivery and records it.
type collector struct {
	mu   sync.Mutex
	seen map[string]int // "p/offset" → deliveries
	msgs []broker.Message
}

func (c *collector) handle(d broker.Delivery) {
	m := *d.Message()
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[fmt.Sprintf("%d/%d", m.Partition, m.Offset)]++
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	if err := d.Ack(context.Background()); err != nil {
		panic(err)
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func TestConsumeAllPartitionsAndCommit(t *testing.T) {
	c := kafkatest.Start(t, 6, []string{"orders"})
	c.Produce(t, "orders", records(6, 10)...)
	o := options(c, "orders")
	var col collector
	start(t, o, col.handle)
	testutil.Eventually(t, 20*time.Second, "all 60 delivered", func() bool { return col.count() == 60 })
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(6, 10)))

	col.mu.Lock()
	defer col.mu.Unlock()
	for k, n := range col.seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", k, n)
		}
	}
	m := col.msgs[0]
	if m.Kind != "kafka" || m.Source != "orders" || m.Topic != "orders" || m.ContentType != "application/json" ||
		m.Headers["bq-message-id"] == "" || len(m.RecordKey) == 0 || string(m.Body) == "" || m.Received.IsZero() {
		t.Fatalf("message fields: %+v", m)
	}
	if want := fmt.Sprintf(`{"meta":{"id":"p%d-%d"}}`, m.Partition, m.Offset); string(m.Body) != want {
		t.Fatalf("body %q at %d/%d, want %q", m.Body, m.Partition, m.Offset, want)
	}
}

// Default ordering: one partition's messages reach the handler one at a
// time and in offset order, while partitions run in parallel.
func TestPartitionOrdering(t *testing.T) {
	c := kafkatest.Start(t, 3, []string{"orders"})
	c.Produce(t, "orders", records(3, 30)...)
	o := options(c, "orders")
	var mu sync.Mutex
	last := map[int]int64{0: -1, 1: -1, 2: -1}
	busy := map[int]bool{}
	inflight, peak := 0, 0
	var bad []string
	n := 0
	start(t, o, func(d broker.Delivery) {
		m := d.Message()
		mu.Lock()
		if busy[m.Partition] {
			bad = append(bad, fmt.Sprintf("partition %d: two messages at once", m.Partition))
		}
		if m.Offset != last[m.Partition]+1 {
			bad = append(bad, fmt.Sprintf("partition %d: offset %d after %d", m.Partition, m.Offset, last[m.Partition]))
		}
		busy[m.Partition], last[m.Partition] = true, m.Offset
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		busy[m.Partition] = false
		inflight--
		n++
		mu.Unlock()
		_ = d.Ack(context.Background())
	})
	testutil.Eventually(t, 20*time.Second, "all delivered", func() bool { mu.Lock(); defer mu.Unlock(); return n == 90 })
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("order broken: %v", bad)
	}
	if peak < 2 {
		t.Errorf("partitions never ran in parallel (peak %d)", peak)
	}
}

// Key ordering: different record keys of one partition overlap, one key's
// messages never do and stay in offset order, keyless messages are
// ordered by their OrderKey (the daemon's dedupe key), and the commit
// never passes a slow message.
func TestKeyOrdering(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	var recs []kafkatest.Record
	for i := range 40 {
		var key []byte
		if i%5 != 4 {
			key = []byte("k" + strconv.Itoa(i%5))
		}
		recs = append(recs, kafkatest.Record{Key: key, Value: []byte(strconv.Itoa(i))})
	}
	c.Produce(t, "orders", recs...)
	o := options(c, "orders")
	o.Ordering = kafka.OrderingKey
	o.MaxInFlight = 16
	// Keyless values 4, 9, 14, …: two dedupe keys, odd and even.
	o.OrderKey = func(m *broker.Message) string {
		n, _ := strconv.Atoi(string(m.Body))
		return "parity" + strconv.Itoa(n%2)
	}
	var mu sync.Mutex
	busy := map[string]bool{}
	last := map[string]int64{}
	inflight, peak, n := 0, 0, 0
	var bad []string
	start(t, o, func(d broker.Delivery) {
		m := d.Message()
		k := string(m.RecordKey)
		if k == "" {
			k = "dedupe key " + o.OrderKey(m)
		}
		mu.Lock()
		if busy[k] {
			bad = append(bad, fmt.Sprintf("key %q: two at once", k))
		}
		if l, ok := last[k]; ok && m.Offset <= l {
			bad = append(bad, fmt.Sprintf("key %q: offset %d after %d", k, m.Offset, l))
		}
		busy[k], last[k] = true, m.Offset
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		busy[k] = false
		inflight--
		n++
		mu.Unlock()
		_ = d.Ack(context.Background())
	})
	testutil.Eventually(t, 20*time.Second, "all delivered", func() bool { mu.Lock(); defer mu.Unlock(); return n == 40 })
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 40)))
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("key order broken: %v", bad)
	}
	if peak < 2 {
		t.Fatalf("different keys never overlapped (peak %d)", peak)
	}
}

// In key mode, a message that does not finish holds the commit at its
// offset while later messages of other keys finish; read_ahead stops
// reading further; once it finishes the commit jumps past everything.
func TestCommitNeverPassesUnfinished(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	var recs []kafkatest.Record
	for i := range 30 {
		recs = append(recs, kafkatest.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	c.Produce(t, "orders", recs...)
	o := options(c, "orders")
	o.Ordering = kafka.OrderingKey
	o.ReadAhead = 10
	release := make(chan struct{})
	var handled atomic.Int64
	start(t, o, func(d broker.Delivery) {
		if d.Message().Offset == 3 {
			select {
			case <-release:
			case <-d.Lost():
				_ = d.Requeue(context.Background())
				return
			}
		}
		handled.Add(1)
		_ = d.Ack(context.Background())
	})
	// Offsets 0-2 finish and pass the mark; 3 holds it; the window of 10
	// (offsets 3-12) lets 4-12 run, and reading stops there.
	testutil.Eventually(t, 20*time.Second, "others finished", func() bool { return handled.Load() == 12 })
	time.Sleep(500 * time.Millisecond) // several commit intervals
	if got := c.Committed(t, o.Group, "orders", 1)[0]; got != 3 {
		t.Fatalf("committed %d while offset 3 is unfinished, want 3", got)
	}
	if h := handled.Load(); h != 12 {
		t.Fatalf("%d handled: read_ahead 10 should stop reading after offset 12", h)
	}
	close(release)
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 30)))
}

// RunBatches hands a partition's backlog over in order, in batches of at
// most BatchSize; a message the handler gives back is handed over again,
// alone, before everything the handler left after it, in order.
func TestBatchesInOrder(t *testing.T) {
	c := kafkatest.Start(t, 2, []string{"orders"})
	c.Produce(t, "orders", records(2, 200)...)
	o := options(c, "orders")
	o.BatchSize = 16
	var mu sync.Mutex
	got := map[int][]string{}
	batches, largest := 0, 0
	requeued := int64(-1)
	startBatches(t, o, func(ds []broker.Delivery) {
		if ds[0].Message().Partition == 0 {
			batches++ // partition 0's handler only: no lock needed
			if batches == 1 {
				// Let the fetcher run ahead: the next batch is full.
				time.Sleep(300 * time.Millisecond)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		largest = max(largest, len(ds))
		if len(ds) > o.BatchSize {
			t.Errorf("batch of %d, BatchSize %d", len(ds), o.BatchSize)
		}
		for i, d := range ds {
			m := d.Message()
			got[m.Partition] = append(got[m.Partition], fmt.Sprintf("%d:%v", m.Offset, m.Redelivered))
			if m.Partition == 0 && batches == 2 && i == 0 && len(ds) >= 3 {
				// Give back the first, ack the second, leave the rest.
				requeued = m.Offset
				_ = d.Requeue(context.Background())
				_ = ds[1].Ack(context.Background())
				got[0] = append(got[0], fmt.Sprintf("%d:false", ds[1].Message().Offset))
				return
			}
			_ = d.Ack(context.Background())
		}
	})
	testutil.Eventually(t, 20*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(2, 200)))
	mu.Lock()
	defer mu.Unlock()
	if largest != o.BatchSize {
		t.Fatalf("largest batch %d, want %d: a backlog is handed over in full batches", largest, o.BatchSize)
	}
	if requeued < 0 {
		t.Fatal("partition 0's second batch had fewer than 3 messages")
	}
	for part := range 2 {
		var want []string
		for off := range int64(200) {
			want = append(want, fmt.Sprintf("%d:false", off))
			if part == 0 && off == requeued+1 {
				// Given back: again, alone and redelivered, then the
				// untouched rest of its batch, not redelivered.
				want = append(want, fmt.Sprintf("%d:true", requeued))
			}
		}
		if fmt.Sprint(got[part]) != fmt.Sprint(want) {
			t.Fatalf("partition %d deliveries = %v\nwant %v", part, got[part], want)
		}
	}
}

// Shutdown commits finished work even when no batch or interval commit was
// due, and leaves the group, so the next member resumes right after it.
func TestShutdownCommitsAndLeaves(t *testing.T) {
	c := kafkatest.Start(t, 2, []string{"orders"})
	c.Produce(t, "orders", records(2, 5)...)
	o := options(c, "orders")
	o.CommitInterval = time.Hour
	o.CommitEvery = 1 << 20
	var col collector
	r := start(t, o, col.handle)
	testutil.Eventually(t, 10*time.Second, "all delivered", func() bool { return col.count() == 10 })
	if got := c.Committed(t, o.Group, "orders", 2); got[0] != -1 || got[1] != -1 {
		t.Fatalf("committed %v before shutdown; no commit was due", got)
	}
	r.stop(t)
	if got := c.Committed(t, o.Group, "orders", 2); got[0] != 5 || got[1] != 5 {
		t.Fatalf("committed %v after shutdown, want 5 and 5", got)
	}
	// The next member starts where the first stopped.
	c.Produce(t, "orders", records(2, 1)...)
	var col2 collector
	start(t, o, col2.handle)
	testutil.Eventually(t, 10*time.Second, "new messages delivered", func() bool { return col2.count() == 2 })
	time.Sleep(300 * time.Millisecond)
	col2.mu.Lock()
	defer col2.mu.Unlock()
	for k := range col2.seen {
		if k != "0/5" && k != "1/5" {
			t.Fatalf("committed message %s delivered again", k)
		}
	}
}

// A rebalance closes Lost for the partitions the member had; what it
// finished before is committed by the final commit of its generation.
func TestRebalanceLostAndFinalCommit(t *testing.T) {
	c := kafkatest.Start(t, 2, []string{"orders"})
	c.Produce(t, "orders", records(2, 3)...)
	c.Produce(t, "orders", kafkatest.Record{Partition: 0, Value: []byte("stuck")})
	o := options(c, "orders")
	o.CommitInterval = time.Hour
	o.CommitEvery = 1 << 20
	var lostSeen atomic.Bool
	var a collector
	start(t, o, func(d broker.Delivery) {
		if string(d.Message().Body) == "stuck" && !lostSeen.Load() {
			<-d.Lost() // only a rebalance or the stop frees it
			lostSeen.Store(true)
			_ = d.Requeue(context.Background())
			return
		}
		a.handle(d)
	})
	testutil.Eventually(t, 10*time.Second, "first member handled 6", func() bool { return a.count() == 6 })

	// A second member joins that speaks only range: the group goes
	// eager and the first member loses both partitions; its final
	// commit records 3 and 3, and "stuck" (offset 3) stays unfinished.
	var b collector
	ob := o
	ob.Balancers = []string{kafka.BalancerRange}
	start(t, ob, b.handle)
	testutil.Eventually(t, 20*time.Second, "Lost closed on revocation", lostSeen.Load)
	testutil.Eventually(t, 20*time.Second, "stuck message redelivered after the rebalance", func() bool {
		return a.count()+b.count() == 7
	})
	col := map[string]int{}
	for _, x := range []*collector{&a, &b} {
		x.mu.Lock()
		for k, n := range x.seen {
			col[k] += n
		}
		x.mu.Unlock()
	}
	for k, n := range col {
		if n != 1 {
			t.Errorf("%s delivered %d times: the final commit did not cover it", k, n)
		}
	}
}

func TestDeadLetterWithoutTopicHolds(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	c.Produce(t, "orders", records(1, 2)...)
	o := options(c, "orders")
	m := o.Metrics
	var calls atomic.Int64
	start(t, o, func(d broker.Delivery) {
		if d.Message().Offset == 0 && calls.Add(1) < 3 {
			err := d.DeadLetter(context.Background(), broker.DeadLetterInfo{Reason: "permanent: status 400"})
			if !errors.Is(err, broker.ErrNoDeadLetter) {
				panic(fmt.Sprintf("DeadLetter = %v", err))
			}
			if v := promtest.ToFloat64(m.PartitionsHeld); v != 1 {
				panic(fmt.Sprintf("held gauge = %v", v))
			}
			// The pipeline keeps retrying; here the handler gives it
			// back, and the source delivers it again in place.
			_ = d.Requeue(context.Background())
			return
		}
		_ = d.Ack(context.Background())
	})
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 2)))
	if v := promtest.ToFloat64(m.PartitionsHeld); v != 0 {
		t.Fatalf("held gauge = %v after the message finished", v)
	}
}

// start_offset: latest skips what was produced before the group existed.
func TestStartLatest(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	c.Produce(t, "orders", records(1, 5)...)
	o := options(c, "orders")
	o.StartOffset = kafka.StartLatest
	var col collector
	start(t, o, col.handle)
	time.Sleep(300 * time.Millisecond)
	c.Produce(t, "orders", kafkatest.Record{Value: []byte("new")})
	testutil.Eventually(t, 10*time.Second, "new message delivered", func() bool { return col.count() == 1 })
	col.mu.Lock()
	defer col.mu.Unlock()
	if string(col.msgs[0].Body) != "new" {
		t.Fatalf("first delivery %q, want the one produced after joining", col.msgs[0].Body)
	}
}

// Connections cut under the source, several times: it reconnects, fetch
// errors are retried, every message arrives and the commit reaches the end.
func TestConnectionCuts(t *testing.T) {
	c := kafkatest.Start(t, 3, []string{"orders"})
	o := options(c, "orders")
	var col collector
	r := start(t, o, func(d broker.Delivery) {
		time.Sleep(time.Millisecond)
		col.handle(d)
	})
	const per = 100
	for round := range 3 {
		c.Produce(t, "orders", records(3, per/3)...)
		testutil.Eventually(t, 20*time.Second, "progress", func() bool { return col.count() > round*per })
		c.Cut()
	}
	want := int64(3 * (per / 3))
	testutil.Eventually(t, 60*time.Second, "committed to the end after the cuts", allCommitted(t, c, o.Group, "orders", uniform(3, want)))
	if n := col.count(); n != int(3*want) {
		t.Fatalf("%d distinct messages delivered, want %d", n, 3*want)
	}
	// A cut while the partitions are idle: once the readers are back,
	// Ready must not keep reporting the old fetch errors.
	c.Cut()
	time.Sleep(100 * time.Millisecond)
	testutil.Eventually(t, 15*time.Second, "ready again while idle", func() bool { return r.s.Ready() == nil })
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			method := map[string]string{"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"}[mech]
			c := kafkatest.Start(t, 1, []string{"orders", "orders.dlq"}, kfake.EnableSASL(), kfake.Superuser(method, "proxy", "s3cret"))
			o := options(c, "orders")
			o.SASL = kafka.SASL{Mechanism: mech, Username: "proxy", Password: "s3cret"}
			o.DeadLetterTopic = "orders.dlq"

			// The test's own producer cannot authenticate: produce with
			// the source's security options instead.
			sec, err := kafka.SecurityOpts(o.SASL, kafka.TLS{})
			if err != nil {
				t.Fatal(err)
			}
			w := c.Client(t, append(sec, kgo.DefaultProduceTopic("orders"))...)
			if err := w.ProduceSync(context.Background(), &kgo.Record{Value: []byte("a")}, &kgo.Record{Value: []byte("b")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			w.Close()

			var n atomic.Int64
			start(t, o, func(d broker.Delivery) {
				if n.Add(1) == 1 {
					if err := d.DeadLetter(context.Background(), broker.DeadLetterInfo{Reason: "test"}); err != nil {
						panic(err)
					}
					return
				}
				_ = d.Ack(context.Background())
			})
			testutil.Eventually(t, 15*time.Second, "both settled", func() bool { return n.Load() == 2 })

			// The webhook sink's producer authenticates the same way.
			p, err := kafka.NewProducer(kafka.ProducerOptions{Brokers: c.Addrs, Topic: "orders", SASL: o.SASL})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Produce(context.Background(), &kgo.Record{Value: []byte("c")}); err != nil {
				t.Errorf("producer with sasl %s: %v", mech, err)
			}
			p.Close()

			// Wrong password: never a member, Ready says so, Run still
			// stops cleanly.
			bad := options(c, "orders")
			bad.SASL = kafka.SASL{Mechanism: mech, Username: "proxy", Password: "wrong"}
			s, err := kafka.New(bad)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, func(d broker.Delivery) { panic("delivered without authentication") }) }()
			time.Sleep(time.Second)
			if s.Ready() == nil {
				t.Error("Ready with a wrong password")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A record larger than the per-fetch byte bound still arrives, whole and
// in order: the broker returns a partition's first batch whatever its
// size, so the bound only limits what is fetched ahead.
func TestRecordLargerThanFetchBound(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	big := bytes.Repeat([]byte("x"), 600<<10)
	c.Produce(t, "orders",
		kafkatest.Record{Value: []byte(`{"meta":{"id":"before"}}`)},
		kafkatest.Record{Value: big},
		kafkatest.Record{Value: []byte(`{"meta":{"id":"after"}}`)})
	var col collector
	start(t, options(c, "orders"), col.handle)
	testutil.Eventually(t, 20*time.Second, "all 3 delivered", func() bool { return col.count() == 3 })
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.msgs[1].Body) != len(big) || col.msgs[1].Offset != 1 || string(col.msgs[2].Body) != `{"meta":{"id":"after"}}` {
		t.Fatalf("got bodies of %d, %d, %d bytes in offsets %d, %d, %d", len(col.msgs[0].Body), len(col.msgs[1].Body), len(col.msgs[2].Body),
			col.msgs[0].Offset, col.msgs[1].Offset, col.msgs[2].Offset)
	}
}

func debugLogger() *slog.Logger {
	if os.Getenv("KDEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
