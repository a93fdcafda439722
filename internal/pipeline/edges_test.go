package pipeline_test

// Edge cases an outside review found: a request that may still run at the
// app is never overlapped, a batch never waits on its own claim, a panic
// is recovered, and a key whose seen-set entry is unusable does not pin a
// worker.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func event(m *metrics.Metrics, name string) float64 {
	return promtest.ToFloat64(m.Events.WithLabelValues("s", name))
}

// The app takes 2.5 s: longer than app.timeout (300 ms) and than the
// lease (1 s). The request is not abandoned: the proxy keeps its
// connection open and the lease renewed, takes the late 2xx, commits and
// acks. Neither its own retry nor another replica's redelivery reaches
// the app meanwhile; the redelivery finds the key done.
func TestSlowRequestIsWaitedForNotOverlapped(t *testing.T) {
	var running, maxRunning, calls atomic.Int32
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		if calls.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond)
		}
	}))
	defer app.Close()
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	st := testutil.RedisStore(t, "edges-")
	m := metrics.New(nil)
	replica := func(m *metrics.Metrics) broker.Handler {
		return pipeline.New(pipeline.Options{
			Consumer: "c", Store: st, Forwarder: fwd, Lease: time.Second, TTL: time.Hour,
			MaxAttempts: 5, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
			BusyDelay: 20 * time.Millisecond, CommitAttempts: 3, Metrics: m,
		}).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	}
	a, b := replica(m), replica(nil)
	da := newRecDelivery("slow")
	aDone := make(chan struct{})
	go func() { a(da); close(aDone) }()
	for calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// Replica B gets the message again and again (a requeue loop) until
	// it acks it, while A waits for the slow answer.
	deadline := time.Now().Add(20 * time.Second)
	for {
		db := newRecDelivery("slow")
		b(db)
		if got := db.settled(); len(got) == 1 && got[0] == "ack" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica B never acked the message")
		}
		time.Sleep(20 * time.Millisecond)
	}
	<-aDone
	if m := maxRunning.Load(); m != 1 {
		t.Fatalf("%d requests for one key ran at the app at once, want 1", m)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d requests, want 1: the slow one, whose late 2xx is taken", n)
	}
	if got := da.settled(); len(got) != 1 || got[0] != "ack" {
		t.Fatalf("replica A settled %v, want ack", got)
	}
	if got := event(m, metrics.EventSlow); got != 1 {
		t.Errorf("slow events = %v, want 1", got)
	}
	if got := promtest.ToFloat64(m.Messages.WithLabelValues("s", metrics.Forwarded)); got != 1 {
		t.Errorf("forwarded = %v, want 1: the late 2xx commits and acks", got)
	}
}

// Past app.max_request_time the proxy gives up on a request the app may
// still be running: it says so (event "abandoned"), keeps the key for a
// lease and only then sends it again.
func TestAbandonedRequestIsCountedAndKept(t *testing.T) {
	var calls atomic.Int32
	firstEnded := make(chan time.Time, 1)
	secondAt := make(chan time.Time, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(1200 * time.Millisecond) // an app that ignores the closed connection
			firstEnded <- time.Now()
			return
		}
		secondAt <- time.Now()
	}))
	defer app.Close()
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 100 * time.Millisecond, MaxRequestTime: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	m := metrics.New(nil)
	h := pipeline.New(pipeline.Options{
		Consumer: "c", Store: testutil.RedisStore(t, "edges-"), Forwarder: fwd, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 5, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		BusyDelay: 20 * time.Millisecond, CommitAttempts: 3, Metrics: m, MaxRequestTime: 400 * time.Millisecond,
	}).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	d := newRecDelivery("abandoned")
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "ack" {
		t.Fatalf("settled %v, want ack after the retry", got)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	// The first request was given up at 400 ms and the key kept for a
	// lease (1 s) from then: the second went no earlier than 1.4 s after
	// the first started, after the 1.2 s the app took.
	if first, second := <-firstEnded, <-secondAt; second.Before(first) {
		t.Errorf("the retry reached the app %s before the abandoned request ended", first.Sub(second))
	}
	if got := event(m, metrics.EventAbandoned); got != 1 {
		t.Errorf("abandoned events = %v, want 1", got)
	}
}

// blocker is an app that answers only when the forward is cancelled, as
// on a shutdown's abort.
type blocker struct{ started chan struct{} }

func (b blocker) Do(ctx context.Context, _ forward.Request) forward.Result {
	close(b.started)
	<-ctx.Done()
	return forward.Result{Outcome: forward.Retryable, Reason: "cancelled", Err: ctx.Err(), MayBeRunning: true}
}

// On Abort (the shutdown timeout ran out during a forward) the message is
// requeued, but its key stays claimed: the redelivery, here or on another
// replica, must not be sent while the aborted request may still run.
func TestAbortKeepsTheClaim(t *testing.T) {
	st := seenset.NewMemory()
	f := blocker{started: make(chan struct{})}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: time.Minute, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BusyDelay: time.Millisecond, CommitAttempts: 1,
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	d := newRecDelivery("aborted")
	done := make(chan struct{})
	go func() { h(d); close(done) }()
	<-f.started
	p.Abort()
	<-done
	if got := d.settled(); len(got) != 1 || got[0] != "requeue" {
		t.Fatalf("settled %v, want requeue", got)
	}
	s, err := st.Status(context.Background(), stored+"aborted")
	if err != nil || s.State != seenset.Inflight || s.TTL < 50*time.Second {
		t.Fatalf("key %+v %v: want still claimed for about a lease", s, err)
	}
}

// releasingStore lets another replica's claim on key go at the moment
// the first claim of it finds the key busy: between the claims of one
// batch's pipelined ClaimMany.
type releasingStore struct {
	*seenset.Memory
	key  string
	once sync.Once
}

func (s *releasingStore) Claim(ctx context.Context, key, token string, lease time.Duration) (seenset.ClaimResult, error) {
	res, err := s.Memory.Claim(ctx, key, token, lease)
	if key == s.key && res == seenset.Busy {
		s.once.Do(func() { _ = s.Release(ctx, key, "other-replica") })
	}
	return res, err
}

// A batch [m1:k, m2:k] whose k another replica lets go between the two
// claims: m1 must not wait a whole lease on m2's claim, its own.
func TestBatchDoesNotWaitOnItsOwnClaim(t *testing.T) {
	st := &releasingStore{Memory: seenset.NewMemory(), key: stored + "k"}
	if _, err := st.Memory.Claim(context.Background(), stored+"k", "other-replica", time.Hour); err != nil {
		t.Fatal(err)
	}
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Hour)
	ds, cs := batchOf(st, "k", "k")
	done := make(chan struct{})
	go func() { h(ds); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch is stuck: its first message waits on the lease of its second")
	}
	if got := fmt.Sprint(app.got()); got != "[k]" {
		t.Fatalf("app saw %s, want [k]", got)
	}
	wantSettled(t, cs, "ack", "ack")
}

// panicky panics on the first request for each key in panicOn, then
// answers 2xx.
type panicky struct {
	mu      sync.Mutex
	panicOn map[string]bool
	seen    []string
}

func (p *panicky) Do(_ context.Context, r forward.Request) forward.Result {
	p.mu.Lock()
	p.seen = append(p.seen, r.IdempotencyKey)
	boom := p.panicOn[r.IdempotencyKey]
	delete(p.panicOn, r.IdempotencyKey)
	p.mu.Unlock()
	if boom {
		panic("bug triggered by " + r.IdempotencyKey)
	}
	return ok
}

// panicStore panics on the first Claim.
type panicStore struct {
	*seenset.Memory
	once atomic.Bool
}

func (s *panicStore) Claim(ctx context.Context, key, token string, lease time.Duration) (seenset.ClaimResult, error) {
	if s.once.CompareAndSwap(false, true) {
		panic("store bug")
	}
	return s.Memory.Claim(ctx, key, token, lease)
}

// A panic while handling one message is recovered: the process lives,
// the message is given back (requeued) and counted. A claim whose
// request may have reached the app is left to expire; one whose request
// never left is released.
func TestPanicIsRecovered(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	mk := func(st seenset.Store, f pipeline.Forwarder) broker.Handler {
		return pipeline.New(pipeline.Options{
			Consumer: "c", Store: st, Forwarder: f, Lease: time.Minute, TTL: time.Hour,
			MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
			BusyDelay: time.Millisecond, CommitAttempts: 1, Metrics: m,
		}).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	}

	st := seenset.NewMemory()
	app := &panicky{panicOn: map[string]bool{"p1": true}}
	h := mk(st, app)
	d := newRecDelivery("p1")
	h(d)
	if got := d.settled(); len(got) != 1 || got[0] != "requeue" {
		t.Fatalf("panicking forward: settled %v, want requeue", got)
	}
	if s := keyState(t, st, "p1"); s != seenset.Inflight {
		t.Fatalf("panicking forward: key %s, want left claimed (the app may have it)", s)
	}
	// Later messages go through the same pipeline as usual.
	d2 := newRecDelivery("p2")
	h(d2)
	if got := d2.settled(); len(got) != 1 || got[0] != "ack" {
		t.Fatalf("next message settled %v, want ack", got)
	}

	ps := &panicStore{Memory: seenset.NewMemory()}
	d3 := newRecDelivery("p3")
	mk(ps, &panicky{})(d3)
	if got := d3.settled(); len(got) != 1 || got[0] != "requeue" {
		t.Fatalf("panicking store: settled %v, want requeue", got)
	}
	if s := keyState(t, ps, "p3"); s != seenset.Absent {
		t.Fatalf("panicking store: key %s, want absent", s)
	}
	if n := event(m, metrics.EventPanic); n != 2 {
		t.Fatalf("panic events %v, want 2", n)
	}
}

// A panic in the middle of a batch: what came before is acked, the
// panicking message and everything after it go back in order, and the
// keys claimed ahead for the rest are released.
func TestPanicInBatchGivesBackTheRest(t *testing.T) {
	st := newCountingStore()
	app := &panicky{panicOn: map[string]bool{"b": true}}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "c", "d")
	h(ds)
	wantSettled(t, cs, "ack", "requeue", "requeue", "requeue")
	if got := fmt.Sprint(app.seen); got != "[a b]" {
		t.Fatalf("app saw %s, want [a b]", got)
	}
	for _, k := range []string{"c", "d"} {
		if s := keyState(t, st, k); s != seenset.Absent {
			t.Fatalf("key %s: %s, want its ahead claim released", k, s)
		}
	}
}

// unusableStore answers ErrKeyUnusable for key's claims until fixed.
type unusableStore struct {
	*seenset.Memory
	key   string
	tries atomic.Int32
	fixed atomic.Bool
	fixAt int32 // tries after which the key is usable again; 0: never
}

func (s *unusableStore) Claim(ctx context.Context, key, token string, lease time.Duration) (seenset.ClaimResult, error) {
	if key == s.key && !s.fixed.Load() {
		if n := s.tries.Add(1); s.fixAt > 0 && n >= s.fixAt {
			s.fixed.Store(true)
		}
		return 0, fmt.Errorf("%w: WRONGTYPE Operation against a key holding the wrong kind of value", seenset.ErrKeyUnusable)
	}
	return s.Memory.Claim(ctx, key, token, lease)
}

// A key whose seen-set entry is unusable does not loop for ever: with a
// dead letter it is dead-lettered with the reason, without a forward.
func TestUnusableKeyIsDeadLettered(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	st := &unusableStore{Memory: seenset.NewMemory(), key: stored + "bad"}
	f := &script{res: []forward.Result{ok}}
	var info broker.DeadLetterInfo
	d := &infoDelivery{recDelivery: newRecDelivery("bad"), info: &info}
	pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: time.Minute, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BusyDelay: time.Millisecond, CommitAttempts: 1, Metrics: m,
	}).Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})(d)
	if got := d.settled(); len(got) != 1 || got[0] != "dead_letter" || f.n() != 0 {
		t.Fatalf("settled %v after %d forwards, want dead_letter without a forward", got, f.n())
	}
	if !strings.Contains(info.Reason, "seen-set key unusable") || !strings.Contains(info.LastError, "WRONGTYPE") {
		t.Fatalf("dead letter info %+v", info)
	}
	if n := st.tries.Load(); n < 2 || n > 10 {
		t.Fatalf("%d claims, want a few", n)
	}
	if n := event(m, metrics.EventStoreKeyError); n != 1 {
		t.Fatalf("store_key_error events %v, want 1", n)
	}
}

// Kafka without a dead-letter topic holds the partition, retrying the
// claim slowly, and goes on by itself once an operator fixed the key.
func TestUnusableKeyHoldsUntilFixed(t *testing.T) {
	st := &unusableStore{Memory: seenset.NewMemory(), key: stored + "bad", fixAt: 7}
	f := &script{res: []forward.Result{ok}}
	d := newRecDelivery("bad")
	d.dlErr = broker.ErrNoDeadLetter
	newTestPipeline(st, f, 3).Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})(d)
	if got := d.settled(); len(got) != 1 || got[0] != "ack" || f.n() != 1 {
		t.Fatalf("settled %v after %d forwards, want ack after one", got, f.n())
	}
	if n := st.tries.Load(); n != 7 {
		t.Fatalf("%d unusable claims, want 7", n)
	}
}

type infoDelivery struct {
	*recDelivery
	info *broker.DeadLetterInfo
}

func (d *infoDelivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	*d.info = info
	return d.recDelivery.DeadLetter(ctx, info)
}
