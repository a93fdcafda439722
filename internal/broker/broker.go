// Package broker defines what dedupe-proxy needs from a message source: a
// stream of deliveries, each settled exactly once. Implementations live in
// sub-packages (rabbitmq, kafka, redissource); the pipeline depends only on this
// package.
package broker

import (
	"context"
	"errors"
	"time"
)

// Message is the broker-neutral view of one delivery. Body is the payload
// as received; nobody may modify it (it reaches the app byte for byte).
type Message struct {
	Body        []byte
	ContentType string
	// Headers are the message's own headers, stringified (AMQP table values,
	// Kafka record headers).
	Headers map[string]string
	// MessageID is the AMQP message_id property, or a Redis stream
	// entry's bq-message-id field ("" elsewhere).
	MessageID string
	// RecordKey is the Kafka record key (nil elsewhere).
	RecordKey []byte
	// BodyJSON is what is known of Body's syntax: JSONUnchecked until
	// something read it (a key rule on the body does), so the body is
	// checked once for the key and for the app's Content-Type.
	BodyJSON JSONCheck
	// Unforwardable says why the message cannot be forwarded as it came
	// (a Redis stream entry without its body field: its data is in
	// fields the app would not see); "" for a message that can. The
	// pipeline gives up on it at once: dead-lettered, or given back.
	Unforwardable string

	// Source is the configured source name; Kind is "rabbitmq", "kafka"
	// or "redis".
	Source string
	Kind   string
	// Origin: where the message came from, for the app and for dead letters.
	Queue       string
	Topic       string
	Partition   int
	Offset      int64
	Redelivered bool
	Received    time.Time
}

// JSONCheck says whether a message body is one JSON value.
type JSONCheck uint8

const (
	JSONUnchecked JSONCheck = iota
	JSONValid
	JSONInvalid
)

// DeadLetterInfo says why a message is being dead-lettered; it travels with
// the message in headers so an operator can decide on a redrive.
type DeadLetterInfo struct {
	Reason     string // short cause: "status 400", "max attempts", "no key", "body too large"
	LastStatus int    // last HTTP status from the app, 0 if none
	LastError  string // last transport error, "" if none
	Attempts   int
}

// Delivery is one message handed to the pipeline by a Source.
//
// Exactly one of Ack, Requeue or DeadLetter must be called, once; after that
// the Delivery must not be used. Ack is called only after the message was
// processed (the app succeeded and the key was committed) or was found to be
// a duplicate. Requeue gives the message back for a later redelivery: it is
// what happens on shutdown, on a busy key and when retries run out with no
// dead letter configured. DeadLetter moves the message to the configured
// dead-letter destination and then settles it; if that fails the error is
// returned and the message is requeued instead, never dropped.
//
// A delivery settles once: a second Ack, Requeue or DeadLetter (or one
// racing the first) returns ErrAlreadySettled and never reaches the
// broker. A DeadLetter that failed settled nothing, so the Requeue after
// it is the first settle.
//
// Settling can fail when the broker connection was lost meanwhile; the
// broker then redelivers the message by itself, which is safe because the
// seen-set recognises the key.
type Delivery interface {
	Message() *Message
	Ack(ctx context.Context) error
	Requeue(ctx context.Context) error
	DeadLetter(ctx context.Context, info DeadLetterInfo) error
	// Lost is closed when the delivery can no longer be settled by this
	// process (the channel closed, the partition was revoked): the broker
	// will redeliver it, so retrying it here is wasted work.
	Lost() <-chan struct{}
}

// GiveBacker is a Delivery whose broker counts deliveries toward a limit
// of its own (a Redis stream's delivery count, read against
// max_deliveries). GiveBack settles like Requeue, for a message that
// never reached the app this time (stopped while its key was busy, the
// seen-set or the app down): that delivery is not counted, so a dead
// letter's count is one of attempts the app saw or could not take.
type GiveBacker interface {
	GiveBack(ctx context.Context) error
}

// Handler processes one delivery and settles it, before returning or,
// handed on (the pipeline holds a message whose key is busy off the
// source's worker), later: a source that stops waits for those too
// (Unsettled) before it closes what they settle on. A Source calls
// Handler from as many goroutines as its concurrency allows, and in order
// for deliveries whose order it must keep (a Kafka partition, whose
// handler never hands a delivery on).
type Handler func(Delivery)

// BatchHandler processes deliveries of one ordered stream (a Kafka
// partition) that were fetched together, in order, as a Handler would
// one after the other, and settles each before it returns — except on
// shutdown or when the deliveries were lost. Seeing them together lets
// it claim all their keys in one seen-set round trip.
type BatchHandler func([]Delivery)

// BatchSource is a Source that can hand over batches. A caller that has
// a BatchHandler uses RunBatches instead of Run.
type BatchSource interface {
	Source
	RunBatches(ctx context.Context, h BatchHandler) error
}

// SetHandler processes deliveries that need no order among them — a
// Kafka partition in key order hands over, together, fetched messages
// whose keys differ — and settles each before it returns, except on
// shutdown or when the deliveries were lost. It may forward them all at
// once, so that a slow or failing one holds only itself; seeing them
// together lets it claim their keys in one seen-set round trip.
type SetHandler func([]Delivery)

// SetSource is a BatchSource that can also hand over sets. A caller that
// has both handlers uses RunSets instead of RunBatches.
type SetSource interface {
	BatchSource
	RunSets(ctx context.Context, h BatchHandler, set SetHandler) error
}

// Source consumes from one broker destination.
type Source interface {
	// Name is the configured source name.
	Name() string
	// Run consumes and calls h for each delivery until ctx is cancelled,
	// reconnecting with backoff on its own when the broker goes away; it
	// returns a non-nil error only for a problem retrying cannot fix (bad
	// credentials, missing queue are retried too: an operator may be
	// fixing them). When ctx is cancelled Run stops fetching, requeues
	// deliveries fetched but not yet handed out, waits for running
	// handlers to return, closes its connections and returns nil.
	Run(ctx context.Context, h Handler) error
	// Requeues reports whether Requeue hands the message back to the broker
	// for another consumer (RabbitMQ). When false (Kafka, where a partition
	// is ordered), the pipeline keeps retrying the message itself and
	// Requeue only means "do not commit past it".
	Requeues() bool
	// Ready reports nil when the source is connected and consuming.
	Ready() error
	// Close releases anything Run left behind; safe to call twice.
	Close() error
}

// ErrNotConnected is returned by Ready while a Source is (re)connecting.
var ErrNotConnected = errors.New("broker: not connected")

// ErrAlreadySettled is returned by Ack, Requeue and DeadLetter on a
// delivery that was already settled; the broker was not asked again (a
// RabbitMQ tag acked twice closes the channel with everything in flight).
var ErrAlreadySettled = errors.New("broker: delivery already settled")

// ErrNoDeadLetter is returned by DeadLetter when the source has no
// dead-letter destination configured; nothing was settled, and the caller
// requeues (RabbitMQ) or keeps retrying (Kafka) instead.
var ErrNoDeadLetter = errors.New("broker: no dead-letter destination configured")

// Dead-letter headers added to every message a source dead-letters itself.
const (
	HeaderReason         = "x-dedupe-reason"
	HeaderLastStatus     = "x-dedupe-last-status"
	HeaderLastError      = "x-dedupe-last-error"
	HeaderAttempts       = "x-dedupe-attempts"
	HeaderSource         = "x-dedupe-source"
	HeaderOriginalQueue  = "x-dedupe-original-queue"
	HeaderOriginalTopic  = "x-dedupe-original-topic"
	HeaderOriginalPart   = "x-dedupe-original-partition"
	HeaderOriginalOffset = "x-dedupe-original-offset"
	HeaderDeadLetteredAt = "x-dedupe-dead-lettered-at"
)

// Headers writes the dead-letter headers of a message of source, in
// order, through set: why it failed, where it came from (origin, header
// names and values in pairs, as each broker knows it), and when. The
// last status and the attempts are ints, the rest strings, so a broker
// with typed headers (AMQP) keeps the numbers numbers. Every source
// writes its dead letters' headers here, so they cannot diverge.
func (info DeadLetterInfo) Headers(source string, origin []string, set func(name string, value any)) {
	set(HeaderReason, info.Reason)
	set(HeaderLastStatus, info.LastStatus)
	set(HeaderLastError, info.LastError)
	set(HeaderAttempts, info.Attempts)
	set(HeaderSource, source)
	for i := 0; i+1 < len(origin); i += 2 {
		set(origin[i], origin[i+1])
	}
	set(HeaderDeadLetteredAt, time.Now().UTC().Format(time.RFC3339Nano))
}

// IsDeadLetterHeader reports whether name (lower-case) is a header
// Headers writes: a dead letter dead-lettered again has them replaced,
// not repeated.
func IsDeadLetterHeader(name string) bool {
	switch name {
	case HeaderReason, HeaderLastStatus, HeaderLastError, HeaderAttempts, HeaderSource,
		HeaderOriginalQueue, HeaderOriginalTopic, HeaderOriginalPart, HeaderOriginalOffset, HeaderDeadLetteredAt:
		return true
	}
	return false
}
