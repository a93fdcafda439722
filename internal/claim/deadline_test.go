package claim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

func TestDeadlinesShareWithinATickOnly(t *testing.T) {
	d := newDeadlines(500 * time.Millisecond) // tick 100 ms
	parent, stopParent := context.WithCancel(context.Background())
	defer stopParent()
	other, stopOther := context.WithCancel(context.Background())
	defer stopOther()

	start := time.Now()
	a, cancelA := d.bound(parent)
	b, cancelB := d.bound(parent)
	cancelA()
	cancelB()
	if a != b {
		t.Fatal("two calls in one tick under one parent did not share a deadline")
	}
	if a.Err() != nil {
		t.Fatal("a caller's cancel ended the shared context for the others")
	}
	dl, ok := a.Deadline()
	if !ok || dl.Sub(start) < 500*time.Millisecond || dl.Sub(start) > 600*time.Millisecond+50*time.Millisecond {
		t.Fatalf("shared deadline %v after the start, want within [timeout, timeout+tick]", dl.Sub(start))
	}
	c, _ := d.bound(other)
	if c == a {
		t.Fatal("calls under different parents shared a context")
	}
	stopOther()
	if a.Err() != nil {
		t.Fatal("cancelling one parent ended another parent's calls")
	}

	time.Sleep(120 * time.Millisecond)
	later, _ := d.bound(parent)
	if later == a {
		t.Fatal("a call a tick later got a context with less than the timeout left")
	}
	if a.Err() != nil {
		t.Fatal("the shared context was cancelled when replaced, cutting its calls short")
	}
	if dl2, _ := later.Deadline(); time.Until(dl2) < 500*time.Millisecond-20*time.Millisecond {
		t.Fatalf("the new shared context leaves %v, want about the timeout", time.Until(dl2))
	}
	stopParent()
	if later.Err() == nil {
		t.Fatal("the parent's cancellation did not reach the calls under it")
	}
	if again, _ := d.bound(parent); again.Err() == nil {
		t.Fatal("a call under a cancelled parent got a live context")
	}
}

// hangingStore answers nothing until the call's context ends.
type hangingStore struct{ seenset.Store }

func (hangingStore) Claim(ctx context.Context, _, _ string, _ time.Duration) (seenset.ClaimResult, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (hangingStore) Commit(ctx context.Context, _, _ string, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// Every claim and commit round trip still ends by the op timeout (and a
// tick), also when many start together and share one deadline, and
// under a parent that never ends.
func TestRoundTripsBoundedWithSharedDeadlines(t *testing.T) {
	p := New(Options{Store: hangingStore{}, Lease: time.Second, TTL: time.Minute, OpTimeout: 300 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make(chan time.Duration, 40)
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, _ = p.claim(context.Background(), "k", "t")
			errs <- time.Since(start)
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			_ = p.commit(context.WithoutCancel(context.Background()), "k", "t")
			errs <- time.Since(start)
		}()
		if i == 10 {
			time.Sleep(100 * time.Millisecond) // a second tick
		}
	}
	wg.Wait()
	close(errs)
	for took := range errs {
		if took < 300*time.Millisecond-10*time.Millisecond || took > 2*time.Second {
			t.Fatalf("a round trip against a hanging store ended after %v, want about the op timeout (300 ms, up to a tick more)", took)
		}
	}
}
