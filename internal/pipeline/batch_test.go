package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// countingStore is the memory store with its calls counted per key and
// ClaimMany failures on demand.
type countingStore struct {
	*seenset.Memory
	mu         sync.Mutex
	claims     map[string]int // single Claim calls per key
	renews     map[string]int
	claimMany  int
	commitMany int
	failMany   int    // the next n ClaimMany calls fail
	onMany     func() // called by ClaimMany, after the claims
	commitRTT  time.Duration
}

func newCountingStore() *countingStore {
	return &countingStore{Memory: seenset.NewMemory(), claims: map[string]int{}, renews: map[string]int{}}
}

func (s *countingStore) Claim(ctx context.Context, key, token string, lease time.Duration) (seenset.ClaimResult, error) {
	s.mu.Lock()
	s.claims[key]++
	s.mu.Unlock()
	return s.Memory.Claim(ctx, key, token, lease)
}

func (s *countingStore) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	s.mu.Lock()
	s.renews[key]++
	s.mu.Unlock()
	return s.Memory.Renew(ctx, key, token, lease)
}

func (s *countingStore) ClaimMany(ctx context.Context, items []seenset.KeyToken, lease time.Duration) []seenset.ClaimReply {
	s.mu.Lock()
	s.claimMany++
	fail := s.failMany > 0
	s.failMany--
	s.mu.Unlock()
	out := seenset.ClaimMany(ctx, s.Memory, items, lease)
	if s.onMany != nil {
		s.onMany()
	}
	if fail {
		// The last reply was lost: the earlier claims did happen.
		out[len(out)-1] = seenset.ClaimReply{Err: fmt.Errorf("%w: connection reset", seenset.ErrUnavailable)}
	}
	return out
}

func (s *countingStore) CommitMany(ctx context.Context, items []seenset.KeyToken, ttl time.Duration) []error {
	s.mu.Lock()
	s.commitMany++
	rtt := s.commitRTT
	s.mu.Unlock()
	time.Sleep(rtt)
	return seenset.CommitMany(ctx, s.Memory, items, ttl)
}

func (s *countingStore) count(m map[string]int, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[stored+key]
}

// recorder is an app: it records the Idempotency-Key of every request
// (body for a keyless one) in order, answering from a per-key script.
type recorder struct {
	mu     sync.Mutex
	order  []string
	answer map[string][]forward.Result
	delay  map[string]time.Duration
	hook   func(key string)
}

func (r *recorder) Do(_ context.Context, req forward.Request) forward.Result {
	k := req.IdempotencyKey
	if k == "" {
		k = "body:" + string(req.Body)
	}
	r.mu.Lock()
	r.order = append(r.order, k)
	res := ok
	if as := r.answer[k]; len(as) > 0 {
		res = as[0]
		if len(as) > 1 {
			r.answer[k] = as[1:]
		}
	}
	d, hook := r.delay[k], r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(k)
	}
	time.Sleep(d)
	return res
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// ackCheck is a delivery whose Ack records whether its key was already
// done in the seen-set: a message is acked only after its commit.
type ackCheck struct {
	*recDelivery
	st        seenset.Store
	key       string
	doneAtAck bool
}

func (d *ackCheck) Ack(ctx context.Context) error {
	if d.key != "" {
		s, err := d.st.Status(ctx, stored+d.key)
		d.doneAtAck = err == nil && s.State == seenset.Done
	}
	return d.recDelivery.Ack(ctx)
}

func batchOf(st seenset.Store, ids ...string) ([]broker.Delivery, []*ackCheck) {
	ds := make([]broker.Delivery, len(ids))
	cs := make([]*ackCheck, len(ids))
	for i, id := range ids {
		rd := newRecDelivery(id)
		if id == "" {
			rd.msg.Body = []byte(`{"no":"key"}`)
		}
		cs[i] = &ackCheck{recDelivery: rd, st: st, key: id}
		ds[i] = cs[i]
	}
	return ds, cs
}

// wantSettled checks each message was settled once, as want says, and
// that every acked message with a key was acked only once its key was
// done.
func wantSettled(t *testing.T, cs []*ackCheck, want ...string) {
	t.Helper()
	for i, c := range cs {
		if got := fmt.Sprint(c.settled()); got != "["+want[i]+"]" {
			t.Fatalf("message %d (%q) settled %s, want [%s]", i, c.key, got, want[i])
		}
		if want[i] == "ack" && c.key != "" && !c.doneAtAck {
			t.Fatalf("message %d (%q) acked before its key was done", i, c.key)
		}
	}
}

func newBatchPipeline(st seenset.Store, f pipeline.Forwarder, lease time.Duration) (*pipeline.Pipeline, broker.BatchHandler) {
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: lease, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BusyDelay: time.Millisecond, CommitAttempts: 3,
	})
	return p, p.BatchHandler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
}

// One claim round trip for the batch; forwards in order; a duplicate of
// an earlier message of the same batch and a key done long ago are acked
// without a forward; a keyless message is forwarded in its place; every
// forwarded message is acked only once its key is done.
func TestBatchInOrderWithDuplicates(t *testing.T) {
	st := newCountingStore()
	done := "old"
	if _, err := st.Claim(context.Background(), stored+done, "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background(), stored+done, "x", time.Hour); err != nil {
		t.Fatal(err)
	}
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "a", done, "", "e")
	h(ds)

	if got := fmt.Sprint(app.got()); got != `[a b body:{"no":"key"} e]` {
		t.Fatalf("app saw %s", got)
	}
	wantSettled(t, cs, "ack", "ack", "ack", "ack", "ack", "ack")
	if st.claimMany != 1 {
		t.Fatalf("%d ClaimMany calls, want 1", st.claimMany)
	}
	// Only the second "a" (busy behind the first) claims on its own.
	if n := st.count(st.claims, "a"); n != 1 {
		t.Fatalf("%d single claims of a, want 1 (the duplicate)", n)
	}
	if n := st.count(st.claims, "b") + st.count(st.claims, "e"); n != 0 {
		t.Fatalf("%d single claims of b and e, want 0", n)
	}
}

// A failure in the middle of a batch is handled as on its own (here:
// retried, then permanent → dead-lettered, key released) and the messages
// after it still go, in order.
func TestBatchFailureInTheMiddle(t *testing.T) {
	st := newCountingStore()
	app := &recorder{answer: map[string][]forward.Result{"b": {unavailable, badRequest}}}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "c")
	h(ds)
	if got := fmt.Sprint(app.got()); got != "[a b b c]" {
		t.Fatalf("app saw %s", got)
	}
	wantSettled(t, cs, "ack", "dead_letter", "ack")
	if s := keyState(t, st, "b"); s != seenset.Absent {
		t.Fatalf("b is %s after its dead letter, want absent (a redrive forwards it)", s)
	}
	if s := keyState(t, st, "c"); s != seenset.Done {
		t.Fatalf("c is %s, want done", s)
	}
}

// Drain during a batch: the forward in progress finishes and is committed
// and acked; the messages claimed ahead are released and requeued.
func TestBatchDrainReleasesClaimsAhead(t *testing.T) {
	st := newCountingStore()
	app := &recorder{delay: map[string]time.Duration{"a": 100 * time.Millisecond}}
	p, h := newBatchPipeline(st, app, time.Minute)
	app.hook = func(k string) {
		if k == "a" {
			p.Drain()
		}
	}
	ds, cs := batchOf(st, "a", "b", "c")
	h(ds)
	if got := fmt.Sprint(app.got()); got != "[a]" {
		t.Fatalf("app saw %s", got)
	}
	wantSettled(t, cs, "ack", "requeue", "requeue")
	for _, k := range []string{"b", "c"} {
		if s := keyState(t, st, k); s != seenset.Absent {
			t.Fatalf("%s is %s after the drain, want absent", k, s)
		}
	}
}

// A claim that waited its turn for more than a third of the lease is
// renewed before the forward; one whose lease ran out is claimed again.
func TestBatchStaleClaims(t *testing.T) {
	t.Run("renewed", func(t *testing.T) {
		st := newCountingStore()
		app := &recorder{delay: map[string]time.Duration{"a": 150 * time.Millisecond}}
		_, h := newBatchPipeline(st, app, 300*time.Millisecond)
		ds, cs := batchOf(st, "a", "b")
		h(ds)
		if st.count(st.renews, "b") != 1 || st.count(st.claims, "b") != 0 {
			t.Fatalf("b: %d renewals, %d single claims; want 1 and 0", st.count(st.renews, "b"), st.count(st.claims, "b"))
		}
		wantSettled(t, cs, "ack", "ack")
	})
	t.Run("expired", func(t *testing.T) {
		st := newCountingStore()
		app := &recorder{delay: map[string]time.Duration{"a": 150 * time.Millisecond}}
		_, h := newBatchPipeline(st, app, 60*time.Millisecond)
		ds, cs := batchOf(st, "a", "b")
		h(ds)
		if st.count(st.claims, "b") != 1 {
			t.Fatalf("b: %d single claims after its lease ran out, want 1", st.count(st.claims, "b"))
		}
		if got := fmt.Sprint(app.got()); got != "[a b]" {
			t.Fatalf("app saw %s", got)
		}
		wantSettled(t, cs, "ack", "ack")
	})
}

// A store error on the batch claim: what was claimed is released and
// every message takes the single path (claim with retries); nothing is
// lost or forwarded twice.
func TestBatchClaimErrorFallsBack(t *testing.T) {
	st := newCountingStore()
	st.failMany = 1
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "c")
	h(ds)
	if got := fmt.Sprint(app.got()); got != "[a b c]" {
		t.Fatalf("app saw %s", got)
	}
	wantSettled(t, cs, "ack", "ack", "ack")
	for _, c := range cs {
		if st.count(st.claims, c.key) != 1 {
			t.Fatalf("%s: %d single claims, want 1", c.key, st.count(st.claims, c.key))
		}
	}
}

// A batch claim whose answer was lost, then a drain: the claims it may
// hold are released, not left to expire, and the messages requeued.
func TestBatchLostClaimReleasedOnDrain(t *testing.T) {
	st := newCountingStore()
	st.failMany = 1
	app := &recorder{}
	p, h := newBatchPipeline(st, app, time.Minute)
	st.onMany = p.Drain
	ds, cs := batchOf(st, "a", "b")
	h(ds)
	if got := app.got(); len(got) != 0 {
		t.Fatalf("app saw %v while draining", got)
	}
	wantSettled(t, cs, "requeue", "requeue")
	for _, c := range cs {
		if s := keyState(t, st, c.key); s != seenset.Absent {
			t.Fatalf("%s is %s, want absent", c.key, s)
		}
	}
}

// A Store without batch calls (the memory backend) works the same, one
// call per item.
func TestBatchWithPlainStore(t *testing.T) {
	var st seenset.Store = seenset.NewMemory()
	if _, ok := st.(seenset.BatchStore); ok {
		t.Fatal("the memory store became a BatchStore: wrap it to keep testing the fallback")
	}
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "a")
	h(ds)
	if got := fmt.Sprint(app.got()); got != "[a b]" {
		t.Fatalf("app saw %s", got)
	}
	wantSettled(t, cs, "ack", "ack", "ack")
}

// Successes that arrive while a commit is on the wire share the next
// one, and each is acked only after its own commit.
func TestBatchCommitsShareRoundTrips(t *testing.T) {
	st := newCountingStore()
	st.commitRTT = 20 * time.Millisecond // far longer than the fake app
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Minute)
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
	}
	ds, cs := batchOf(st, ids...)
	h(ds)
	wantSettled(t, cs, slices.Repeat([]string{"ack"}, len(cs))...)
	// The first success goes alone, at once; the rest queue behind it.
	if st.commitMany > 3 {
		t.Fatalf("%d CommitMany calls for %d successes, want at most 3", st.commitMany, len(ids))
	}
}

// A set (key order) claims its keys in one round trip and forwards every
// message at once: while one hangs at the app, the others are forwarded,
// committed and acked; the one that hangs is acked once it answers.
func TestSetSlowMessageHoldsOnlyItself(t *testing.T) {
	st := newCountingStore()
	release := make(chan struct{})
	app := &recorder{hook: func(k string) {
		if k == "a" {
			<-release
		}
	}}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: app, Lease: time.Minute, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BusyDelay: time.Millisecond, CommitAttempts: 3,
	})
	_, set := p.SetHandlers(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	ds, cs := batchOf(st, "a", "b", "c", "")
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		set(ds)
	}()
	testutil.Eventually(t, 5*time.Second, "the others acked while a hangs", func() bool {
		for _, c := range cs[1:] {
			if len(c.settled()) != 1 {
				return false
			}
		}
		return true
	})
	if len(cs[0].settled()) != 0 {
		t.Fatal("a settled while it hangs at the app")
	}
	close(release)
	<-returned
	wantSettled(t, cs, "ack", "ack", "ack", "ack")
	if st.claimMany != 1 {
		t.Fatalf("%d ClaimMany calls, want 1", st.claimMany)
	}
	if n := st.count(st.claims, "a") + st.count(st.claims, "b") + st.count(st.claims, "c"); n != 0 {
		t.Fatalf("%d single claims, want 0", n)
	}
}

// A message that cannot be forwarded as it came is given up on in a batch
// too, never claimed ahead and forwarded: the messages around it go.
func TestBatchUnforwardableIsNeverForwarded(t *testing.T) {
	st := newCountingStore()
	app := &recorder{}
	_, h := newBatchPipeline(st, app, time.Minute)
	ds, cs := batchOf(st, "a", "b", "c")
	cs[1].msg.Unforwardable = `no "body" field (body_field)`
	h(ds)
	if got := fmt.Sprint(app.got()); got != `[a c]` {
		t.Fatalf("app saw %s, want a and c only", got)
	}
	wantSettled(t, cs, "ack", "dead_letter", "ack")
	if s, _ := st.Status(context.Background(), stored+"b"); s.State != seenset.Absent {
		t.Fatalf("the unforwardable message's key is %s, want absent", s.State)
	}
}
