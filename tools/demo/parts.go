package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	brokerAuto     = "auto"
	brokerRabbitMQ = "rabbitmq"
	brokerKafka    = "kafka" // in-process (kfake)
	brokerRedis    = "redis" // a list at -redis, BabelQueue's binding

	seensetAuto     = "auto"
	seensetRedis    = "redis"
	seensetEmbedded = "embedded" // in-process (miniredis)
)

// fallback is a local service an "auto" choice depends on: what names it
// in the one-line message, probe says whether it answers.
type fallback struct {
	what  string
	probe func() error
}

// choice is what the demo runs on, and the line that says why, when it
// fell back to embedded parts.
type choice struct {
	broker, seenset string
	note            string
}

// choose resolves -broker and -seenset. An explicit value is taken as it
// is (a service that is down then fails the demo with its own error);
// only "auto" probes. With both on auto, one unreachable service moves the
// demo wholly onto embedded parts, so a newcomer's first run is either
// the local services or nothing but Go; with one explicit, the other
// falls back on its own.
func choose(broker, seen string, rabbit, redis fallback) (choice, error) {
	switch broker {
	case brokerAuto, brokerRabbitMQ, brokerKafka, brokerRedis:
	default:
		return choice{}, fmt.Errorf("-broker %q: want auto, rabbitmq, kafka or redis", broker)
	}
	switch seen {
	case seensetAuto, seensetRedis, seensetEmbedded:
	default:
		return choice{}, fmt.Errorf("-seenset %q: want auto, redis or embedded", seen)
	}
	c := choice{broker: broker, seenset: seen}
	var down []string
	if broker == brokerAuto {
		c.broker = brokerRabbitMQ
		if rabbit.probe() != nil {
			down = append(down, rabbit.what)
		}
	}
	if seen == seensetAuto {
		c.seenset = seensetRedis
		if redis.probe() != nil {
			down = append(down, redis.what)
		}
	}
	if len(down) == 0 {
		return c, nil
	}
	verb := "is"
	if len(down) > 1 {
		verb = "are"
	}
	var instead string
	switch {
	case broker == brokerAuto && seen == seensetAuto:
		c.broker, c.seenset = brokerKafka, seensetEmbedded
		instead = "an in-process Kafka and Redis"
	case broker == brokerAuto:
		c.broker = brokerKafka
		instead = "an in-process Kafka"
	default:
		c.seenset = seensetEmbedded
		instead = "an in-process Redis"
	}
	c.note = fmt.Sprintf("%s %s not reachable: running on %s instead", strings.Join(down, " and "), verb, instead)
	return c, nil
}

// probeTimeout bounds a probe: a firewalled port would otherwise hold the
// demo for the system's connect timeout.
const probeTimeout = 2 * time.Second

// probeTCP says whether something accepts connections at addr.
func probeTCP(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

// probeRedis says whether a Redis answers PING at addr.
func probeRedis(addr string) error {
	// A refused probe is reported in the demo's one line; go-redis' own
	// lines for its pool's dials would only repeat it.
	logging.Disable()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: probeTimeout, ReadTimeout: probeTimeout, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// amqpHost is host:port of an AMQP URL, for the probe and the message.
func amqpHost(s string) string {
	if u, err := amqp.ParseURI(s); err == nil {
		return net.JoinHostPort(u.Host, fmt.Sprint(u.Port))
	}
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Host
	}
	return s
}

// seenStore is the seen-set the proxies share: the local Redis or the
// embedded one.
type seenStore struct {
	addr, prefix, describe string
	close                  func()
}

func openRedis(ctx context.Context, addr, prefix string) (*seenStore, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s is not reachable (%v); start it: redis-server --daemonize yes --save '' --appendonly no, or run make demo SEENSET=embedded", addr, err)
	}
	return &seenStore{addr: addr, prefix: prefix, describe: "Redis at " + addr, close: func() {
		// The demo's keys only: the Redis is shared.
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	}}, nil
}

func openEmbeddedRedis(prefix string) (*seenStore, error) {
	r, err := startEmbeddedRedis()
	if err != nil {
		return nil, fmt.Errorf("in-process Redis: %w", err)
	}
	return &seenStore{addr: r.addr(), prefix: prefix, describe: "in-process Redis (miniredis) at " + r.addr(), close: r.close}, nil
}

// demoBroker is where the demo publishes and the proxies consume.
type demoBroker interface {
	describe() string
	// source is the YAML of sources[0] from "type:" on, indented by four
	// spaces.
	source() string
	// publish returns once the broker holds every body.
	publish(bodies [][]byte) error
	close()
}

type rabbitBroker struct {
	url, queue string
	conn       *amqp.Connection
}

func openRabbit(amqpURL, queue string) (*rabbitBroker, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at %s is not reachable (%v); start it: rabbitmq-server -detached, or run make demo BROKER=kafka", redactURL(amqpURL), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("declare queue: %w", err)
	}
	return &rabbitBroker{url: amqpURL, queue: queue, conn: conn}, nil
}

func (b *rabbitBroker) describe() string {
	return fmt.Sprintf("RabbitMQ at %s, queue %s", amqpHost(b.url), b.queue)
}

func (b *rabbitBroker) source() string {
	return fmt.Sprintf(`    type: rabbitmq
    key: ["json:meta.id", "property:message_id"]
    rabbitmq:
      url: %s
      queue: %s
      prefetch: 64
      workers: 16
`, b.url, b.queue)
}

func (b *rabbitBroker) publish(bodies [][]byte) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx := context.Background()
	var pending []*amqp.DeferredConfirmation
	for _, body := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: envelopeID(body), AppId: "babelqueue", Body: body,
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

func (b *rabbitBroker) close() {
	if c, err := b.conn.Channel(); err == nil {
		_, _ = c.QueueDelete(b.queue, false, false, false)
	}
	_ = b.conn.Close()
}

// kafkaBroker is the embedded Kafka, with one topic of as many
// partitions as twice the replicas, so each replica is assigned some.
type kafkaBroker struct {
	k     *embeddedKafka
	topic string
}

func openKafka(topic string, replicas int) (*kafkaBroker, error) {
	k, err := startEmbeddedKafka(topic, 2*max(replicas, 1))
	if err != nil {
		return nil, fmt.Errorf("in-process Kafka: %w", err)
	}
	return &kafkaBroker{k: k, topic: topic}, nil
}

func (b *kafkaBroker) describe() string {
	return fmt.Sprintf("in-process Kafka (kfake) at %s, topic %s", strings.Join(b.k.addrs, ","), b.topic)
}

func (b *kafkaBroker) source() string {
	return fmt.Sprintf(`    type: kafka
    key: ["json:meta.id", "record_key"]
    kafka:
      brokers: ["%s"]
      topics: ["%s"]
      group: %s
      commit_interval: 200ms
`, strings.Join(b.k.addrs, `", "`), b.topic, b.topic)
}

// publish keys each record by its envelope's id, so a duplicate lands in
// the partition of its original, as a keyed producer's would.
func (b *kafkaBroker) publish(bodies [][]byte) error {
	w, err := kgo.NewClient(kgo.SeedBrokers(b.k.addrs...), kgo.DefaultProduceTopic(b.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	defer w.Close()
	recs := make([]*kgo.Record, len(bodies))
	for i, body := range bodies {
		recs[i] = &kgo.Record{Key: []byte(envelopeID(body)), Value: body}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

func (b *kafkaBroker) close() { b.k.close() }

// redisBroker is a list on a real Redis (BabelQueue's binding: the
// producer RPUSHes the envelope), with its dead-letter list beside it.
type redisBroker struct {
	addr, queue string
	rdb         *redis.Client
}

func openRedisBroker(addr, queue string) (*redisBroker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s is not reachable (%v); start it: redis-server --daemonize yes, or run make demo BROKER=kafka", addr, err)
	}
	return &redisBroker{addr: addr, queue: queue, rdb: rdb}, nil
}

func (b *redisBroker) describe() string {
	return fmt.Sprintf("Redis list at %s, queue %s (mode list)", b.addr, b.queue)
}

func (b *redisBroker) source() string {
	return fmt.Sprintf(`    type: redis
    key: ["json:meta.id"]
    redis:
      addrs: ["%s"]
      mode: list
      queue: %s
      dead_letter: "{%s}:dead"
      workers: 16
`, b.addr, b.queue, b.queue)
}

func (b *redisBroker) publish(bodies [][]byte) error {
	ctx := context.Background()
	for i := 0; i < len(bodies); i += 500 {
		_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, body := range bodies[i:min(len(bodies), i+500)] {
				p.RPush(ctx, b.queue, body)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// close removes the demo's queue and every key under its hash tag (the
// Redis is shared).
func (b *redisBroker) close() {
	ctx := context.Background()
	for _, pattern := range []string{b.queue, "{" + b.queue + "}*"} {
		iter := b.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			b.rdb.Del(ctx, iter.Val())
		}
	}
	_ = b.rdb.Close()
}

func envelopeID(body []byte) string {
	var env struct{ Meta struct{ ID string } }
	_ = json.Unmarshal(body, &env)
	return env.Meta.ID
}
