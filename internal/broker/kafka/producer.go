package kafka

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
}

// Producer produces to one topic and returns only once every in-sync
// replica has the record: the webhook source's Kafka sink. It is the
// client type, the security options and the produce call the source's
// dead letters use.
type Producer struct {
	cl      *kgo.Client
	topic   string
	timeout time.Duration
}

// NewProducer returns a Producer; it connects on the first produce. It
// fails only on options that can never work (as New).
func NewProducer(o ProducerOptions) (*Producer, error) {
	if len(o.Brokers) == 0 || o.Topic == "" {
		return nil, errors.New("kafka producer: brokers and topic must be set")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ClientID == "" {
		o.ClientID = "dedupe-proxy"
	}
	defaultDuration(&o.Timeout, 10*time.Second)
	defaultDuration(&o.NetworkTimeout, 5*time.Second)
	sec, err := SecurityOpts(o.SASL, o.TLS)
	if err != nil {
		return nil, err
	}
	opts := append(clientOpts(o.Brokers, o.ClientID, o.NetworkTimeout, 50*time.Millisecond, 500*time.Millisecond, sec, o.Logger),
		kgo.DefaultProduceTopic(o.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(max(o.Timeout, time.Second)),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &Producer{cl: cl, topic: o.Topic, timeout: o.Timeout}, nil
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
