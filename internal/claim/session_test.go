package claim_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

var ctx = context.Background()

type commits struct {
	mu   sync.Mutex
	errs []error
}

func (c *commits) Committed(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *commits) all() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

func protocol(t *testing.T, lease time.Duration) *claim.Protocol {
	t.Helper()
	return claim.New(claim.Options{Store: testutil.RedisStore(t, "session-"), Lease: lease, TTL: time.Hour, CommitAttempts: 2})
}

func take(t *testing.T, s *claim.Session) (seenset.ClaimResult, <-chan struct{}) {
	t.Helper()
	res, wait, err := s.Take(ctx, nil)
	if err != nil {
		t.Fatalf("take %s: %v", s.Key(), err)
	}
	return res, wait
}

var (
	body1 = seenset.SumDigest([]byte("one"))
	body2 = seenset.SumDigest([]byte("two"))
	ok    = forward.Result{Outcome: forward.Success, Status: 204}
	fail  = forward.Result{Outcome: forward.Retryable, Status: 503}
	noAns = forward.Result{Outcome: forward.Retryable, MayBeRunning: true}
)

// A success commits: another session of the key, which waited here for
// the outcome, finds it done; Committed is told before Forwarded returns.
func TestSessionCommitWakesLocalWaiter(t *testing.T) {
	p := protocol(t, 5*time.Second)
	a, b := p.Begin("k", body1), p.Begin("k", body1)
	if res, _ := take(t, &a); res != seenset.Claimed {
		t.Fatalf("first take = %v", res)
	}
	res, wait := take(t, &b)
	if res != seenset.Busy || wait == nil {
		t.Fatalf("second take = %v, wait %v: want busy with a local wait", res, wait)
	}
	a.Hold(nil).Stop()
	var c commits
	if act, err := a.Forwarded(ctx, ok, false, &c); act != claim.Commit || err != nil {
		t.Fatalf("Forwarded(2xx) = %v %v", act, err)
	}
	if errs := c.all(); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("committed %v", errs)
	}
	select {
	case <-wait:
	default:
		t.Fatal("the commit did not wake the session waiting here")
	}
	if res, _ := take(t, &b); res != seenset.Duplicate {
		t.Fatalf("after the commit: %v, want duplicate", res)
	}
}

// A failure the app answered releases: the key can be claimed at once.
func TestSessionReleaseOnFailure(t *testing.T) {
	p := protocol(t, 5*time.Second)
	a := p.Begin("k", body1)
	take(t, &a)
	if act, err := a.Forwarded(ctx, fail, false, nil); act != claim.Release || err != nil {
		t.Fatalf("Forwarded(503) = %v %v", act, err)
	}
	b := p.Begin("k", body1)
	if res, _ := take(t, &b); res != seenset.Claimed {
		t.Fatalf("after a release: %v, want claimed", res)
	}
	// The released session claims again under a new token: it finds the
	// key busy (b holds it), not its own.
	if res, _ := take(t, &a); res != seenset.Busy {
		t.Fatalf("the released session's next take = %v, want busy", res)
	}
}

// A request that may still run keeps the claim: a lease from now, or,
// cut short by a shutdown, until app.max_request_time after it began. The
// session's own next Take takes its kept claim over.
func TestSessionKeepUntil(t *testing.T) {
	const lease = 2 * time.Second
	st := testutil.RedisStore(t, "session-")
	p := claim.New(claim.Options{Store: st, Lease: lease, TTL: time.Hour, MaxRequestTime: time.Minute})
	a := p.Begin("k", body1)
	take(t, &a)
	before := time.Now()
	if act, _ := a.Forwarded(ctx, noAns, false, nil); act != claim.Keep {
		t.Fatalf("Forwarded(no answer) = %v, want keep", act)
	}
	if nb := a.NotBefore(); nb.Before(before.Add(lease)) || nb.After(time.Now().Add(lease)) {
		t.Fatalf("kept until %v, want a lease from now", nb)
	}
	if _, here := a.KeptHere(); !here {
		t.Fatal("the kept claim is not known here")
	}
	b := p.Begin("k", body1)
	if res, wait := take(t, &b); res != seenset.Busy || wait != nil {
		t.Fatalf("another session: %v (wait %v), want busy with no local holder", res, wait)
	}
	if res, _ := take(t, &a); res != seenset.Claimed {
		t.Fatalf("the keeping session's own take = %v, want its claim back", res)
	}
	cut := forward.Result{Outcome: forward.Retryable, MayBeRunning: true, Duration: 10 * time.Second}
	_, _ = a.Forwarded(ctx, cut, true, nil)
	if nb := a.NotBefore(); nb.Before(time.Now().Add(49*time.Second)) || nb.After(time.Now().Add(51*time.Second)) {
		t.Fatalf("cut short after 10s: kept until %v from now, want max_request_time − 10s = 50s", time.Until(nb))
	}
	s, err := st.Status(ctx, "k")
	if err != nil || s.State != seenset.Inflight {
		t.Fatalf("stored %+v %v, want in flight", s, err)
	}
}

// A batch claims its sessions in one round trip (a key twice only for the
// first), and commits their successes in the background: Committed comes
// before Wait returns, and the keys are done.
func TestBatchTakeAndCommit(t *testing.T) {
	p := protocol(t, 5*time.Second)
	done := p.Begin("d", body1)
	take(t, &done)
	_, _ = done.Forwarded(ctx, ok, false, &commits{})

	ss := []claim.Session{p.Begin("a", body1), p.Begin("b", body1), p.Begin("a", body1), p.Begin("d", body1), {}}
	g := p.NewBatch()
	res := g.Take(ctx, len(ss), func(i int) *claim.Session { return &ss[i] })
	want := []seenset.ClaimResult{seenset.Claimed, seenset.Claimed, 0, seenset.Duplicate, 0}
	for i := range want {
		if res[i] != want[i] {
			t.Fatalf("batch answers %v, want %v", res, want)
		}
	}
	var c commits
	for _, i := range []int{0, 1} {
		if !ss[i].UseAhead(ctx) || !ss[i].Ahead() {
			t.Fatalf("session %d: its claim taken ahead is not usable", i)
		}
		_, _ = ss[i].Forwarded(ctx, ok, false, &c)
	}
	g.Wait()
	if errs := c.all(); len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("committed %v", errs)
	}
	if r, _ := take(t, &ss[2]); r != seenset.Duplicate {
		t.Fatalf("the key's second session after the commit: %v", r)
	}
}

// A claim taken ahead whose lease ran out and went to another owner is
// lost: UseAhead says no, and the session claims again under a new token.
func TestBatchAheadLost(t *testing.T) {
	const lease = 300 * time.Millisecond
	p := protocol(t, lease)
	ss := []claim.Session{p.Begin("k", body1)}
	p.NewBatch().Take(ctx, 1, func(i int) *claim.Session { return &ss[i] })
	time.Sleep(lease + 100*time.Millisecond)
	other := p.Begin("k", body1)
	if r, _ := take(t, &other); r != seenset.Claimed {
		t.Fatalf("after the lease: %v", r)
	}
	if ss[0].UseAhead(ctx) {
		t.Fatal("a lost claim taken ahead was used")
	}
	if r, _ := take(t, &ss[0]); r != seenset.Busy {
		t.Fatalf("the lost session's take = %v, want busy", r)
	}
}

// A key done for another body is Reused; Reuse claims this body under its
// own key.
func TestSessionReuse(t *testing.T) {
	p := protocol(t, 5*time.Second)
	a := p.Begin("k", body1)
	take(t, &a)
	_, _ = a.Forwarded(ctx, ok, false, &commits{})
	b := p.Begin("k", body2)
	if r, _ := take(t, &b); r != seenset.Reused {
		t.Fatalf("other body: %v, want reused", r)
	}
	if got := b.StoredDigest(ctx); got != body1.String() {
		t.Fatalf("stored digest %q, want %q", got, body1.String())
	}
	b.Reuse()
	if !b.Reused() || b.Key() != claim.ReuseKey("k", body2) {
		t.Fatalf("reused key %q", b.Key())
	}
	if r, _ := take(t, &b); r != seenset.Claimed {
		t.Fatalf("under its own key: %v, want claimed", r)
	}
}

type stopper struct{ tries int }

func (s *stopper) ClaimFailed(int, error) bool { s.tries++; return true }
func (s *stopper) Wait(time.Duration) bool     { return s.tries < 2 }

// A store error is retried while the Waiter agrees; a stopped wait ends
// Take with ErrStopped.
func TestSessionTakeRetries(t *testing.T) {
	p := claim.New(claim.Options{Store: downStore{}, Lease: time.Second})
	s := p.Begin("k", body1)
	w := &stopper{}
	if _, _, err := s.Take(ctx, w); !errors.Is(err, claim.ErrStopped) || w.tries != 2 {
		t.Fatalf("take = %v after %d tries, want ErrStopped after 2", err, w.tries)
	}
	if _, _, err := s.Take(ctx, nil); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("take without a waiter = %v, want the store's error at once", err)
	}
}

type downStore struct{ seenset.Store }

func (downStore) Claim(context.Context, string, string, time.Duration) (seenset.ClaimResult, error) {
	return 0, seenset.ErrUnavailable
}
