package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// KafkaSink produces events to a topic with acks=all: Publish returns
// nil only when every in-sync replica has the record. The record key is
// the event key (one event, one partition) and so is the bq-message-id
// header.
type KafkaSink struct {
	brokers []string
	w       *kafkago.Writer
	tr      *kafkago.Transport
}

// NewKafkaSink returns a sink producing to topic.
func NewKafkaSink(brokers []string, topic string) *KafkaSink {
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	return &KafkaSink{brokers: brokers, tr: tr, w: &kafkago.Writer{
		Addr:     kafkago.TCP(brokers...),
		Topic:    topic,
		Balancer: &kafkago.Hash{},
		// The default (no acks) reports success for a write to a dead
		// broker; the sender gets its 2xx only for a stored event.
		RequiredAcks: kafkago.RequireAll,
		// A synchronous write waits out BatchTimeout (default 1s).
		BatchTimeout:    time.Millisecond,
		MaxAttempts:     3,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
		Transport:       tr,
	}}
}

// Publish produces e and waits for acks=all.
func (s *KafkaSink) Publish(ctx context.Context, e Event) error {
	hs := make([]kafkago.Header, 0, len(e.Headers)+3)
	for k, v := range e.Headers {
		if k == "content-type" || k == HeaderMessageID || k == HeaderSource {
			continue
		}
		hs = append(hs, kafkago.Header{Key: k, Value: []byte(v)})
	}
	hs = append(hs,
		kafkago.Header{Key: HeaderMessageID, Value: []byte(e.Key)},
		kafkago.Header{Key: HeaderSource, Value: []byte(e.Source)})
	if e.ContentType != "" {
		hs = append(hs, kafkago.Header{Key: "content-type", Value: []byte(e.ContentType)})
	}
	return s.w.WriteMessages(ctx, kafkago.Message{Key: []byte(e.Key), Value: e.Body, Headers: hs})
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

// Close flushes nothing (every write is synchronous) and closes the
// writer's connections.
func (s *KafkaSink) Close() error {
	err := s.w.Close()
	s.tr.CloseIdleConnections()
	return err
}

func randID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
