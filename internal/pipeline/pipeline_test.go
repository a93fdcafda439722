package pipeline_test

// Unit tests of the pipeline's decisions with fakes: the memory seen-set,
// a scripted forwarder and a delivery that records how it was settled.
// The end-to-end behaviour against the real brokers is in internal/daemon.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

type recDelivery struct {
	msg     broker.Message
	mu      sync.Mutex
	how     []string
	dlErr   error // what DeadLetter returns
	dlCalls int
	lost    chan struct{}
}

func newRecDelivery(id string) *recDelivery {
	return &recDelivery{msg: broker.Message{Body: []byte(`{"meta":{"id":"` + id + `"}}`), Source: "s", Kind: "kafka"}, lost: make(chan struct{})}
}

func (d *recDelivery) Message() *broker.Message { return &d.msg }
func (d *recDelivery) Lost() <-chan struct{}    { return d.lost }
func (d *recDelivery) record(s string) {
	d.mu.Lock()
	d.how = append(d.how, s)
	d.mu.Unlock()
}
func (d *recDelivery) Ack(context.Context) error     { d.record("ack"); return nil }
func (d *recDelivery) Requeue(context.Context) error { d.record("requeue"); return nil }
func (d *recDelivery) DeadLetter(context.Context, broker.DeadLetterInfo) error {
	d.mu.Lock()
	d.dlCalls++
	err := d.dlErr
	d.mu.Unlock()
	if err == nil {
		d.record("dead_letter")
	}
	return err
}
func (d *recDelivery) settled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.how...)
}

// script answers each request with the next result, then repeats the last.
type script struct {
	mu    sync.Mutex
	res   []forward.Result
	calls int
}

func (s *script) Do(context.Context, forward.Request) forward.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res[min(s.calls, len(s.res)-1)]
	s.calls++
	return r
}

func (s *script) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

var (
	ok          = forward.Result{Outcome: forward.Success, Status: 204, Reason: "status 204"}
	refused     = forward.Result{Outcome: forward.Retryable, Reason: "connection refused", Unreachable: true}
	unavailable = forward.Result{Outcome: forward.Retryable, Status: 503, Reason: "status 503"}
	badRequest  = forward.Result{Outcome: forward.Permanent, Status: 400, Reason: "status 400"}
)

// stored is the prefix of the test source's stored keys: consumer "c",
// source "s", whose key space is its name.
const stored = "c:s:"

func newTestPipeline(store seenset.Store, f pipeline.Forwarder, maxAttempts int) *pipeline.Pipeline {
	return pipeline.New(pipeline.Options{
		Consumer: "c", Store: store, Forwarder: f, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: maxAttempts, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BusyDelay: time.Millisecond, CommitAttempts: 3,
	})
}

func keyState(t *testing.T, st seenset.Store, key string) seenset.State {
	t.Helper()
	s, err := st.Status(context.Background(), stored+key)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

// An app that is not there (connection refused) does not use up
// max_attempts: the message is neither dead-lettered nor requeued while
// the app restarts, and is forwarded once it answers.
func TestUnreachableAppDoesNotExhaustAttempts(t *testing.T) {
	st := seenset.NewMemory()
	f := &script{res: []forward.Result{refused, refused, refused, refused, refused, ok}}
	h := newTestPipeline(st, f, 2).Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	d := newRecDelivery("k1")
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "ack" || f.n() != 6 || d.dlCalls != 0 {
		t.Fatalf("settled %v after %d forwards, %d dead-letter calls; want one ack after 6 and none", got, f.n(), d.dlCalls)
	}
	if s := keyState(t, st, "k1"); s != seenset.Done {
		t.Fatalf("state %s, want done", s)
	}
}

// 503 counts: with max_attempts 2 the message is dead-lettered after two
// forwards, and its key is released (not done), so a redrive forwards it.
func TestRetriesExhaustedDeadLetters(t *testing.T) {
	st := seenset.NewMemory()
	f := &script{res: []forward.Result{unavailable}}
	h := newTestPipeline(st, f, 2).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	d := newRecDelivery("k2")
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "dead_letter" || f.n() != 2 {
		t.Fatalf("settled %v after %d forwards", got, f.n())
	}
	if s := keyState(t, st, "k2"); s != seenset.Absent {
		t.Fatalf("state %s, want absent", s)
	}
}

// Kafka (no requeue): when the dead-letter write fails, only the dead
// letter is retried — the app is not sent the poison message again.
func TestFailedDeadLetterIsRetriedWithoutTheApp(t *testing.T) {
	st := seenset.NewMemory()
	f := &script{res: []forward.Result{badRequest}}
	h := newTestPipeline(st, f, 3).Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	d := newRecDelivery("k3")
	d.dlErr = errors.New("broker down")
	go func() {
		time.Sleep(50 * time.Millisecond)
		d.mu.Lock()
		d.dlErr = nil
		d.mu.Unlock()
	}()
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "dead_letter" || f.n() != 1 || d.dlCalls < 2 {
		t.Fatalf("settled %v, %d forwards, %d dead-letter calls; want dead_letter, 1 forward, >= 2 calls", got, f.n(), d.dlCalls)
	}
}

// Kafka without a dead-letter topic: the partition holds and the message
// is forwarded again until the app takes it; nothing is skipped.
func TestNoDeadLetterTopicHoldsAndRetries(t *testing.T) {
	st := seenset.NewMemory()
	f := &script{res: []forward.Result{badRequest, badRequest, badRequest, ok}}
	h := newTestPipeline(st, f, 1).Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	d := newRecDelivery("k4")
	d.dlErr = broker.ErrNoDeadLetter
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "ack" || f.n() != 4 {
		t.Fatalf("settled %v after %d forwards", got, f.n())
	}
}

// Draining while a message waits for its retry: it is requeued at once and
// its key is free for the next owner.
func TestDrainRequeuesWaitingMessage(t *testing.T) {
	st := seenset.NewMemory()
	f := &script{res: []forward.Result{unavailable}}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 10, BackoffInitial: time.Hour, BackoffMax: time.Hour, BusyDelay: time.Millisecond, CommitAttempts: 1,
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	d := newRecDelivery("k5")
	done := make(chan struct{})
	go func() { h(d); close(done) }()
	time.Sleep(50 * time.Millisecond)
	p.Drain()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("handler did not return after Drain")
	}
	if got := d.settled(); len(got) != 1 || got[0] != "requeue" {
		t.Fatalf("settled %v", got)
	}
	if s := keyState(t, st, "k5"); s != seenset.Absent {
		t.Fatalf("state %s, want absent", s)
	}
}

// A key done already is acked without a forward; a key another owner
// holds is neither forwarded nor requeued (RabbitMQ): it waits, off the
// worker, and is forwarded once the owner let go.
func TestDuplicateAndBusy(t *testing.T) {
	st := seenset.NewMemory()
	ctx := context.Background()
	if _, err := st.Claim(ctx, stored+"dup", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, stored+"dup", "other", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, stored+"busy", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	f := &script{res: []forward.Result{ok}}
	h := newTestPipeline(st, f, 3).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	dup, busy := newRecDelivery("dup"), newRecDelivery("busy")
	h(dup)
	h(busy)
	if f.n() != 0 || dup.settled()[0] != "ack" || len(busy.settled()) != 0 {
		t.Fatalf("forwards %d, duplicate %v, busy %v", f.n(), dup.settled(), busy.settled())
	}
	if err := st.Release(ctx, stored+"busy", "other"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the busy message forwarded and acked", func() bool {
		s := busy.settled()
		return len(s) == 1 && s[0] == "ack"
	})
	if f.n() != 1 {
		t.Fatalf("%d forwards, want 1", f.n())
	}
}
