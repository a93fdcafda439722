package pipeline_test

// Benchmarks of the pipeline's hot path, one delivery at a time through
// Handler: key extraction, claim, forward, commit, ack and the metrics,
// with the memory seen-set. Run with
//
//	go test -run '^$' -bench . -benchmem ./internal/pipeline
//
// "fake-forwarder" isolates the pipeline's own cost; "http-app" adds the
// real forward.Client POSTing to an in-process no-op app over loopback.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// benchDelivery is a broker.Delivery that only counts how it was settled.
// One is reused for every iteration, so its own cost is not measured.
type benchDelivery struct {
	msg     broker.Message
	acked   int
	settled error // set when settled any other way than Ack
}

func (d *benchDelivery) Message() *broker.Message { return &d.msg }
func (d *benchDelivery) Lost() <-chan struct{}    { return nil }

func (d *benchDelivery) Ack(context.Context) error {
	d.acked++
	return nil
}

func (d *benchDelivery) Requeue(context.Context) error {
	d.settled = errors.New("requeued")
	return nil
}

func (d *benchDelivery) DeadLetter(context.Context, broker.DeadLetterInfo) error {
	d.settled = errors.New("dead-lettered")
	return nil
}

// countingForwarder answers 204 without any I/O.
type countingForwarder struct{ n atomic.Int64 }

func (f *countingForwarder) Do(context.Context, forward.Request) forward.Result {
	f.n.Add(1)
	return forward.Result{Outcome: forward.Success, Status: http.StatusNoContent, Reason: "status 204"}
}

// httpForwarder is the real client against an in-process no-op app.
type httpForwarder struct {
	*forward.Client
	n atomic.Int64
}

func (f *httpForwarder) Do(ctx context.Context, r forward.Request) forward.Result {
	f.n.Add(1)
	return f.Client.Do(ctx, r)
}

func newHTTPForwarder(b *testing.B, conns int) *httpForwarder {
	b.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(app.Close)
	c, err := forward.New(forward.Config{URL: app.URL, MaxConns: conns, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return &httpForwarder{Client: c}
}

type forwarderCounter interface {
	pipeline.Forwarder
	count() int64
}

func (f *countingForwarder) count() int64 { return f.n.Load() }
func (f *httpForwarder) count() int64     { return f.n.Load() }

func newPipeline(fwd pipeline.Forwarder) *pipeline.Pipeline {
	return pipeline.New(pipeline.Options{
		Consumer:       "bench",
		Store:          seenset.NewMemory(),
		Forwarder:      fwd,
		Lease:          30 * time.Second,
		TTL:            time.Hour,
		MaxAttempts:    5,
		BackoffInitial: time.Millisecond,
		BackoffMax:     10 * time.Millisecond,
		BusyDelay:      time.Millisecond,
		CommitAttempts: 3,
		MaxBodyBytes:   1 << 20,
	})
}

var sourceOptions = pipeline.SourceOptions{Name: "bench", Kind: "rabbitmq", Path: "/orders", Requeues: true}

// appendBody writes a ~250-byte envelope whose meta.id is key-<i>.
func appendBody(buf []byte, i int) []byte {
	buf = append(buf[:0], `{"job":"urn:bench:orders:created","meta":{"id":"key-`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `","schema_version":1},"data":{"order_id":12345,"amount_cents":1999,"note":"`...)
	for len(buf) < 246 {
		buf = append(buf, 'x')
	}
	return append(buf, `"}}`...)
}

func newDelivery() *benchDelivery {
	return &benchDelivery{msg: broker.Message{
		ContentType: "application/json",
		Source:      "bench",
		Kind:        "rabbitmq",
		Queue:       "orders",
	}}
}

// BenchmarkPipeline sends every message through Handler on one goroutine:
// "unique" is 0% duplicates (claim, forward, commit, ack), "duplicate" is
// 100% (claim finds the key done, ack).
func BenchmarkPipeline(b *testing.B) {
	b.Run("unique/fake-forwarder", func(b *testing.B) { benchUnique(b, &countingForwarder{}) })
	b.Run("unique/http-app", func(b *testing.B) { benchUnique(b, newHTTPForwarder(b, 4)) })
	b.Run("duplicate", benchDuplicate)
}

func benchUnique(b *testing.B, fwd forwarderCounter) {
	h := newPipeline(fwd).Handler(sourceOptions)
	d := newDelivery()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = appendBody(buf, i)
		d.msg.Body = buf
		h(d)
	}
	if d.settled != nil || int64(d.acked) != fwd.count() || d.acked == 0 {
		b.Fatalf("acked %d, forwarded %d, other settlement: %v", d.acked, fwd.count(), d.settled)
	}
}

func benchDuplicate(b *testing.B) {
	const keys = 4096
	fwd := &countingForwarder{}
	h := newPipeline(fwd).Handler(sourceOptions)
	d := newDelivery()
	buf := make([]byte, 0, 512)
	for i := range keys {
		buf = appendBody(buf, i)
		d.msg.Body = buf
		h(d)
	}
	before := fwd.count()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = appendBody(buf, i%keys)
		d.msg.Body = buf
		h(d)
	}
	if d.settled != nil || fwd.count() != before {
		b.Fatalf("a duplicate was forwarded (%d forwards) or not acked: %v", fwd.count()-before, d.settled)
	}
}

// BenchmarkPipelineParallel is BenchmarkPipeline with GOMAXPROCS×4
// concurrent handlers, as a source's workers run them: it shows
// contention on the store's lock, the metrics and the app's pool.
func BenchmarkPipelineParallel(b *testing.B) {
	b.Run("unique/fake-forwarder", func(b *testing.B) { benchParallel(b, &countingForwarder{}) })
	b.Run("unique/http-app", func(b *testing.B) { benchParallel(b, newHTTPForwarder(b, 32)) })
}

func benchParallel(b *testing.B, fwd forwarderCounter) {
	h := newPipeline(fwd).Handler(sourceOptions)
	var next, acked atomic.Int64
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		d := newDelivery()
		buf := make([]byte, 0, 512)
		for pb.Next() {
			buf = appendBody(buf, int(next.Add(1)))
			d.msg.Body = buf
			h(d)
		}
		acked.Add(int64(d.acked))
		if d.settled != nil {
			b.Errorf("settled otherwise: %v", d.settled)
		}
	})
	b.StopTimer()
	if acked.Load() != fwd.count() {
		b.Fatalf("acked %d, forwarded %d", acked.Load(), fwd.count())
	}
}

// batchDelivery is benchDelivery for batches: the committer acks on its
// own goroutine.
type batchDelivery struct {
	benchDelivery
	acks *atomic.Int64
}

func (d *batchDelivery) Ack(context.Context) error {
	d.acks.Add(1)
	return nil
}

// BenchmarkPipelineBatch sends messages through BatchHandler in batches
// of 32, as a Kafka partition with a backlog does: per message it is the
// cost of BenchmarkPipeline's "unique" path with the claims and commits
// shared. ns/op is per message.
func BenchmarkPipelineBatch(b *testing.B) {
	b.Run("unique/fake-forwarder", func(b *testing.B) { benchBatch(b, &countingForwarder{}) })
	b.Run("unique/http-app", func(b *testing.B) { benchBatch(b, newHTTPForwarder(b, 4)) })
}

func benchBatch(b *testing.B, fwd forwarderCounter) {
	const size = 32
	h := newPipeline(fwd).BatchHandler(sourceOptions)
	var acks atomic.Int64
	ds := make([]broker.Delivery, size)
	bds := make([]*batchDelivery, size)
	for i := range ds {
		bds[i] = &batchDelivery{benchDelivery: *newDelivery(), acks: &acks}
		ds[i] = bds[i]
	}
	bufs := make([][]byte, size)
	n, next := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		bufs[n] = appendBody(bufs[n], next)
		next++
		n++
		if n == size {
			for i := range size {
				bds[i].msg.Body = bufs[i]
			}
			h(ds)
			n = 0
		}
	}
	if n > 0 {
		for i := range n {
			bds[i].msg.Body = bufs[i]
		}
		h(ds[:n])
	}
	if acks.Load() != fwd.count() || acks.Load() == 0 {
		b.Fatalf("acked %d, forwarded %d", acks.Load(), fwd.count())
	}
}
