// Package kafkatest starts an in-process Kafka (franz-go's kfake, the real
// protocol over TCP) for tests, with helpers to produce to a chosen
// partition, read a topic, read and set a group's committed offsets, and
// cut every client connection as a network fault would.
package kafkatest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is a running kfake cluster of one broker.
type Cluster struct {
	*kfake.Cluster
	// Addrs are the brokers' host:port.
	Addrs []string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cuts  int
}

// Start starts a one-broker cluster with topics of the given partition
// count (more kfake options may be added); it is closed when the test
// ends.
func Start(t testing.TB, partitions int32, topics []string, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c := &Cluster{conns: map[net.Conn]struct{}{}}
	all := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topics...),
		kfake.ListenFn(c.listen),
	}, opts...)
	kc, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	c.Cluster = kc
	// ListenAddrs hangs after Close: read it now.
	c.Addrs = kc.ListenAddrs()
	t.Cleanup(kc.Close)
	return c
}

func (c *Cluster) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &trackingListener{Listener: ln, c: c}, nil
}

// Cut closes every open client connection on the broker's side, as a
// network blip would; clients reconnect. It returns how many it closed.
func (c *Cluster) Cut() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.conns)
	for conn := range c.conns {
		_ = conn.Close()
	}
	clear(c.conns)
	if n > 0 {
		c.cuts++
	}
	return n
}

type trackingListener struct {
	net.Listener
	c *Cluster
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.mu.Lock()
	l.c.conns[conn] = struct{}{}
	l.c.mu.Unlock()
	return &trackedConn{Conn: conn, c: l.c}, nil
}

type trackedConn struct {
	net.Conn
	c *Cluster
}

func (t *trackedConn) Close() error {
	t.c.mu.Lock()
	delete(t.c.conns, t.Conn)
	t.c.mu.Unlock()
	return t.Conn.Close()
}

// Record is one message to produce.
type Record struct {
	Partition int
	Key       []byte
	Value     []byte
	Headers   []kafkago.Header
}

// Produce writes records, each to its Partition, waiting for the broker's
// acknowledgement.
func (c *Cluster) Produce(t testing.TB, topic string, recs ...Record) {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{
		Addr:  kafkago.TCP(c.Addrs...),
		Topic: topic,
		Balancer: kafkago.BalancerFunc(func(m kafkago.Message, _ ...int) int {
			return m.WriterData.(int)
		}),
		RequiredAcks: kafkago.RequireAll,
		BatchTimeout: time.Millisecond,
		BatchSize:    1000,
		Transport:    tr,
	}
	defer w.Close()
	msgs := make([]kafkago.Message, len(recs))
	for i, r := range recs {
		msgs[i] = kafkago.Message{Key: r.Key, Value: r.Value, Headers: r.Headers, WriterData: r.Partition}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func (c *Cluster) client() (*kafkago.Client, func()) {
	tr := &kafkago.Transport{}
	return &kafkago.Client{Addr: kafkago.TCP(c.Addrs...), Transport: tr, Timeout: 10 * time.Second}, tr.CloseIdleConnections
}

// Committed returns the group's committed offset of partitions 0..n-1 of
// topic; -1 where there is none.
func (c *Cluster) Committed(t testing.TB, group, topic string, n int) map[int]int64 {
	t.Helper()
	cl, done := c.client()
	defer done()
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		t.Fatalf("offset fetch %s/%s: %v", group, topic, err)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("offset fetch %s/%s[%d]: %v", group, topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

// SetCommitted commits offsets for a group that has no members (as an
// operator's offset reset does).
func (c *Cluster) SetCommitted(t testing.TB, group, topic string, offsets map[int]int64) {
	t.Helper()
	cl, done := c.client()
	defer done()
	var commits []kafkago.OffsetCommit
	for p, o := range offsets {
		commits = append(commits, kafkago.OffsetCommit{Partition: p, Offset: o})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: group, GenerationID: -1, Topics: map[string][]kafkago.OffsetCommit{topic: commits}})
	if err != nil {
		t.Fatalf("offset commit %s/%s: %v", group, topic, err)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("offset commit %s/%s[%d]: %v", group, topic, p.Partition, p.Error)
		}
	}
}

// Read reads up to n messages of one partition from offset 0, waiting at
// most timeout for them.
func (c *Cluster) Read(t testing.TB, topic string, partition, n int, timeout time.Duration) []kafkago.Message {
	t.Helper()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.Addrs, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []kafkago.Message
	for len(out) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			break
		}
		out = append(out, m)
	}
	return out
}
