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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster is a running kfake cluster of one broker.
type Cluster struct {
	*kfake.Cluster
	// Addrs are the brokers' host:port.
	Addrs []string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cuts  int
	// down refuses new connections (SetDown); accepted counts those
	// taken.
	down     bool
	accepted int
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

// SetDown refuses (closes at once) every new client connection while
// down is true: with Cut, the broker is gone as far as a client can
// tell, and back with SetDown(false), on the same address.
func (c *Cluster) SetDown(down bool) {
	c.mu.Lock()
	c.down = down
	c.mu.Unlock()
}

// Accepted is the number of client connections the broker has taken
// (not those SetDown refused).
func (c *Cluster) Accepted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepted
}

type trackingListener struct {
	net.Listener
	c *Cluster
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.c.mu.Lock()
		if l.c.down {
			l.c.mu.Unlock()
			_ = conn.Close()
			continue
		}
		l.c.accepted++
		l.c.conns[conn] = struct{}{}
		l.c.mu.Unlock()
		return &trackedConn{Conn: conn, c: l.c}, nil
	}
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
	Headers   []kgo.RecordHeader
}

// Client returns a kgo client of the cluster with opts, closed when the
// test ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Produce writes records, each to its Partition, waiting for the broker's
// acknowledgement.
func (c *Cluster) Produce(t testing.TB, topic string, recs ...Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		rs[i] = &kgo.Record{Topic: topic, Partition: int32(r.Partition), Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func (c *Cluster) request(t testing.TB, req kmsg.Request) kmsg.Response {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// Committed returns the group's committed offset of partitions 0..n-1 of
// topic; -1 where there is none.
func (c *Cluster) Committed(t testing.TB, group, topic string, n int) map[int]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range n {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp := c.request(t, req).(*kmsg.OffsetFetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("offset fetch %s/%s: %v", group, topic, err)
	}
	out := map[int]int64{}
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("offset fetch %s/%s[%d]: %v", group, topic, p.Partition, err)
			}
			out[int(p.Partition)] = p.Offset
		}
	}
	for p := range n {
		if _, ok := out[p]; !ok {
			t.Fatalf("offset fetch %s/%s: partition %d missing", group, topic, p)
		}
	}
	return out
}

// SetCommitted commits offsets for a group that has no members (as an
// operator's offset reset does).
func (c *Cluster) SetCommitted(t testing.TB, group, topic string, offsets map[int]int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	// OffsetCommit v10 names the topic by id only.
	rt.Topic, rt.TopicID = topic, c.topicID(t, topic)
	for p, o := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Offset = o
		rp.LeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := c.request(t, req).(*kmsg.OffsetCommitResponse)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("offset commit %s/%s[%d]: %v", group, topic, p.Partition, err)
			}
		}
	}
}

func (c *Cluster) topicID(t testing.TB, topic string) [16]byte {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp := c.request(t, req).(*kmsg.MetadataResponse)
	for _, mt := range resp.Topics {
		if mt.Topic != nil && *mt.Topic == topic {
			if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
				t.Fatalf("metadata %s: %v", topic, err)
			}
			return mt.TopicID
		}
	}
	t.Fatalf("metadata: no topic %s", topic)
	return [16]byte{}
}

// Read reads up to n messages of one partition from offset 0, waiting at
// most timeout for them.
func (c *Cluster) Read(t testing.TB, topic string, partition, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {int32(partition): kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollRecords(ctx, n-len(out))
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// Describe returns the group's state and, per member (by instance id
// when it has one, else member id), the partitions of topic it holds.
func (c *Cluster) Describe(t testing.TB, group, topic string) (string, map[string][]int32) {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp := c.request(t, req).(*kmsg.DescribeGroupsResponse)
	if len(resp.Groups) != 1 {
		t.Fatalf("describe group %s: %d groups", group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		name := m.MemberID
		if m.InstanceID != nil {
			name = *m.InstanceID
		}
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(m.MemberAssignment); err != nil && len(m.MemberAssignment) > 0 {
			t.Fatalf("describe group %s: member %s assignment: %v", group, name, err)
		}
		out[name] = nil
		for _, at := range a.Topics {
			if at.Topic == topic {
				out[name] = append(out[name], at.Partitions...)
			}
		}
	}
	return g.State, out
}

// EndOffsets returns the log end offset of partitions 0..n-1 of topic.
func (c *Cluster) EndOffsets(t testing.TB, topic string, n int) map[int]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range n {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Timestamp = -1
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := c.request(t, req).(*kmsg.ListOffsetsResponse)
	out := map[int]int64{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("list offsets %s[%d]: %v", topic, p.Partition, err)
			}
			out[int(p.Partition)] = p.Offset
		}
	}
	if len(out) != n {
		t.Fatalf("list offsets %s: %d of %d partitions", topic, len(out), n)
	}
	return out
}
