package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaBroker is kfake, franz-go's in-process Kafka, speaking the real
// protocol over TCP on 127.0.0.1, with one broker.
type kafkaBroker struct {
	o       options
	cluster *kfake.Cluster
	addr    string
	client  *kgo.Client
}

// measureKafka runs the Kafka rows, or says why it cannot.
func (b *bench) measureKafka(ctx context.Context) *section {
	s := &section{broker: "Kafka (kfake)"}
	if why := b.startKafka(ctx); why != "" {
		s.missing = why
		return s
	}
	return b.measure(ctx, b.kafka)
}

// startKafka starts kfake once; "" when it runs and the proxy takes Kafka
// sources, otherwise why not.
func (b *bench) startKafka(ctx context.Context) string {
	if why := b.kafkaSupported(ctx); why != "" {
		return why
	}
	if b.kafka == nil {
		kb, err := startKafka(b.o)
		if err != nil {
			return "not measured: kfake did not start: " + err.Error()
		}
		b.kafka = kb
	}
	return ""
}

// kafkaSupported asks the proxy binary itself whether it accepts a Kafka
// source (`validate`); "" when it does.
func (b *bench) kafkaSupported(ctx context.Context) string {
	path := filepath.Join(b.dir, "kafka-check.yaml")
	cfg := `consumer: bench
sources:
  - name: check
    type: kafka
    kafka:
      brokers: ["127.0.0.1:9092"]
      topics: ["check"]
      group: check
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "not measured: " + err.Error()
	}
	out, err := exec.CommandContext(ctx, b.o.proxy, "validate", "--config", path).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "kafka") {
			return "not measured: kafka source missing (the proxy rejects type kafka: " + firstLine(string(out), "type") + ")"
		}
		return "not measured: the proxy rejected a Kafka config: " + strings.TrimSpace(string(out))
	}
	return ""
}

func firstLine(out, containing string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, containing) {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		}
	}
	return strings.TrimSpace(out)
}

func startKafka(o options) (*kafkaBroker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, err
	}
	// ListenAddrs hangs after Close: read it now.
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, errors.New("kfake has no listener")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs[0]))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &kafkaBroker{o: o, cluster: c, addr: addrs[0], client: cl}, nil
}

func (k *kafkaBroker) name() string  { return "Kafka (kfake)" }
func (k *kafkaBroker) short() string { return "kafka" }
func (k *kafkaBroker) close()        { k.client.Close(); k.cluster.Close() }

// serverPID is 0: kfake runs inside this process.
func (k *kafkaBroker) serverPID() int { return 0 }

func (k *kafkaBroker) newDest(ctx context.Context, id string) (dest, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = id, int32(k.o.partitions), 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.client)
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("create topic %s: %w", t.Topic, err)
		}
	}
	return &kafkaDest{k: k, topic: id}, nil
}

type kafkaDest struct {
	k        *kafkaBroker
	topic    string
	ordering string // "" is -kafka-ordering
}

func (d *kafkaDest) setOrdering(o string) { d.ordering = o }

func (d *kafkaDest) order() string {
	if d.ordering != "" {
		return d.ordering
	}
	return d.k.o.ordering
}

// cleanup deletes the topic; kfake keeps every record in memory.
func (d *kafkaDest) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{d.topic}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(d.topic)
	req.Topics = append(req.Topics, rt)
	_, _ = req.RequestWith(ctx, d.k.client)
}

// inflightBound: with partition ordering (the default) a partition hands
// at most batch_size fetched messages to the pipeline at once; one of
// them is at the app. With key ordering the source runs at most
// max_in_flight handlers of one message each.
func (d *kafkaDest) inflightBound() int {
	if d.order() == "key" {
		return d.k.o.inFlight
	}
	return d.k.o.partitions * d.k.o.kafkaBatch
}

func (d *kafkaDest) group() string { return d.topic + "-group" }

func (d *kafkaDest) proxySource() string {
	return fmt.Sprintf(`    type: kafka
    kafka:
      brokers: ["%s"]
      topics: ["%s"]
      group: "%s"
      commit_every: 500
      commit_interval: 1s
      batch_size: %d
      ordering: %s
      max_in_flight: %d
`, d.k.addr, d.topic, d.group(), d.k.o.kafkaBatch, d.order(), d.k.o.inFlight)
}

func (d *kafkaDest) bareArgs() []string {
	return []string{"-broker", "kafka", "-brokers", d.k.addr, "-topic", d.topic, "-group", d.group(),
		"-commit-every", "500", "-commit-interval", "1s"}
}

// producer hashes the record key (the message key) to the partition,
// so a duplicate lands behind its original in the same partition.
func (d *kafkaDest) producer() (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(d.k.addr), kgo.DefaultProduceTopic(d.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100000))
}

func (d *kafkaDest) publish(ctx context.Context, n int, key func(int) string, body func(int64, string) []byte) error {
	w, err := d.producer()
	if err != nil {
		return err
	}
	defer w.Close()
	ts := nowNanos()
	const chunk = 5000
	recs := make([]*kgo.Record, 0, chunk)
	for i := range n {
		k := key(i)
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: body(ts, k)})
		if len(recs) == chunk || i == n-1 {
			if err := w.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	return nil
}

func (d *kafkaDest) pacer(context.Context) (pacer, error) {
	w, err := d.producer()
	if err != nil {
		return nil, err
	}
	return &kafkaPacer{w: w}, nil
}

// kafkaPacer produces asynchronously, one message per send, batched by
// the client for at most 1 ms: the same small publish delay for every
// row.
type kafkaPacer struct {
	w   *kgo.Client
	mu  sync.Mutex
	err error
}

func (p *kafkaPacer) send(key string, body []byte) error {
	p.w.Produce(context.Background(), &kgo.Record{Key: []byte(key), Value: body}, func(_ *kgo.Record, err error) {
		if err != nil {
			p.mu.Lock()
			p.err = errors.Join(p.err, err)
			p.mu.Unlock()
		}
	})
	return nil
}

func (p *kafkaPacer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.w.Flush(ctx)
	p.w.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(err, p.err)
}

func nowNanos() int64 { return time.Now().UnixNano() }
