package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	r     *kgo.Record
	msg   broker.Message
	lost  <-chan struct{}
	state atomic.Int32
	held  atomic.Bool
	// lane (key order, when inLane) is the key the message waits its
	// turn by; slot: it holds one of the source's MaxInFlight slots.
	lane   laneKey
	inLane bool
	slot   atomic.Bool
}

func (p *partition) newDelivery(r *kgo.Record, lost <-chan struct{}, redelivered bool) *delivery {
	headers, contentType := recordHeaders(r.Headers)
	return &delivery{
		p:    p,
		r:    r,
		lost: lost,
		msg: broker.Message{
			Body:        r.Value,
			ContentType: contentType,
			Headers:     headers,
			RecordKey:   r.Key,
			Source:      p.s.o.Name,
			Kind:        "kafka",
			Topic:       r.Topic,
			Partition:   int(r.Partition),
			Offset:      r.Offset,
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

// Lost is closed when the partition is revoked or lost, the source stops,
// or the link to the brokers broke.
func (d *delivery) Lost() <-chan struct{} { return d.lost }

// Ack finishes the message: the partition may commit past it.
func (d *delivery) Ack(context.Context) error {
	if !d.state.CompareAndSwap(statePending, stateAcked) {
		return broker.ErrAlreadySettled
	}
	d.p.finish(d)
	return nil
}

// freeSlot gives back the slot d holds, if any.
func (d *delivery) freeSlot() {
	if d.slot.CompareAndSwap(true, false) {
		<-d.p.s.slots
	}
}

// Requeue leaves the message unfinished: nothing at or after its offset
// is committed, and it is delivered again after a rebalance or restart.
func (d *delivery) Requeue(context.Context) error {
	if !d.state.CompareAndSwap(statePending, stateRequeued) {
		return broker.ErrAlreadySettled
	}
	d.freeSlot()
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
	if s.o.DeadLetterTopic == "" {
		d.state.Store(statePending)
		if d.held.CompareAndSwap(false, true) {
			d.p.hold(d.r.Offset, info.Reason, nil)
		}
		return broker.ErrNoDeadLetter
	}
	if err := produceSync(ctx, d.p.cl, s.o.DeadLetterTimeout, d.deadLetterRecord(info)); err != nil {
		d.state.Store(statePending)
		err = fmt.Errorf("produce dead letter to topic %q: %w", s.o.DeadLetterTopic, err)
		if d.held.CompareAndSwap(false, true) {
			d.p.hold(d.r.Offset, info.Reason, err)
		}
		return err
	}
	d.state.Store(stateDeadLettered)
	d.p.finish(d)
	return nil
}

// recordHeaders are a record's headers as a message's, and its content
// type.
func recordHeaders(hs []kgo.RecordHeader) (headers map[string]string, contentType string) {
	if len(hs) == 0 {
		return nil, ""
	}
	headers = make(map[string]string, len(hs))
	// A repeated header: the last one wins, as in Java's lastHeader.
	for _, h := range hs {
		headers[h.Key] = string(h.Value)
		if strings.EqualFold(h.Key, "content-type") {
			contentType = string(h.Value)
		}
	}
	return headers, contentType
}

// deadLetterMessage keeps the original key, value and headers and adds why
// it failed and where it came from; reason headers of an earlier dead
// letter (a redriven message) are replaced, not repeated.
//
// The record keeps the original key, and the client's default partitioner
// hashes it: the same key lands in the same dead-letter partition, so a
// redrive keeps the order of a key's failures.
func (d *delivery) deadLetterRecord(info broker.DeadLetterInfo) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(d.r.Headers)+9)
	for _, h := range d.r.Headers {
		if !broker.IsDeadLetterHeader(strings.ToLower(h.Key)) {
			hs = append(hs, h)
		}
	}
	origin := []string{broker.HeaderOriginalTopic, d.r.Topic, broker.HeaderOriginalPart, strconv.Itoa(int(d.r.Partition)),
		broker.HeaderOriginalOffset, strconv.FormatInt(d.r.Offset, 10)}
	info.Headers(d.p.s.o.Name, origin, func(k string, v any) {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(fmt.Sprint(v))})
	})
	return &kgo.Record{Topic: d.p.s.o.DeadLetterTopic, Key: d.r.Key, Value: d.r.Value, Headers: hs}
}
