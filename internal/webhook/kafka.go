package webhook

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// KafkaSink produces events to a topic with acks=all: Publish returns
// nil only when every in-sync replica has the record. The record key
// is the event key (one event, one partition) and so is the
// bq-message-id header. It produces through the Kafka source's
// producer, with the same TLS and SASL options.
//
// Run follows the target: it asks the brokers for the topic's metadata
// through the producer's own client every probeInterval, so an outage
// is logged once each way and Ready reads the last answer instead of
// reaching the network on every /readyz.
type KafkaSink struct {
	p     *kafka.Producer
	probe supervise.Probe
	// dep is up while the brokers answered the last probe; its error is
	// what Ready and Publish answer while not.
	dep *supervise.Dep

	mu     sync.Mutex
	closed bool
	cancel context.CancelFunc // Run's
	runs   sync.WaitGroup
}

// probeInterval is how often Run asks the brokers: an outage shows
// within about a second plus the network timeout, and a metadata
// request a second on a connection the client keeps open costs the
// cluster next to nothing.
const probeInterval = time.Second

// NewKafkaSink returns a sink producing to o.Topic; it connects in Run.
// It fails only on settings that can never work (a TLS file that cannot
// be read).
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
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KafkaSink{p: p,
		// A probe that gets no answer within the network timeout (a
		// dial, then one request) finds the target as down as one
		// refused.
		probe: supervise.Probe{Check: p.Reachable, Interval: probeInterval, Timeout: o.NetworkTimeout + time.Second},
		dep: supervise.New(supervise.Options{
			Log: log.With("brokers", strings.Join(o.Brokers, ","), "topic", o.Topic),
			Err: errors.New("kafka: not connected yet"),
			Lines: supervise.Lines{
				Up:      "webhook target kafka reachable",
				Lost:    "webhook target kafka unreachable; webhooks are answered 503 until it is back",
				Failing: "webhook target kafka unreachable, retrying",
			}}),
	}, nil
}

// Run probes the target until ctx ends or Close. The listener runs it
// once, beside the server.
func (s *KafkaSink) Run(ctx context.Context) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancel = cancel
	s.runs.Add(1)
	s.mu.Unlock()
	defer s.runs.Done()
	s.probe.Run(ctx, s.dep)
}

// Ready is nil while the brokers answered the last probe; it reads that
// answer, it asks nothing.
func (s *KafkaSink) Ready() error {
	if err := s.dep.Err(); err != nil {
		return err
	}
	if !s.dep.IsUp() {
		return errors.New("kafka: not reachable")
	}
	return nil
}

// Publish produces e and waits for acks=all. While the target is down
// it refuses at once: the sender is answered 503 without a request
// holding a slot for the produce timeout.
func (s *KafkaSink) Publish(ctx context.Context, e Event) error {
	if err := s.Ready(); err != nil {
		return err
	}
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

// Close stops Run and closes the producer's client (every write is
// synchronous: there is nothing to flush); safe to call twice.
func (s *KafkaSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	// Run has returned before the client closes: a probe failing on the
	// closed client is never reported as an outage.
	if cancel != nil {
		cancel()
	}
	s.runs.Wait()
	s.dep.Lose(errors.New("kafka: closed"))
	s.p.Close()
	return nil
}
