package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// txnProducer is a transactional producer to partition 0 of topic.
type txnProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func newTxnProducer(t *testing.T, c *kafkatest.Cluster, topic string) *txnProducer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.TransactionalID(fmt.Sprintf("tx-%d", groupSeq.Add(1))),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &txnProducer{t: t, cl: cl}
}

func (p *txnProducer) begin(values ...string) {
	p.t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatal(err)
	}
	for _, v := range values {
		if err := p.cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *txnProducer) end(commit bool) {
	p.t.Helper()
	if err := p.cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
		p.t.Fatal(err)
	}
}

// bodies acks every delivery and records its body.
type bodies struct {
	mu  sync.Mutex
	got []string
}

func (b *bodies) handle(d broker.Delivery) {
	b.mu.Lock()
	b.got = append(b.got, string(d.Message().Body))
	b.mu.Unlock()
	_ = d.Ack(context.Background())
}

func (b *bodies) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%q", b.got)
}

// Records of an aborted transaction never reach the handler by default,
// and the transactions' commit and abort markers never do at either
// isolation level; the commit still reaches the end of the partition.
func TestTransactions(t *testing.T) {
	for _, tc := range []struct {
		level    string
		ordering string
		want     string
	}{
		{"", kafka.OrderingPartition, `["b0" "b1" "c"]`},
		{"", kafka.OrderingKey, `["b0" "b1" "c"]`},
		{kafka.IsolationReadCommitted, kafka.OrderingPartition, `["b0" "b1" "c"]`},
		{kafka.IsolationReadUncommitted, kafka.OrderingPartition, `["a0" "a1" "b0" "b1" "c"]`},
	} {
		t.Run(fmt.Sprintf("level=%q/ordering=%s", tc.level, tc.ordering), func(t *testing.T) {
			c := kafkatest.Start(t, 1, []string{"orders"})
			p := newTxnProducer(t, c, "orders")
			p.begin("a0", "a1")
			p.end(false)
			p.begin("b0", "b1")
			p.end(true)
			c.Produce(t, "orders", kafkatest.Record{Value: []byte("c")})
			// Offsets: a0 a1 abort-marker b0 b1 commit-marker c.
			const end = 7

			o := options(c, "orders")
			o.IsolationLevel = tc.level
			o.Ordering = tc.ordering
			var b bodies
			start(t, o, b.handle)
			testutil.Eventually(t, 15*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, end)))
			time.Sleep(300 * time.Millisecond) // anything later would show now
			if tc.ordering == kafka.OrderingKey {
				// Records with neither a record key nor a dedupe key wait
				// for nothing in key order: which arrive is the point.
				b.mu.Lock()
				slices.Sort(b.got)
				b.mu.Unlock()
			}
			if got := b.String(); got != tc.want {
				t.Fatalf("delivered %s, want %s", got, tc.want)
			}
		})
	}
}

// read_committed: the records of an open transaction, and everything
// after them, wait until it ends; read_uncommitted hands them over at once.
func TestOpenTransactionWaits(t *testing.T) {
	for _, tc := range []struct {
		level  string
		before string // delivered while the transaction is open
		after  string
	}{
		{kafka.IsolationReadCommitted, `[]`, `["d0" "e"]`},
		{kafka.IsolationReadUncommitted, `["d0" "e"]`, `["d0" "e"]`},
	} {
		t.Run(tc.level, func(t *testing.T) {
			c := kafkatest.Start(t, 1, []string{"orders"})
			p := newTxnProducer(t, c, "orders")
			p.begin("d0")
			c.Produce(t, "orders", kafkatest.Record{Value: []byte("e")})

			o := options(c, "orders")
			o.IsolationLevel = tc.level
			var b bodies
			start(t, o, b.handle)
			time.Sleep(time.Second)
			if got := b.String(); got != tc.before {
				t.Fatalf("delivered %s while the transaction is open, want %s", got, tc.before)
			}
			p.end(true)
			testutil.Eventually(t, 15*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 2)))
			time.Sleep(300 * time.Millisecond)
			if got := b.String(); got != tc.after {
				t.Fatalf("delivered %s, want %s", got, tc.after)
			}
		})
	}
}

func TestUnknownIsolationLevel(t *testing.T) {
	if _, err := kafka.New(kafka.Options{Brokers: []string{"127.0.0.1:9"}, Topics: []string{"t"}, Group: "g", IsolationLevel: "read_some"}); err == nil {
		t.Fatal("New accepted an unknown isolation level")
	}
}

// kgo retries failed fetches by itself and does not hand the errors to
// the poll: the source must still notice, through the client's hooks,
// that a partition cannot fetch, and that it can again.
func TestFetchFailureNotReady(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	o := options(c, "orders")
	var b bodies
	r := start(t, o, b.handle)

	var broken atomic.Bool
	broken.Store(true)
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !broken.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("fetch refused"), true // closes the connection
	})
	testutil.Eventually(t, 10*time.Second, "not ready while fetches fail", func() bool { return r.s.Ready() != nil })
	if err := r.s.Ready(); !errors.Is(err, broker.ErrNotConnected) || !strings.Contains(err.Error(), "fetching fails") {
		t.Fatalf("Ready = %v", err)
	}

	broken.Store(false)
	c.Produce(t, "orders", kafkatest.Record{Value: []byte("after")})
	testutil.Eventually(t, 10*time.Second, "ready again", func() bool { return r.s.Ready() == nil })
	testutil.Eventually(t, 10*time.Second, "delivered after the fetches recovered", func() bool { return b.String() == `["after"]` })
}
