package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

const (
	statePending int32 = iota
	stateAcked
	stateRequeued
	stateDeadLettered
	// stateDeadLettering: a DeadLetter is producing; it goes back to
	// pending if that fails, so the caller can still settle it.
	stateDeadLettering
)

type delivery struct {
	p     *partition
	m     kafkago.Message
	msg   broker.Message
	lost  <-chan struct{}
	state atomic.Int32
	held  atomic.Bool
}

func (p *partition) newDelivery(ctx context.Context, m kafkago.Message, redelivered bool) *delivery {
	var headers map[string]string
	contentType := ""
	if len(m.Headers) > 0 {
		headers = make(map[string]string, len(m.Headers))
		// A repeated header: the last one wins, as in Java's lastHeader.
		for _, h := range m.Headers {
			headers[h.Key] = string(h.Value)
			if strings.EqualFold(h.Key, "content-type") {
				contentType = string(h.Value)
			}
		}
	}
	return &delivery{
		p:    p,
		m:    m,
		lost: ctx.Done(),
		msg: broker.Message{
			Body:        m.Value,
			ContentType: contentType,
			Headers:     headers,
			RecordKey:   m.Key,
			Source:      p.s.o.Name,
			Kind:        "kafka",
			Topic:       m.Topic,
			Partition:   m.Partition,
			Offset:      m.Offset,
			Redelivered: redelivered,
			Received:    time.Now(),
		},
	}
}

func (d *delivery) Message() *broker.Message { return &d.msg }

// finished: acked or dead-lettered, the partition may commit past it.
func (d *delivery) finished() bool {
	st := d.state.Load()
	return st == stateAcked || st == stateDeadLettered
}

// Lost is closed when the partition is revoked or the source stops.
func (d *delivery) Lost() <-chan struct{} { return d.lost }

// Ack finishes the message: the partition may commit past it.
func (d *delivery) Ack(context.Context) error {
	if !d.state.CompareAndSwap(statePending, stateAcked) {
		return broker.ErrAlreadySettled
	}
	d.p.finish(d.m.Offset)
	return nil
}

// Requeue leaves the message unfinished: nothing at or after its offset
// is committed, and it is delivered again after a rebalance or restart.
func (d *delivery) Requeue(context.Context) error {
	if !d.state.CompareAndSwap(statePending, stateRequeued) {
		return broker.ErrAlreadySettled
	}
	return nil
}

// DeadLetter produces the message to the dead-letter topic, waiting for
// every in-sync replica, and then finishes it. Without a topic it returns
// broker.ErrNoDeadLetter and the partition is held.
func (d *delivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	// Claimed before the write: two racing DeadLetters would otherwise
	// both produce.
	if !d.state.CompareAndSwap(statePending, stateDeadLettering) {
		return broker.ErrAlreadySettled
	}
	s := d.p.s
	if s.writer == nil {
		d.state.Store(statePending)
		if d.held.CompareAndSwap(false, true) {
			d.p.hold(d.m.Offset, info.Reason, nil)
		}
		return broker.ErrNoDeadLetter
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.DeadLetterTimeout)
	defer cancel()
	if err := s.writer.WriteMessages(ctx, d.deadLetterMessage(info)); err != nil {
		d.state.Store(statePending)
		err = fmt.Errorf("produce dead letter to topic %q: %w", s.o.DeadLetterTopic, err)
		if d.held.CompareAndSwap(false, true) {
			d.p.hold(d.m.Offset, info.Reason, err)
		}
		return err
	}
	d.state.Store(stateDeadLettered)
	d.p.finish(d.m.Offset)
	return nil
}

var ownHeaders = map[string]bool{
	broker.HeaderReason:         true,
	broker.HeaderLastStatus:     true,
	broker.HeaderLastError:      true,
	broker.HeaderAttempts:       true,
	broker.HeaderSource:         true,
	broker.HeaderOriginalQueue:  true,
	broker.HeaderOriginalTopic:  true,
	broker.HeaderOriginalPart:   true,
	broker.HeaderOriginalOffset: true,
	broker.HeaderDeadLetteredAt: true,
}

// deadLetterMessage keeps the original key, value and headers and adds why
// it failed and where it came from; reason headers of an earlier dead
// letter (a redriven message) are replaced, not repeated.
func (d *delivery) deadLetterMessage(info broker.DeadLetterInfo) kafkago.Message {
	hs := make([]kafkago.Header, 0, len(d.m.Headers)+9)
	for _, h := range d.m.Headers {
		if !ownHeaders[strings.ToLower(h.Key)] {
			hs = append(hs, h)
		}
	}
	add := func(k, v string) { hs = append(hs, kafkago.Header{Key: k, Value: []byte(v)}) }
	add(broker.HeaderReason, info.Reason)
	add(broker.HeaderLastStatus, strconv.Itoa(info.LastStatus))
	add(broker.HeaderLastError, info.LastError)
	add(broker.HeaderAttempts, strconv.Itoa(info.Attempts))
	add(broker.HeaderSource, d.p.s.o.Name)
	add(broker.HeaderOriginalTopic, d.m.Topic)
	add(broker.HeaderOriginalPart, strconv.Itoa(d.m.Partition))
	add(broker.HeaderOriginalOffset, strconv.FormatInt(d.m.Offset, 10))
	add(broker.HeaderDeadLetteredAt, time.Now().UTC().Format(time.RFC3339Nano))
	return kafkago.Message{Key: d.m.Key, Value: d.m.Value, Headers: hs}
}
