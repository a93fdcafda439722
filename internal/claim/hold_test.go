package claim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// outage makes a real store unresponsive for a while: a call made
// during it either hangs until the outage ends (a paused server, whose
// answer comes once it resumes) or until its deadline, or fails at once
// (a refused connection).
type outage struct {
	seenset.Store
	from, to time.Time
	refuse   bool
}

// latency is the store's round trip, outage or not (a Redis in another
// zone): a renewal sent just at the expiry arrives after it.
const latency = 30 * time.Millisecond

func (o *outage) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	time.Sleep(latency)
	if now := time.Now(); !now.Before(o.from) && now.Before(o.to) {
		if o.refuse {
			return seenset.ErrUnavailable
		}
		t := time.NewTimer(time.Until(o.to))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return seenset.ErrUnavailable
		}
	}
	return o.Store.Renew(ctx, key, token, lease)
}

// The stated bound: the lease survives a store that is unresponsive for
// 0.6 of a lease (the bound is 2/3 − 1/30 of a lease) whenever the outage
// starts, here at the worst moment: just before a scheduled renewal, so
// the lease has only two thirds of its life left. Before renewals were
// scheduled from the last success, a renewal that hung to its deadline
// (lease/3) put the next one exactly at the expiry, and another owner
// could claim the key.
func TestHoldSurvivesOutageBelowBound(t *testing.T) {
	const lease = 3 * time.Second
	for _, refuse := range []bool{false, true} {
		name := "hangs"
		if refuse {
			name = "refuses"
		}
		t.Run(name, func(t *testing.T) {
			real := testutil.RedisStore(t, "hold-")
			out := &outage{Store: real, refuse: refuse}
			p := claim.New(claim.Options{Store: out, Lease: lease, TTL: time.Hour})
			s := p.Begin("k", seenset.Digest{})
			from := time.Now()
			if res, _, err := s.Take(context.Background(), nil); err != nil || res != seenset.Claimed {
				t.Fatalf("claim: %v %v", res, err)
			}
			out.from = from.Add(lease/3 - 50*time.Millisecond)
			out.to = out.from.Add(lease * 6 / 10)
			var lost atomic.Bool
			defer s.Hold(claim.LostFunc(func(error) { lost.Store(true) })).Stop()
			// Past the lease the claim started with, and after the outage:
			// only renewals that worked keep it.
			time.Sleep(time.Until(from.Add(lease + 300*time.Millisecond)))
			other := claim.New(claim.Options{Store: real, Lease: lease, TTL: time.Hour}).Begin("k", seenset.Digest{})
			if res, _, err := other.Take(context.Background(), nil); err != nil || res != seenset.Busy {
				t.Fatalf("another owner's claim after a %s outage = %v %v, want busy: the lease ran out", lease*6/10, res, err)
			}
			if lost.Load() {
				t.Fatal("the hold reported its lease lost")
			}
		})
	}
}

// Past what is left of the lease, the hold cannot keep it, and says so
// once the store answers again: the claim is no longer its own.
func TestHoldReportsLostLease(t *testing.T) {
	const lease = 1500 * time.Millisecond
	real := testutil.RedisStore(t, "hold-")
	from := time.Now()
	out := &outage{Store: real, refuse: true, from: from, to: from.Add(lease + 500*time.Millisecond)}
	p := claim.New(claim.Options{Store: out, Lease: lease, TTL: time.Hour})
	s := p.Begin("k", seenset.Digest{})
	if res, _, err := s.Take(context.Background(), nil); err != nil || res != seenset.Claimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	lost := make(chan struct{})
	defer s.Hold(claim.LostFunc(func(error) { close(lost) })).Stop()
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the lost lease was never reported")
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		res  forwardResult
		want claim.Action
	}{
		{forwardResult{success: true}, claim.Commit},
		{forwardResult{success: true, slow: true}, claim.Commit},
		{forwardResult{}, claim.Release},
		{forwardResult{mayRun: true}, claim.Keep},
	} {
		if got := claim.Decide(tc.res.result()); got != tc.want {
			t.Errorf("Decide(%+v) = %v, want %v", tc.res, got, tc.want)
		}
	}
}

type forwardResult struct{ success, slow, mayRun bool }

func (f forwardResult) result() forward.Result {
	r := forward.Result{Outcome: forward.Retryable, Slow: f.slow, MayBeRunning: f.mayRun}
	if f.success {
		r.Outcome = forward.Success
	}
	return r
}
