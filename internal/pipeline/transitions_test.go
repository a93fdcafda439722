package pipeline_test

// One test per transition of the per-message state machine, on fakes, in
// a synctest bubble: backoffs, leases and busy delays run on the bubble's
// clock, so no test sleeps for real and none depends on the machine's
// speed.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// faultyStore fails the operations named in fail with ErrUnavailable and
// counts every call.
type faultyStore struct {
	*seenset.Memory
	mu    sync.Mutex
	fail  map[string]bool
	calls map[string]int
}

func newFaultyStore(fail ...string) *faultyStore {
	s := &faultyStore{Memory: seenset.NewMemory(), fail: map[string]bool{}, calls: map[string]int{}}
	for _, op := range fail {
		s.fail[op] = true
	}
	return s
}

func (s *faultyStore) call(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if s.fail[op] {
		return fmt.Errorf("%w: connection refused", seenset.ErrUnavailable)
	}
	return nil
}

func (s *faultyStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *faultyStore) Claim(ctx context.Context, key, token string, lease time.Duration) (seenset.ClaimResult, error) {
	if err := s.call("claim"); err != nil {
		return 0, err
	}
	return s.Memory.Claim(ctx, key, token, lease)
}

func (s *faultyStore) Commit(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := s.call("commit"); err != nil {
		return err
	}
	return s.Memory.Commit(ctx, key, token, ttl)
}

func (s *faultyStore) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	if err := s.call("renew"); err != nil {
		return err
	}
	return s.Memory.Renew(ctx, key, token, lease)
}

type fixture struct {
	p *pipeline.Pipeline
	m *metrics.Metrics
}

func newFixture(st seenset.Store, f pipeline.Forwarder, mutate func(*pipeline.Options)) fixture {
	m := metrics.New(prometheus.NewRegistry())
	o := pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: 30 * time.Second, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second,
		BusyDelay: time.Second, CommitAttempts: 3, Metrics: m,
	}
	if mutate != nil {
		mutate(&o)
	}
	return fixture{p: pipeline.New(o), m: m}
}

func (f fixture) handler(requeues bool) broker.Handler {
	kind := "kafka"
	if requeues {
		kind = "rabbitmq"
	}
	return f.p.Handler(pipeline.SourceOptions{Name: "s", Kind: kind, Requeues: requeues})
}

func wantOnly(t *testing.T, d *recDelivery, how string) {
	t.Helper()
	if got := d.settled(); len(got) != 1 || got[0] != how {
		t.Fatalf("settled %v, want [%s]", got, how)
	}
}

// Store down, fail closed (the default): nothing is forwarded while the
// claim is retried with backoff; a drain requeues the message.
func TestTransitionStoreDownFailsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFaultyStore("claim")
		app := &script{res: []forward.Result{ok}}
		fx := newFixture(st, app, nil)
		d := newRecDelivery("k")
		go fx.handler(true)(d)
		time.Sleep(time.Minute)
		fx.p.Drain()
		synctest.Wait()
		wantOnly(t, d, "requeue")
		if app.n() != 0 || st.count("claim") < 10 || event(fx.m, metrics.EventStoreError) != float64(st.count("claim")) {
			t.Fatalf("%d forwards, %d claims, %v store_error events", app.n(), st.count("claim"), event(fx.m, metrics.EventStoreError))
		}
	})
}

// Store down with on_store_error: forward: forwarded once without the
// seen-set, acked, counted.
func TestTransitionStoreDownFailsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFaultyStore("claim")
		app := &script{res: []forward.Result{ok}}
		fx := newFixture(st, app, func(o *pipeline.Options) { o.FailOpenOnStoreError = true })
		d := newRecDelivery("k")
		fx.handler(true)(d)
		wantOnly(t, d, "ack")
		if app.n() != 1 || st.count("commit") != 0 || event(fx.m, metrics.EventStoreFailOpen) != 1 {
			t.Fatalf("%d forwards, %d commits, %v fail-open events", app.n(), st.count("commit"), event(fx.m, metrics.EventStoreFailOpen))
		}
	})
}

// The app succeeded but the commit keeps failing: commit_attempts tries,
// then acked anyway and counted — the Idempotency-Key is the app's
// defence against a redelivery.
func TestTransitionCommitFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFaultyStore("commit")
		app := &script{res: []forward.Result{ok}}
		fx := newFixture(st, app, nil)
		d := newRecDelivery("k")
		fx.handler(true)(d)
		wantOnly(t, d, "ack")
		if st.count("commit") != 3 || event(fx.m, metrics.EventCommitFailed) != 1 || app.n() != 1 {
			t.Fatalf("%d commits, %v commit_failed, %d forwards", st.count("commit"), event(fx.m, metrics.EventCommitFailed), app.n())
		}
	})
}

// takeover is an app that runs longer than the lease while another
// replica takes the key over once the lease expired.
type takeover struct {
	st   *seenset.Memory
	runs time.Duration
}

func (a takeover) Do(ctx context.Context, r forward.Request) forward.Result {
	time.Sleep(a.runs)
	// By now the lease could not be renewed (renew fails below) and
	// expired; another replica claimed the key.
	if _, err := a.st.Claim(ctx, stored+r.IdempotencyKey, "other-replica", time.Hour); err != nil {
		panic(err)
	}
	return ok
}

// A lease lost during the forward (renewals failed, another replica took
// the key): counted, and the app's success still recorded — the key is
// done, so the other replica's commit or release changes nothing and no
// later delivery is forwarded again; the message is acked.
func TestTransitionLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFaultyStore("renew")
		fx := newFixture(st, takeover{st: st.Memory, runs: time.Minute}, nil)
		d := newRecDelivery("k")
		fx.handler(true)(d)
		wantOnly(t, d, "ack")
		if n := event(fx.m, metrics.EventLeaseLost); n != 1 {
			t.Fatalf("lease_lost %v, want 1 (the refused commit)", n)
		}
		s, err := st.Status(context.Background(), stored+"k")
		if err != nil || s.State != seenset.Done || s.Token == "other-replica" {
			t.Fatalf("key %+v %v: want done under this replica's token", s, err)
		}
		if err := st.Release(context.Background(), stored+"k", "other-replica"); err == nil {
			t.Fatal("the other replica's release succeeded over a done key")
		}
	})
}

// Larger than max_body_bytes: never forwarded; dead-lettered with the
// reason, or requeued (RabbitMQ without a dead letter).
func TestTransitionBodyTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &script{res: []forward.Result{ok}}
		fx := newFixture(seenset.NewMemory(), app, func(o *pipeline.Options) { o.MaxBodyBytes = 8 })
		d := newRecDelivery("k")
		fx.handler(true)(d)
		wantOnly(t, d, "dead_letter")
		d2 := newRecDelivery("k2")
		d2.dlErr = broker.ErrNoDeadLetter
		fx.handler(true)(d2)
		wantOnly(t, d2, "requeue")
		if app.n() != 0 || event(fx.m, metrics.EventBodyTooLarge) != 2 {
			t.Fatalf("%d forwards, %v body_too_large", app.n(), event(fx.m, metrics.EventBodyTooLarge))
		}
	})
}

// gate is a Gate an operator opens by hand.
type gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func (g *gate) Open() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// While the app is down (the gate is shut) the message waits before its
// claim — nothing claimed, forwarded or retried — and goes on when the
// app is back.
func TestTransitionGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := seenset.NewMemory()
		app := &script{res: []forward.Result{ok}}
		g := &gate{open: make(chan struct{})}
		fx := newFixture(st, app, func(o *pipeline.Options) { o.Gate = g })
		d := newRecDelivery("k")
		done := make(chan struct{})
		go func() { fx.handler(true)(d); close(done) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		if app.n() != 0 || len(d.settled()) != 0 || keyState(t, st, "k") != seenset.Absent {
			t.Fatalf("while shut: %d forwards, settled %v, key %s", app.n(), d.settled(), keyState(t, st, "k"))
		}
		close(g.open)
		<-done
		wantOnly(t, d, "ack")
		if app.n() != 1 || event(fx.m, metrics.EventAppWait) != 1 {
			t.Fatalf("%d forwards, %v app_wait", app.n(), event(fx.m, metrics.EventAppWait))
		}
	})
}

// Abort while a message waits for its retry backoff: requeued at once,
// never dead-lettered, its key free (the last request was answered).
func TestTransitionAbortWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := seenset.NewMemory()
		app := &script{res: []forward.Result{unavailable}}
		fx := newFixture(st, app, func(o *pipeline.Options) { o.BackoffInitial, o.BackoffMax = time.Hour, time.Hour })
		d := newRecDelivery("k")
		done := make(chan struct{})
		go func() { fx.handler(false)(d); close(done) }()
		time.Sleep(time.Minute)
		fx.p.Abort()
		<-done
		wantOnly(t, d, "requeue")
		if app.n() != 1 || keyState(t, st, "k") != seenset.Absent {
			t.Fatalf("%d forwards, key %s", app.n(), keyState(t, st, "k"))
		}
	})
}

// A busy key is never bounced through the broker. On RabbitMQ it waits
// off the source's worker (the handler returns at once, the delivery
// unsettled), on Kafka in place; both claim again after busy_delay, then
// twice as long each time up to a third of the lease, and are forwarded
// once the other owner lets go.
func TestTransitionBusy(t *testing.T) {
	for _, requeues := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			st := seenset.NewMemory()
			ctx := context.Background()
			if _, err := st.Claim(ctx, stored+"k", "other-replica", time.Hour); err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(10 * time.Second)
				_ = st.Release(ctx, stored+"k", "other-replica")
			}()
			app := &script{res: []forward.Result{ok}}
			fx := newFixture(st, app, nil)
			r := newRecDelivery("k")
			returned := make(chan struct{})
			go func() { fx.handler(requeues)(r); close(returned) }()
			synctest.Wait()
			waiting := promtest.ToFloat64(fx.m.BusyWaiting.WithLabelValues("s"))
			select {
			case <-returned:
				if !requeues {
					t.Fatal("kafka: the handler returned while the key was busy")
				}
			default:
				if requeues {
					t.Fatal("rabbitmq: the handler holds its worker while the key is busy")
				}
			}
			if got := r.settled(); len(got) != 0 {
				t.Fatalf("settled %v while the key was busy", got)
			}
			if want := map[bool]float64{true: 1, false: 0}[requeues]; waiting != want {
				t.Fatalf("busy waiting gauge %v, want %v", waiting, want)
			}
			time.Sleep(time.Minute)
			<-returned
			wantOnly(t, r, "ack")
			// Busy at 0 s, and at the looks 1, 3 and 7 s later; the look at
			// 15 s claims it.
			if app.n() != 1 || event(fx.m, metrics.EventBusy) != 4 {
				t.Fatalf("%d forwards, %v busy events, want 1 and 4", app.n(), event(fx.m, metrics.EventBusy))
			}
			if w := promtest.ToFloat64(fx.m.BusyWaiting.WithLabelValues("s")); w != 0 {
				t.Fatalf("busy waiting gauge %v after it was forwarded", w)
			}
		})
	}
}

// A message waiting for a busy key is requeued as soon as the pipeline
// drains: a shutdown never waits on it.
func TestTransitionBusyDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := seenset.NewMemory()
		if _, err := st.Claim(context.Background(), stored+"k", "other-replica", time.Hour); err != nil {
			t.Fatal(err)
		}
		fx := newFixture(st, &script{res: []forward.Result{ok}}, nil)
		r := newRecDelivery("k")
		fx.handler(true)(r)
		time.Sleep(5 * time.Second)
		fx.p.Drain()
		synctest.Wait()
		wantOnly(t, r, "requeue")
	})
}

// slowApp answers 2xx after a while.
type slowApp struct {
	took  time.Duration
	calls atomic.Int32
}

func (a *slowApp) Do(context.Context, forward.Request) forward.Result {
	a.calls.Add(1)
	time.Sleep(a.took)
	return ok
}

// A duplicate that arrives while this same replica forwards its original
// waits here for the outcome and is acked as a duplicate — not requeued
// to come back after busy_delay.
func TestTransitionBusyHereWaitsLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &slowApp{took: 5 * time.Second}
		fx := newFixture(seenset.NewMemory(), app, nil)
		h := fx.handler(true)
		first, dup := newRecDelivery("k"), newRecDelivery("k")
		go h(first)
		synctest.Wait() // the first is at the app
		h(dup)          // waits off the worker
		time.Sleep(10 * time.Second)
		synctest.Wait()
		wantOnly(t, first, "ack")
		wantOnly(t, dup, "ack")
		if n := app.calls.Load(); n != 1 {
			t.Fatalf("%d forwards, want 1", n)
		}
		if d := promtest.ToFloat64(fx.m.Messages.WithLabelValues("s", metrics.Duplicate)); d != 1 {
			t.Fatalf("duplicates %v, want 1", d)
		}
	})
}
