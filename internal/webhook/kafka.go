package webhook

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
)

// KafkaSink produces events to a topic with acks=all: Publish returns
// nil only when every in-sync replica has the record. The record key
// is the event key (one event, one partition) and so is the
// bq-message-id header. It produces through the Kafka source's
// producer, with the same TLS and SASL options.
type KafkaSink struct {
	brokers []string
	p       *kafka.Producer
}

// NewKafkaSink returns a sink producing to o.Topic; it fails only on
// settings that can never work (a TLS file that cannot be read).
func NewKafkaSink(o kafka.ProducerOptions) (*KafkaSink, error) {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.NetworkTimeout <= 0 {
		o.NetworkTimeout = 2 * time.Second
	}
	p, err := kafka.NewProducer(o)
	if err != nil {
		return nil, err
	}
	return &KafkaSink{brokers: o.Brokers, p: p}, nil
}

// Publish produces e and waits for acks=all.
func (s *KafkaSink) Publish(ctx context.Context, e Event) error {
	hs := make([]kgo.RecordHeader, 0, len(e.Headers)+3)
	for k, v := range e.Headers {
		if k == "content-type" || k == HeaderMessageID || k == HeaderSource {
			continue
		}
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(e.Key)},
		kgo.RecordHeader{Key: HeaderSource, Value: []byte(e.Source)})
	if e.ContentType != "" {
		hs = append(hs, kgo.RecordHeader{Key: "content-type", Value: []byte(e.ContentType)})
	}
	return s.p.Produce(ctx, &kgo.Record{Key: []byte(e.Key), Value: e.Body, Headers: hs})
}

// Ready is nil when a broker accepts a connection: a write needs one.
func (s *KafkaSink) Ready() error {
	var errs []error
	for _, b := range s.brokers {
		c, err := net.DialTimeout("tcp", b, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close closes the producer's client (every write is synchronous: there
// is nothing to flush).
func (s *KafkaSink) Close() error {
	s.p.Close()
	return nil
}
