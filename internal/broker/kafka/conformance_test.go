package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
)

func TestConformance(t *testing.T) {
	for _, ordering := range []string{kafka.OrderingPartition, kafka.OrderingKey} {
		t.Run(ordering, func(t *testing.T) { brokertest.Run(t, harness{ordering}) })
	}
}

// harness gives each case its own kfake cluster with a one-partition
// topic, its dead-letter topic and a consumer group.
type harness struct{ ordering string }

func (harness) Kind() string { return "kafka" }

func (h harness) Features() brokertest.Features {
	// Key ordering runs a partition's different record keys at once: the
	// partition is not handed over in order.
	return brokertest.Features{Ordered: h.ordering == kafka.OrderingPartition, Offsets: true, Revocation: true, DeadLetter: true}
}

func (h harness) NewDestination(t *testing.T) brokertest.Destination {
	c := kafkatest.Start(t, 1, []string{"orders", "orders.dlq"})
	return &destination{c: c, group: options(c, "orders").Group, ordering: h.ordering}
}

type destination struct {
	c        *kafkatest.Cluster
	group    string
	ordering string
}

func (d *destination) Queue() string { return "" }
func (d *destination) Topic() string { return "orders" }

// NewSource: in partition ordering Workers does not apply (a partition
// is handled in order); in key ordering it is MaxInFlight.
func (d *destination) NewSource(t *testing.T, o brokertest.SourceOptions) broker.Source {
	opts := options(d.c, "orders")
	opts.Name = o.Name
	opts.Group = d.group
	opts.Ordering = d.ordering
	if d.ordering == kafka.OrderingKey {
		opts.MaxInFlight = max(o.Workers, 1)
	}
	if o.DeadLetter {
		opts.DeadLetterTopic = "orders.dlq"
	}
	s, err := kafka.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *destination) Publish(t *testing.T, msgs ...brokertest.Message) {
	t.Helper()
	recs := make([]kafkatest.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = kafkatest.Record{Value: m.Body}
		if m.Key != "" {
			recs[i].Key = []byte(m.Key)
		}
		if m.ContentType != "" {
			recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(m.ContentType)})
		}
		for k, v := range m.Headers {
			recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	d.c.Produce(t, "orders", recs...)
}

func (d *destination) Cut(*testing.T) { d.c.Cut() }

// Revoke joins a second member that speaks only range: the group agrees
// on range, rebalances eagerly, and every member's partitions are
// revoked. (A cooperative-sticky newcomer would leave the one partition
// with its owner: nothing would be revoked.) The newcomer settles
// nothing: it gives back whatever it is handed once it loses it or the
// test ends.
func (d *destination) Revoke(t *testing.T) {
	opts := options(d.c, "orders")
	opts.Name = "intruder"
	opts.Group = d.group
	opts.Ordering = d.ordering
	opts.Balancers = []string{kafka.BalancerRange}
	s, err := kafka.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(del broker.Delivery) {
			select {
			case <-del.Lost():
			case <-ctx.Done():
			}
			_ = del.Requeue(context.Background())
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("intruder Run: %v", err)
		}
	})
}

func (d *destination) DeadLetters(t *testing.T, n int, timeout time.Duration) []brokertest.DeadLetter {
	t.Helper()
	var out []brokertest.DeadLetter
	for _, m := range d.c.Read(t, "orders.dlq", 0, n, timeout) {
		dl := brokertest.DeadLetter{Body: m.Value, Key: string(m.Key), Headers: map[string][]string{}}
		for _, h := range m.Headers {
			dl.Headers[h.Key] = append(dl.Headers[h.Key], string(h.Value))
		}
		out = append(out, dl)
	}
	return out
}
