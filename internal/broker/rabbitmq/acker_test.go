package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Against the real broker: acks in random order, some nacks with requeue,
// one delivery left unsettled for a while (a slow message). Every ack must
// reach the broker exactly once — a tag acked twice closes the channel
// (406) — and the slow message must not hold back the acks behind it.
func TestAckerCoalescesWithoutDoubleAcks(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.acker.", nil)
	const n = 300
	for i := range n {
		r.Publish(q, amqp.Publishing{Body: []byte{byte(i)}})
	}
	ch, err := r.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tags []uint64
	for len(tags) < n {
		select {
		case d := <-dels:
			tags = append(tags, d.DeliveryTag)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of %d deliveries", len(tags), n)
		}
	}
	a := newAcker(ch, slog.New(slog.DiscardHandler))
	slow := tags[0]
	rest := tags[1:]
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	requeued := 0
	for i, tag := range rest {
		if i%10 == 0 {
			if err := a.nack(tag, true); err != nil {
				t.Fatal(err)
			}
			requeued++
			continue
		}
		if err := a.ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	// The slow first delivery is still open: the acks behind it must have
	// gone out anyway (flushed alone) without any tag acked twice.
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker: %v", e)
	default:
	}
	if err := a.ack(slow); err != nil {
		t.Fatal(err)
	}
	a.close(true)
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker after the last ack: %v", e)
	default:
	}
	// Closing the channel returns what is unacked: only the requeued ones
	// (redelivered to this consumer meanwhile) may be left.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "exactly the requeued messages back in the queue", func() bool {
		return r.Ready(q) == requeued
	})
	if err := a.ack(tags[1]); err != amqp.ErrClosed {
		t.Fatalf("ack after close = %v, want ErrClosed", err)
	}
}

// Against the real broker, with several workers settling concurrently and
// out of order: a few messages stay stuck the whole time while thousands
// behind them are acked or requeued. No tag may be acked twice (the
// channel would close) and no multiple ack may cover a stuck message:
// once the channel closes, exactly the stuck and the requeued ones are
// back in the queue.
func TestAckerStuckTagsNeverCoveredOrDoubleAcked(t *testing.T) {
	r := testutil.NewRabbit(t)
	q := r.Queue("dptest.acker.", nil)
	const n = 3000
	ch, tags := consumeAll(t, r, q, n)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	a := newAcker(ch, slog.New(slog.DiscardHandler))

	stuck := map[uint64]bool{tags[0]: true, tags[700]: true, tags[701]: true, tags[2999]: true}
	var rest []uint64
	for _, tag := range tags {
		if !stuck[tag] {
			rest = append(rest, tag)
		}
	}
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	const workers = 8
	var wg sync.WaitGroup
	var requeued atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(rest); i += workers {
				var err error
				if rest[i]%7 == 0 {
					err = a.nack(rest[i], true)
					requeued.Add(1)
				} else {
					err = a.ack(rest[i])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A tag settled a second time is refused, not sent.
	if err := a.ack(rest[0]); !errors.Is(err, broker.ErrAlreadySettled) {
		t.Fatalf("second ack = %v, want ErrAlreadySettled", err)
	}
	if err := a.nack(rest[1], true); !errors.Is(err, broker.ErrAlreadySettled) {
		t.Fatalf("nack after settle = %v, want ErrAlreadySettled", err)
	}
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker: %v", e)
	default:
	}
	a.close(true)
	time.Sleep(100 * time.Millisecond)
	select {
	case e := <-closed:
		t.Fatalf("channel closed by the broker after the last flush: %v", e)
	default:
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	// Requeued ones may have been redelivered to this consumer before the
	// close; they come back with the stuck ones when it closes.
	want := int(requeued.Load()) + len(stuck)
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d messages (stuck and requeued) back in the queue", want), func() bool {
		return r.Ready(q) == want
	})
}

// consumeAll publishes n small messages to q and consumes them all on a
// fresh channel without acking: their tags, in delivery order.
func consumeAll(tb testing.TB, r *testutil.Rabbit, q string, n int) (*amqp.Channel, []uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Confirmed at the end, not one by one: 160k round trips would take
	// longer than the benchmark.
	dcs := make([]*amqp.DeferredConfirmation, 0, n)
	for range n {
		dc, err := r.Ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("x")})
		if err != nil {
			tb.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			tb.Fatalf("publish not confirmed: %v", err)
		}
	}
	ch, err := r.Conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	dels, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tags := make([]uint64, 0, n)
	for len(tags) < n {
		select {
		case d := <-dels:
			tags = append(tags, d.DeliveryTag)
		case <-ctx.Done():
			tb.Fatalf("got %d of %d deliveries", len(tags), n)
		}
	}
	return ch, tags
}

// frameCounter stands in for the channel in the benchmarks, which
// measure the acker's own cost: a real channel adds a write per frame,
// and the broker cannot hand out the millions of deliveries b.N may ask
// for. The tests above check the frames against the real broker.
type frameCounter struct{ frames int }

func (f *frameCounter) Ack(uint64, bool) error        { f.frames++; return nil }
func (f *frameCounter) Nack(uint64, bool, bool) error { f.frames++; return nil }

// benchmarkAcks acks b.N tags in order; with stuck tags below them left
// unsettled throughout (the first one). Each op is one ack.
func benchmarkAcks(b *testing.B, stuckEvery uint64) {
	var ch frameCounter
	a := newAcker(&ch, slog.New(slog.DiscardHandler))
	b.ReportAllocs()
	b.ResetTimer()
	for tag := uint64(1); tag <= uint64(b.N); tag++ {
		if stuckEvery != 0 && tag%stuckEvery == 1 {
			continue
		}
		if err := a.ack(tag); err != nil {
			b.Fatal(err)
		}
	}
	a.close(true)
	b.StopTimer()
	b.ReportMetric(float64(ch.frames)/float64(b.N), "frames/ack")
}

func BenchmarkAckerInOrder(b *testing.B)        { benchmarkAcks(b, 0) }
func BenchmarkAckerBehindStuckTag(b *testing.B) { benchmarkAcks(b, 1<<62) }
