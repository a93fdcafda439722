// Package brokertest is the conformance suite every broker.Source must
// pass against its real broker, so the pipeline can rely on the Source and
// Delivery contract (package broker) and not on one source's behaviour.
//
// A source package wires it with a Harness that creates a fresh
// destination per case (its own queue or topic), publishes to it, cuts
// its connections and reads its dead letters. What only some brokers do
// is declared in Features; a case that needs a feature the harness lacks
// is skipped with a message naming the flag.
package brokertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// Features declares what a source does beyond the common contract.
type Features struct {
	// Requeues: Requeue hands the message back to the broker, which
	// redelivers it marked Redelivered; Source.Requeues reports true.
	Requeues bool
	// Ordered: a destination is one ordered stream (a partition). Its
	// messages reach the handler one at a time in publish order, and a
	// requeued message is handed over again in place, before the
	// messages after it.
	Ordered bool
	// Offsets: a destination is a log (one partition, 0): Offset counts
	// its messages from 0; elsewhere Partition and Offset are 0.
	Offsets bool
	// Revocation: Destination.Revoke takes the running sources'
	// assignment away (a consumer-group rebalance).
	Revocation bool
	// DeadLetter: SourceOptions.DeadLetter configures a dead-letter
	// destination that Destination.DeadLetters reads.
	DeadLetter bool
	// BodyOnly: the destination carries the body and nothing else (a
	// Redis list element is the message): no content type, headers or
	// key travel (Publish sends the body alone), and the source must
	// invent none. A dead letter still carries the body byte for byte
	// and the x-dedupe-* headers, wherever the source keeps them.
	BodyOnly bool
}

// Harness creates the world of one case.
type Harness interface {
	// Kind is what Message.Kind says: "rabbitmq", "kafka", "redis".
	Kind() string
	Features() Features
	// NewDestination returns a destination no other case uses, removed
	// when the test ends.
	NewDestination(t *testing.T) Destination
}

// SourceOptions are what the suite asks of a source.
type SourceOptions struct {
	// Name is the configured source name (Message.Source).
	Name string
	// Workers is how many handlers may run at once where the source has
	// such a setting; 1 keeps an unordered source's hand-over in broker
	// order.
	Workers int
	// DeadLetter configures the destination's dead-letter destination;
	// without it DeadLetter must return broker.ErrNoDeadLetter.
	DeadLetter bool
}

// Destination is one queue or topic (one partition) with its sources.
type Destination interface {
	// Queue and Topic are where its messages say they come from
	// (Message.Queue, Message.Topic); one of them is "".
	Queue() string
	Topic() string
	// NewSource returns a source of this destination, not yet running;
	// sources of one destination share its consumer group, so a new one
	// resumes where a stopped one left off. The suite runs and closes it.
	NewSource(t *testing.T, o SourceOptions) broker.Source
	// Publish sends messages in order and returns once the broker has
	// them. Key travels as the broker's own message key: the AMQP
	// message_id or the Kafka record key.
	Publish(t *testing.T, msgs ...Message)
	// Cut drops every connection of the destination's sources, as a
	// network fault would; they may reconnect at once.
	Cut(t *testing.T)
	// Revoke makes the running sources lose their assignment (Features.
	// Revocation only); whatever it starts for that must leave every
	// message unsettled and is stopped when the test ends.
	Revoke(t *testing.T)
	// DeadLetters reads the dead-letter destination: up to n messages,
	// waiting at most timeout for them.
	DeadLetters(t *testing.T, n int, timeout time.Duration) []DeadLetter
}

// Message is one message to publish.
type Message struct {
	Body        []byte
	ContentType string
	Headers     map[string]string
	Key         string
}

// DeadLetter is one message read from the dead-letter destination.
// Headers keep every value a header was sent with, so a repeated header
// shows.
type DeadLetter struct {
	Body    []byte
	Key     string
	Headers map[string][]string
}

const name = "conformance"

// Run runs the suite; cases run in parallel, each on its own destination.
func Run(t *testing.T, h Harness) {
	f := h.Features()
	cases := []struct {
		name string
		need string // feature flag the case needs, "" for none
		have bool
		fn   func(t *testing.T, h Harness)
	}{
		{"MessageFields", "", true, testMessageFields},
		{"SettleOnce", "", true, testSettleOnce},
		{"ConcurrentSettlesSettleOnce", "", true, testConcurrentSettles},
		{"RequeueRedelivers", "", true, testRequeueRedelivers},
		{"NoDeadLetterSettlesNothing", "", true, testNoDeadLetter},
		{"LostOnConnectionCut", "", true, testLostOnCut},
		{"RunWaitsForHandlers", "", true, testRunWaitsForHandlers},
		{"StopGivesBackUnstarted", "", true, testStopGivesBack(false)},
		{"StopGivesBackUnstartedBatches", "", true, testStopGivesBack(true)},
		{"DeadLetterHeaders", "DeadLetter", f.DeadLetter, testDeadLetterHeaders},
		{"LostOnRevocation", "Revocation", f.Revocation, testLostOnRevocation},
		{"OrderedPartition", "Ordered", f.Ordered, testOrdered},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !c.have {
				t.Skipf("SKIP: the harness does not declare Features.%s", c.need)
			}
			t.Parallel()
			c.fn(t, h)
		})
	}
}

// running is a source consuming in the background for one case.
type running struct {
	src    broker.Source
	dels   chan handed
	quit   chan struct{} // closed by stop: handlers stop waiting for the test
	cancel context.CancelFunc
	done   chan error
}

// handed is a delivery passed from the source's handler to the test,
// which settles it and then closes done to let the handler return.
type handed struct {
	d    broker.Delivery
	done chan struct{}
}

func (h handed) body() string { return string(h.d.Message().Body) }

// release lets the handler return.
func (h handed) release() { close(h.done) }

// start runs a new source of dest; the test receives its deliveries
// through next.
func start(t *testing.T, dest Destination, o SourceOptions) *running {
	t.Helper()
	r := &running{dels: make(chan handed), quit: make(chan struct{})}
	r.run(t, dest, o, r.handle)
	return r
}

// run starts Run with handler h and waits for Ready.
func (r *running) run(t *testing.T, dest Destination, o SourceOptions, h broker.Handler) {
	t.Helper()
	r.runWith(t, dest.NewSource(t, o), func(ctx context.Context) error { return r.src.Run(ctx, h) })
}

// runBatches is run through BatchSource.RunBatches; it skips the test
// when the source is not a BatchSource.
func (r *running) runBatches(t *testing.T, dest Destination, o SourceOptions, h broker.BatchHandler) {
	t.Helper()
	src := dest.NewSource(t, o)
	bs, ok := src.(broker.BatchSource)
	if !ok {
		_ = src.Close()
		t.Skip("SKIP: the source is not a broker.BatchSource")
	}
	r.runWith(t, src, func(ctx context.Context) error { return bs.RunBatches(ctx, h) })
}

func (r *running) runWith(t *testing.T, src broker.Source, run func(context.Context) error) {
	t.Helper()
	if r.quit == nil {
		r.quit = make(chan struct{})
	}
	r.src = src
	r.done = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for r.src.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("source not ready within 30s: %v", r.src.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *running) handle(d broker.Delivery) {
	h := handed{d: d, done: make(chan struct{})}
	select {
	case r.dels <- h:
	case <-r.quit:
		_ = d.Requeue(context.Background())
		return
	}
	select {
	case <-h.done:
	case <-r.quit:
		// The test gave up on it (it failed): give it back.
		_ = d.Requeue(context.Background())
	}
}

// next is the next delivery handed out.
func (r *running) next(t *testing.T) handed {
	t.Helper()
	select {
	case h := <-r.dels:
		return h
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
		return handed{}
	}
}

// none fails if a delivery is handed out within d.
func (r *running) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case h := <-r.dels:
		t.Errorf("unexpected delivery %q (redelivered %v)", h.body(), h.d.Message().Redelivered)
		_ = h.d.Requeue(context.Background())
		h.release()
	case <-time.After(d):
	}
}

// stop cancels Run and waits for it.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	close(r.quit)
	r.cancel()
	r.cancel = nil
	r.wait(t, 30*time.Second)
}

// wait waits for Run to return after it was cancelled, and closes the
// source.
func (r *running) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(d):
		t.Fatalf("Run did not return within %s of cancel", d)
	}
	if err := r.src.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// remaining is what the case's sources, stopped before, left for the
// next consumer: it publishes a sentinel, consumes the destination with a
// fresh source up to it, acking everything, and returns the bodies handed
// out before the sentinel, in order.
func remaining(t *testing.T, dest Destination) []string {
	t.Helper()
	sentinel := "sentinel-" + randHex()
	dest.Publish(t, Message{Body: []byte(sentinel), Key: sentinel})
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	defer r.stop(t)
	var got []string
	for {
		h := r.next(t)
		b := h.body()
		if err := h.d.Ack(context.Background()); err != nil {
			t.Errorf("Ack of %q while draining: %v", b, err)
		}
		h.release()
		if b == sentinel {
			return got
		}
		got = append(got, b)
	}
}

// mustRemainNothing fails when a fresh source finds anything left.
func mustRemainNothing(t *testing.T, dest Destination) {
	t.Helper()
	if left := remaining(t, dest); len(left) > 0 {
		t.Fatalf("messages delivered again to a fresh source: %q; every one was settled", left)
	}
}

func randHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bodies are n distinct message bodies for one case.
func bodies(prefix string, n int) []Message {
	ms := make([]Message, n)
	for i := range ms {
		id := fmt.Sprintf("%s-%d", prefix, i)
		ms[i] = Message{Body: []byte(id), Key: id}
	}
	return ms
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func waitClosed(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}

// Message carries what was published, byte for byte, and where it came
// from.
func testMessageFields(t *testing.T, h Harness) {
	f := h.Features()
	dest := h.NewDestination(t)
	msgs := []Message{
		{Body: []byte{0, 1, 2, 0xff, 0xfe, '\n', '"', '{'}, ContentType: "application/octet-stream",
			Headers: map[string]string{"x-tenant": "acme", "x-trace": "t-1"}, Key: "key-0"},
		{Body: []byte(`{"meta":{"id":"m-1"},"data":"é"}`), ContentType: "application/json",
			Headers: map[string]string{"x-tenant": "beta"}, Key: "key-1"},
		{Body: []byte("no headers"), Key: "key-2"},
	}
	if f.BodyOnly {
		// Only the body travels: it is what identifies a delivery here.
		for i := range msgs {
			msgs[i] = Message{Body: msgs[i].Body}
		}
	}
	before := time.Now()
	dest.Publish(t, msgs...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	if r.src.Name() != name {
		t.Errorf("Name() = %q, want %q", r.src.Name(), name)
	}
	if r.src.Requeues() != f.Requeues {
		t.Errorf("Requeues() = %v, but the harness declares Features.Requeues %v", r.src.Requeues(), f.Requeues)
	}
	seen := map[string]bool{}
	for range msgs {
		d := r.next(t)
		m := *d.d.Message()
		if err := d.d.Ack(context.Background()); err != nil {
			t.Errorf("Ack: %v", err)
		}
		d.release()
		key := m.MessageID + string(m.RecordKey)
		match := func(p Message) bool { return p.Key == key }
		if f.BodyOnly {
			if key != "" || m.ContentType != "" || len(m.Headers) != 0 {
				t.Errorf("body-only delivery %q has MessageID %q, RecordKey %q, ContentType %q, headers %v: none was published", m.Body, m.MessageID, m.RecordKey, m.ContentType, m.Headers)
			}
			key = string(m.Body)
			match = func(p Message) bool { return string(p.Body) == key }
		}
		i := slices.IndexFunc(msgs, match)
		if i < 0 || seen[key] {
			t.Errorf("delivery with key %q (MessageID %q, RecordKey %q): not published or seen twice", key, m.MessageID, m.RecordKey)
			continue
		}
		seen[key] = true
		p := msgs[i]
		if m.MessageID != "" && m.RecordKey != nil {
			t.Errorf("%s: both MessageID %q and RecordKey %q set", p.Key, m.MessageID, m.RecordKey)
		}
		if !bytes.Equal(m.Body, p.Body) {
			t.Errorf("%s: body %q, want %q byte for byte", p.Key, m.Body, p.Body)
		}
		if m.ContentType != p.ContentType {
			t.Errorf("%s: ContentType %q, want %q", p.Key, m.ContentType, p.ContentType)
		}
		for k, v := range p.Headers {
			if got, ok := m.Headers[k]; !ok || got != v {
				t.Errorf("%s: header %s = %q (present %v), want %q", p.Key, k, got, ok, v)
			}
		}
		if m.Source != name || m.Kind != h.Kind() {
			t.Errorf("%s: Source %q Kind %q, want %q %q", p.Key, m.Source, m.Kind, name, h.Kind())
		}
		if m.Queue != dest.Queue() || m.Topic != dest.Topic() {
			t.Errorf("%s: Queue %q Topic %q, want %q %q", p.Key, m.Queue, m.Topic, dest.Queue(), dest.Topic())
		}
		wantOffset := int64(0)
		if f.Offsets {
			wantOffset = int64(i)
		}
		if m.Partition != 0 || m.Offset != wantOffset {
			t.Errorf("%s: partition %d offset %d, want 0 and %d", p.Key, m.Partition, m.Offset, wantOffset)
		}
		if m.Redelivered {
			t.Errorf("%s: Redelivered on its first delivery", p.Key)
		}
		if m.Received.Before(before) || m.Received.After(time.Now()) {
			t.Errorf("%s: Received %v, not during the test", p.Key, m.Received)
		}
	}
}

// After the first settle every Ack, Requeue and DeadLetter returns
// broker.ErrAlreadySettled and never reaches the broker (RabbitMQ closes
// the channel on a tag acked twice): the source keeps working, its later
// deliveries stay valid, and nothing is redelivered or dead-lettered.
func testSettleOnce(t *testing.T, h Harness) {
	f := h.Features()
	dest := h.NewDestination(t)
	msgs := bodies("settle", 5)
	dest.Publish(t, msgs...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1, DeadLetter: f.DeadLetter})
	ctx := context.Background()

	first := r.next(t)
	if err := first.d.Ack(ctx); err != nil {
		t.Fatalf("first Ack: %v", err)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"second Ack", first.d.Ack(ctx)},
		{"Requeue after Ack", first.d.Requeue(ctx)},
		{"DeadLetter after Ack", first.d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "x"})},
	} {
		if !errors.Is(c.err, broker.ErrAlreadySettled) {
			t.Errorf("%s = %v, want ErrAlreadySettled", c.what, c.err)
		}
	}
	first.release()

	for i := range len(msgs) - 1 {
		d := r.next(t)
		if i == 0 {
			// Well past any ack batching: a settle that reached the
			// broker twice would have cost this delivery its channel.
			time.Sleep(200 * time.Millisecond)
		}
		if d.body() == first.body() || d.d.Message().Redelivered {
			t.Errorf("delivery %q (redelivered %v) after the double settle", d.body(), d.d.Message().Redelivered)
		}
		if isClosed(d.d.Lost()) {
			t.Errorf("delivery %q lost after the double settle", d.body())
		}
		if err := d.d.Ack(ctx); err != nil {
			t.Errorf("Ack of %q: %v", d.body(), err)
		}
		d.release()
	}
	if err := r.src.Ready(); err != nil {
		t.Errorf("Ready = %v after the double settle", err)
	}
	r.none(t, 300*time.Millisecond)
	r.stop(t)
	mustRemainNothing(t, dest)
	if f.DeadLetter {
		if dl := dest.DeadLetters(t, 1, time.Second); len(dl) != 0 {
			t.Fatalf("%d dead letters after a DeadLetter that followed an Ack", len(dl))
		}
	}
}

// Settles racing on one delivery: exactly one goes through. With a dead
// letter configured, racing DeadLetters produce exactly one dead letter.
func testConcurrentSettles(t *testing.T, h Harness) {
	f := h.Features()
	dest := h.NewDestination(t)
	msgs := bodies("race", 2)
	dest.Publish(t, msgs...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1, DeadLetter: f.DeadLetter})
	ctx := context.Background()

	race := func(n int, settle func(i int) error) (ok int, requeued bool) {
		errs := make([]error, n)
		var ready, wg sync.WaitGroup
		ready.Add(n)
		wg.Add(n)
		for i := range n {
			go func() {
				defer wg.Done()
				ready.Done()
				ready.Wait()
				errs[i] = settle(i)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				requeued = i%2 == 1
			case !errors.Is(err, broker.ErrAlreadySettled):
				t.Errorf("racing settle %d = %v, want nil or ErrAlreadySettled", i, err)
			}
		}
		return ok, requeued
	}

	d := r.next(t)
	ok, requeued := race(8, func(i int) error {
		if i%2 == 0 {
			return d.d.Ack(ctx)
		}
		return d.d.Requeue(ctx)
	})
	d.release()
	if ok != 1 {
		t.Fatalf("%d of 8 racing Ack/Requeue went through, want 1", ok)
	}
	// The second message, and the first again if the Requeue won, in
	// the order the source hands them over.
	first, second, again := d.body(), false, !requeued
	for !second || !again {
		d = r.next(t)
		switch {
		case d.body() == first && !again:
			if !d.d.Message().Redelivered {
				t.Errorf("%q after the winning Requeue not marked Redelivered", first)
			}
			again = true
			_ = d.d.Ack(ctx)
		case d.body() == first:
			t.Fatalf("%q delivered once more than settled", first)
		case f.DeadLetter:
			second = true
			ok, _ = race(4, func(int) error { return d.d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "permanent: status 400"}) })
			if ok != 1 {
				t.Errorf("%d of 4 racing DeadLetters went through, want 1", ok)
			}
		default:
			second = true
			_ = d.d.Ack(ctx)
		}
		d.release()
	}
	r.none(t, 300*time.Millisecond)
	if err := r.src.Ready(); err != nil {
		t.Errorf("Ready = %v after racing settles", err)
	}
	r.stop(t)
	mustRemainNothing(t, dest)
	if f.DeadLetter {
		// Asked for one more than expected: a second would show.
		if dl := dest.DeadLetters(t, 2, 2*time.Second); len(dl) != 1 {
			t.Fatalf("%d dead letters from racing DeadLetters, want 1", len(dl))
		}
	}
}

// A requeued message is delivered again, marked Redelivered: by the
// broker (Requeues), or in place, before the messages after it (Ordered).
func testRequeueRedelivers(t *testing.T, h Harness) {
	f := h.Features()
	dest := h.NewDestination(t)
	msgs := bodies("requeue", 3)
	dest.Publish(t, msgs...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	ctx := context.Background()
	var got []string
	for range len(msgs) + 1 {
		d := r.next(t)
		m := d.d.Message()
		got = append(got, fmt.Sprintf("%s:%v", m.Body, m.Redelivered))
		var err error
		if len(got) == 1 {
			err = d.d.Requeue(ctx)
		} else {
			err = d.d.Ack(ctx)
		}
		if err != nil {
			t.Errorf("settle %q: %v", m.Body, err)
		}
		d.release()
	}
	r.none(t, 500*time.Millisecond)
	want := []string{"requeue-0:false", "requeue-0:true", "requeue-1:false", "requeue-2:false"}
	if f.Ordered {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("deliveries %v, want %v: the requeued message again in place", got, want)
		}
	} else if sorted := slices.Sorted(slices.Values(got)); fmt.Sprint(sorted) != fmt.Sprint(want) || got[0] != want[0] {
		t.Fatalf("deliveries %v, want %v in any order after the first", got, want)
	}
	r.stop(t)
	mustRemainNothing(t, dest)
}

// Without a dead-letter destination DeadLetter returns
// broker.ErrNoDeadLetter and settles nothing: the message can still be
// requeued, and later acked.
func testNoDeadLetter(t *testing.T, h Harness) {
	dest := h.NewDestination(t)
	msgs := bodies("nodl", 2)
	dest.Publish(t, msgs...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	ctx := context.Background()
	info := broker.DeadLetterInfo{Reason: "permanent: status 400", LastStatus: 400, Attempts: 3}
	seen := map[string]int{}
	for len(seen) < 2 || seen["nodl-0"] < 2 {
		d := r.next(t)
		b := d.body()
		seen[b]++
		switch {
		case b == "nodl-0" && seen[b] == 1:
			if err := d.d.DeadLetter(ctx, info); !errors.Is(err, broker.ErrNoDeadLetter) {
				t.Errorf("DeadLetter without a dead letter = %v, want ErrNoDeadLetter", err)
			}
			if err := d.d.Requeue(ctx); err != nil {
				t.Errorf("Requeue after ErrNoDeadLetter = %v: it was not settled", err)
			}
		case b == "nodl-0":
			if !d.d.Message().Redelivered {
				t.Errorf("requeued message not marked Redelivered")
			}
			if err := d.d.DeadLetter(ctx, info); !errors.Is(err, broker.ErrNoDeadLetter) {
				t.Errorf("second DeadLetter = %v, want ErrNoDeadLetter", err)
			}
			if err := d.d.Ack(ctx); err != nil {
				t.Errorf("Ack after ErrNoDeadLetter = %v: it was not settled", err)
			}
			if err := d.d.Ack(ctx); !errors.Is(err, broker.ErrAlreadySettled) {
				t.Errorf("second Ack = %v, want ErrAlreadySettled", err)
			}
		default:
			if err := d.d.Ack(ctx); err != nil {
				t.Errorf("Ack of %q: %v", b, err)
			}
		}
		d.release()
	}
	r.none(t, 300*time.Millisecond)
	r.stop(t)
	mustRemainNothing(t, dest)
}

// A connection cut closes Lost of the deliveries in hand (and only then),
// and the message comes back once the source has reconnected.
func testLostOnCut(t *testing.T, h Harness) {
	dest := h.NewDestination(t)
	dest.Publish(t, bodies("cut", 1)...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	ctx := context.Background()

	d := r.next(t)
	if waitClosed(d.d.Lost(), 300*time.Millisecond) {
		t.Fatal("Lost closed while the connection was up")
	}
	dest.Cut(t)
	if !waitClosed(d.d.Lost(), 20*time.Second) {
		t.Fatal("Lost not closed within 20s of the connection cut")
	}
	// Settling may fail now; the broker redelivers either way.
	_ = d.d.Requeue(ctx)
	d.release()

	again := r.next(t)
	if again.body() != d.body() {
		t.Fatalf("after the cut got %q, want %q back", again.body(), d.body())
	}
	if isClosed(again.d.Lost()) {
		t.Error("Lost of a delivery after the reconnect is closed")
	}
	if err := again.d.Ack(ctx); err != nil {
		t.Errorf("Ack after the reconnect: %v", err)
	}
	again.release()
	r.none(t, 300*time.Millisecond)
	r.stop(t)
	mustRemainNothing(t, dest)
}

// A rebalance that takes the assignment away closes Lost of the
// deliveries in hand.
func testLostOnRevocation(t *testing.T, h Harness) {
	dest := h.NewDestination(t)
	dest.Publish(t, bodies("revoke", 1)...)
	r := start(t, dest, SourceOptions{Name: name, Workers: 1})
	d := r.next(t)
	if waitClosed(d.d.Lost(), 300*time.Millisecond) {
		t.Fatal("Lost closed before the revocation")
	}
	dest.Revoke(t)
	if !waitClosed(d.d.Lost(), 30*time.Second) {
		t.Fatal("Lost not closed within 30s of the revocation")
	}
	_ = d.d.Requeue(context.Background())
	d.release()
}

// Cancelling Run does not return before a running handler has returned,
// and what that handler settles meanwhile takes effect.
func testRunWaitsForHandlers(t *testing.T, h Harness) {
	dest := h.NewDestination(t)
	dest.Publish(t, bodies("wait", 1)...)
	started, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	r := &running{}
	r.run(t, dest, SourceOptions{Name: name, Workers: 1}, func(d broker.Delivery) {
		close(started)
		<-release // ignores Lost and ctx on purpose: a slow app
		if err := d.Ack(context.Background()); err != nil {
			t.Errorf("Ack while Run is stopping: %v", err)
		}
		returned.Store(true)
	})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) while its handler was still running", err)
	case <-time.After(time.Second):
	}
	close(release)
	r.wait(t, 30*time.Second)
	if !returned.Load() {
		t.Fatal("Run returned before its handler did")
	}
	mustRemainNothing(t, dest)
}

// Stopping while handlers are blocked and more messages were fetched:
// the handlers finish, nothing new is handed out, and afterwards a fresh
// source gets exactly the messages that were not acked — none lost, none
// acked twice. With batches (a BatchSource's RunBatches) the handler
// finishes the delivery it is working on and, as on shutdown it may,
// leaves the rest of its batch unsettled.
func testStopGivesBack(batches bool) func(t *testing.T, h Harness) {
	return func(t *testing.T, h Harness) { stopGivesBack(t, h, batches) }
}

func stopGivesBack(t *testing.T, h Harness, batches bool) {
	dest := h.NewDestination(t)
	msgs := bodies("stop", 30)
	// A few now, the rest once the handlers are blocked: those are
	// fetched while nothing can take them.
	dest.Publish(t, msgs[:5]...)
	var (
		mu        sync.Mutex
		handedOut []string
		acked     []string
		late      []string
		stopped   bool
	)
	release := make(chan struct{})
	// handOut records deliveries handed out; false once Run was
	// cancelled.
	handOut := func(ds ...broker.Delivery) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			if stopped {
				late = append(late, string(d.Message().Body))
			} else {
				handedOut = append(handedOut, string(d.Message().Body))
			}
		}
		return !stopped
	}
	work := func(d broker.Delivery) {
		b := string(d.Message().Body)
		<-release
		if err := d.Ack(context.Background()); err != nil {
			t.Errorf("Ack of %q while Run is stopping: %v", b, err)
			return
		}
		mu.Lock()
		acked = append(acked, b)
		mu.Unlock()
	}
	isStopped := func() bool { mu.Lock(); defer mu.Unlock(); return stopped }
	r := &running{}
	o := SourceOptions{Name: name, Workers: 2}
	if batches {
		r.runBatches(t, dest, o, func(ds []broker.Delivery) {
			if !handOut(ds...) {
				return
			}
			for i, d := range ds {
				if i > 0 && isStopped() {
					return
				}
				work(d)
			}
		})
	} else {
		r.run(t, dest, o, func(d broker.Delivery) {
			if !handOut(d) {
				_ = d.Requeue(context.Background())
				return
			}
			work(d)
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(handedOut) }
	deadline := time.Now().Add(20 * time.Second)
	for count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no delivery within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	dest.Publish(t, msgs[5:]...)
	// Every worker blocked, the rest fetched or waiting.
	for n := -1; n != count() || n < 1; {
		if time.Now().After(deadline) {
			t.Fatal("no delivery within 20s")
		}
		n = count()
		time.Sleep(300 * time.Millisecond)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	r.cancel()
	r.cancel = nil
	time.Sleep(300 * time.Millisecond)
	close(release)
	r.wait(t, 30*time.Second)

	mu.Lock()
	done := slices.Clone(acked)
	if len(late) > 0 {
		t.Errorf("handed out after Run was cancelled: %q", late)
	}
	mu.Unlock()
	if len(done) == 0 || len(done) >= len(msgs) {
		t.Fatalf("%d of %d messages acked: the case needs some acked and some left to give back", len(done), len(msgs))
	}
	var want []string
	for _, m := range msgs {
		if !slices.Contains(done, string(m.Body)) {
			want = append(want, string(m.Body))
		}
	}
	left := remaining(t, dest)
	slices.Sort(left)
	slices.Sort(want)
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("after stop a fresh source got %d messages %q\nwant the %d not acked %q (acked: %q)", len(left), left, len(want), want, done)
	}
}

// DeadLetter moves the message to the dead-letter destination with its
// body, key and headers and the x-dedupe-* headers, each once, and
// settles it.
func testDeadLetterHeaders(t *testing.T, h Harness) {
	dest := h.NewDestination(t)
	poison := Message{
		Body: []byte{'p', 0, 0xff, 'n'}, ContentType: "application/octet-stream", Key: "poison-key",
		// A redriven message carries the reason of its earlier dead
		// letter: replaced, not repeated.
		Headers: map[string]string{"x-tenant": "acme", broker.HeaderReason: "old reason"},
	}
	bodyOnly := h.Features().BodyOnly
	if bodyOnly {
		poison = Message{Body: poison.Body}
	}
	dest.Publish(t, poison, Message{Body: []byte("fine"), Key: "fine"})
	before := time.Now()
	r := start(t, dest, SourceOptions{Name: name, Workers: 1, DeadLetter: true})
	ctx := context.Background()
	info := broker.DeadLetterInfo{Reason: "permanent: status 400", LastStatus: 400, LastError: "connection reset", Attempts: 3}
	var origin broker.Message
	for range 2 {
		d := r.next(t)
		if bytes.Equal(d.d.Message().Body, poison.Body) {
			origin = *d.d.Message()
			if err := d.d.DeadLetter(ctx, info); err != nil {
				t.Fatalf("DeadLetter: %v", err)
			}
			if err := d.d.DeadLetter(ctx, info); !errors.Is(err, broker.ErrAlreadySettled) {
				t.Errorf("second DeadLetter = %v, want ErrAlreadySettled", err)
			}
		} else if err := d.d.Ack(ctx); err != nil {
			t.Errorf("Ack: %v", err)
		}
		d.release()
	}
	dls := dest.DeadLetters(t, 2, 2*time.Second)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if !bytes.Equal(dl.Body, poison.Body) || dl.Key != poison.Key {
		t.Errorf("dead letter body %q key %q, want %q %q", dl.Body, dl.Key, poison.Body, poison.Key)
	}
	want := map[string]string{
		broker.HeaderReason:     info.Reason,
		broker.HeaderLastStatus: "400",
		broker.HeaderLastError:  info.LastError,
		broker.HeaderAttempts:   "3",
		broker.HeaderSource:     name,
	}
	if !bodyOnly {
		want["x-tenant"] = "acme"
	}
	if origin.Queue != "" {
		want[broker.HeaderOriginalQueue] = origin.Queue
	}
	if origin.Topic != "" {
		want[broker.HeaderOriginalTopic] = origin.Topic
		want[broker.HeaderOriginalPart] = fmt.Sprint(origin.Partition)
		want[broker.HeaderOriginalOffset] = fmt.Sprint(origin.Offset)
	}
	for k, v := range want {
		if got := dl.Headers[k]; len(got) != 1 || got[0] != v {
			t.Errorf("dead letter header %s = %q, want once %q", k, got, v)
		}
	}
	if at := dl.Headers[broker.HeaderDeadLetteredAt]; len(at) != 1 {
		t.Errorf("dead letter header %s = %q, want once", broker.HeaderDeadLetteredAt, at)
	} else if ts, err := time.Parse(time.RFC3339Nano, at[0]); err != nil || ts.Before(before.Add(-time.Second)) || ts.After(time.Now().Add(time.Second)) {
		t.Errorf("dead letter header %s = %q: not a time during the test (%v)", broker.HeaderDeadLetteredAt, at[0], err)
	}
	r.none(t, 300*time.Millisecond)
	r.stop(t)
	mustRemainNothing(t, dest)
}

// An ordered destination hands its messages over one at a time, in
// publish (offset) order.
func testOrdered(t *testing.T, h Harness) {
	f := h.Features()
	dest := h.NewDestination(t)
	msgs := bodies("ordered", 40)
	dest.Publish(t, msgs...)
	var (
		mu   sync.Mutex
		busy bool
		got  []string
		bad  []string
		all  = make(chan struct{})
	)
	r := &running{}
	r.run(t, dest, SourceOptions{Name: name, Workers: 4}, func(d broker.Delivery) {
		m := d.Message()
		mu.Lock()
		if busy {
			bad = append(bad, fmt.Sprintf("%s handed over while another was running", m.Body))
		}
		if want := int64(len(got)); f.Offsets && m.Offset != want {
			bad = append(bad, fmt.Sprintf("%s at offset %d, want %d", m.Body, m.Offset, want))
		}
		busy = true
		got = append(got, string(m.Body))
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		busy = false
		if len(got) == len(msgs) {
			close(all)
		}
		mu.Unlock()
		_ = d.Ack(context.Background())
	})
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message delivered within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, b := range got {
		if b != string(msgs[i].Body) {
			bad = append(bad, fmt.Sprintf("delivery %d is %s", i, b))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("order broken: %v", bad)
	}
}
