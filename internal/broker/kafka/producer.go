package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceSync produces rec and waits until every in-sync replica has it
// (the clients of this package require acks=all), at most timeout.
func produceSync(ctx context.Context, cl *kgo.Client, timeout time.Duration, rec *kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cl.ProduceSync(ctx, rec).FirstErr()
}

// ProducerOptions configure a Producer. Zero durations take the defaults
// noted on each field.
type ProducerOptions struct {
	Brokers []string `mapstructure:"brokers"`
	Topic   string   `mapstructure:"topic"`
	SASL    SASL     `mapstructure:"sasl"`
	TLS     TLS      `mapstructure:"tls"`
	// ClientID names the client to the brokers. Default "dedupe-proxy".
	ClientID string `mapstructure:"-"`
	// Timeout bounds one produce. Default 10s.
	Timeout time.Duration `mapstructure:"-"`
	// NetworkTimeout bounds a dial. Default 5s.
	NetworkTimeout time.Duration `mapstructure:"-"`
	Logger         *slog.Logger  `mapstructure:"-"`
	// ConfigPath is where these options are in the config file, for
	// the errors that name a setting to fix. Default "kafka".
	ConfigPath string `mapstructure:"-"`
}

// Producer produces to one topic and returns only once every in-sync
// replica has the record: the webhook source's Kafka sink. It is the
// client type, the security options and the produce call the source's
// dead letters use.
type Producer struct {
	cl      *kgo.Client
	topic   string
	timeout time.Duration
	o       ProducerOptions
	sasl    *saslWatch
}

// NewProducer returns a Producer; it connects on the first produce. It
// fails only on options that can never work (as New).
func NewProducer(o ProducerOptions) (*Producer, error) {
	opts, err := o.clientOpts()
	if err != nil {
		return nil, err
	}
	w := &saslWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(w))...)
	if err != nil {
		return nil, err
	}
	return &Producer{cl: cl, topic: o.Topic, timeout: o.Timeout, o: o, sasl: w}, nil
}

// clientOpts fills in o's defaults and returns its client's options:
// the package's connection options, o's TLS and SASL, acks=all to
// o.Topic. The sink and doctor's check of it both connect with these.
func (o *ProducerOptions) clientOpts() ([]kgo.Opt, error) {
	if len(o.Brokers) == 0 || o.Topic == "" {
		return nil, errors.New("kafka producer: brokers and topic must be set")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ClientID == "" {
		o.ClientID = "dedupe-proxy"
	}
	if o.ConfigPath == "" {
		o.ConfigPath = "kafka"
	}
	defaultDuration(&o.Timeout, 10*time.Second)
	defaultDuration(&o.NetworkTimeout, 5*time.Second)
	sec, err := SecurityOpts(o.SASL, o.TLS)
	if err != nil {
		return nil, err
	}
	return append(clientOpts(o.Brokers, o.ClientID, o.NetworkTimeout, 50*time.Millisecond, 500*time.Millisecond, sec, o.Logger),
		kgo.DefaultProduceTopic(o.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(max(o.Timeout, time.Second)),
	), nil
}

// Reachable asks the brokers for the topic's metadata, on the client's
// open connection when it has one: nil when they answer, the topic
// exists and every partition has a leader, so that a produce can be
// acknowledged whatever its key. It is as cheap a request as reaches
// the cluster through the client's TLS and SASL.
func (p *Producer) Reachable(ctx context.Context) error {
	resp, err := p.metadata(ctx)
	if err != nil {
		return fmt.Errorf("kafka: brokers not reachable: %w", err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != p.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("kafka: topic %s: %w", p.topic, err)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("kafka: topic %s: no partitions", p.topic)
		}
		for _, pt := range t.Partitions {
			if err := kerr.ErrorForCode(pt.ErrorCode); err != nil {
				return fmt.Errorf("kafka: topic %s partition %d: %w", p.topic, pt.Partition, err)
			}
		}
		return nil
	}
	return fmt.Errorf("kafka: topic %s: not in the brokers' answer", p.topic)
}

// metadata asks for the topic's metadata; an error that is the brokers
// refusing the client's SASL or TLS names the setting to fix.
func (p *Producer) metadata(ctx context.Context) (*kmsg.MetadataResponse, error) {
	start := time.Now()
	resp, err := TopicMetadata(ctx, p.cl, []string{p.topic})
	return resp, explainRefusal(err, p.sasl, start, p.o.SASL, p.o.TLS, p.o.ConfigPath)
}

// Produce produces rec to the producer's topic (rec.Topic is set) with
// acks=all; nil only once every in-sync replica has it. The record key
// picks the partition.
func (p *Producer) Produce(ctx context.Context, rec *kgo.Record) error {
	rec.Topic = p.topic
	return produceSync(ctx, p.cl, p.timeout, rec)
}

// Close closes the client; a produce in flight fails.
func (p *Producer) Close() { p.cl.Close() }
