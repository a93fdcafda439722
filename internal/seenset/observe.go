package seenset

import (
	"context"
	"errors"
	"time"
)

// Observer is told of every call an observed Store makes: its operation
// ("claim", "renew", "commit", "release", "forget", "status", "ping"), how
// long the round trip took and its error. A batch of claims or commits is
// one call.
type Observer interface {
	StoreCall(op string, took time.Duration, err error)
}

// Failed reports whether err counts as a failed store call. ErrNotOwner is
// the store's answer that a lease was lost, not a failure to reach it, so
// every counter of store errors leaves it out; everything else counts.
func Failed(err error) bool {
	return err != nil && !errors.Is(err, ErrNotOwner)
}

// Observe returns s with every call reported to each observer, in order.
// It is the one place store calls are timed and their errors counted: the
// pipeline, the webhook handler and the admin API all go through it. The
// result is a BatchStore when s is one.
func Observe(s Store, obs ...Observer) Store {
	if len(obs) == 0 {
		return s
	}
	o := observed{s: s, obs: obs}
	if b, ok := s.(BatchStore); ok {
		return observedBatch{observed: o, b: b}
	}
	return o
}

type observed struct {
	s   Store
	obs []Observer
}

func (o observed) report(op string, start time.Time, err error) {
	took := time.Since(start)
	for _, ob := range o.obs {
		ob.StoreCall(op, took, err)
	}
}

func (o observed) Claim(ctx context.Context, key, token string, lease time.Duration) (ClaimResult, error) {
	start := time.Now()
	r, err := o.s.Claim(ctx, key, token, lease)
	o.report("claim", start, err)
	return r, err
}

func (o observed) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	start := time.Now()
	err := o.s.Renew(ctx, key, token, lease)
	o.report("renew", start, err)
	return err
}

func (o observed) Commit(ctx context.Context, key, token string, ttl time.Duration) error {
	start := time.Now()
	err := o.s.Commit(ctx, key, token, ttl)
	o.report("commit", start, err)
	return err
}

func (o observed) Release(ctx context.Context, key, token string) error {
	start := time.Now()
	err := o.s.Release(ctx, key, token)
	o.report("release", start, err)
	return err
}

func (o observed) Forget(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := o.s.Forget(ctx, key)
	o.report("forget", start, err)
	return ok, err
}

func (o observed) Status(ctx context.Context, key string) (Status, error) {
	start := time.Now()
	st, err := o.s.Status(ctx, key)
	o.report("status", start, err)
	return st, err
}

func (o observed) Ping(ctx context.Context) error {
	start := time.Now()
	err := o.s.Ping(ctx)
	o.report("ping", start, err)
	return err
}

func (o observed) Close() error { return o.s.Close() }

// Unwrap returns the store under the observers.
func (o observed) Unwrap() Store { return o.s }

type observedBatch struct {
	observed
	b BatchStore
}

// firstFailure is a batch's outcome for its observers: its first failed
// item, or nil when every item was answered.
func firstFailure(errs []error) error {
	for _, err := range errs {
		if Failed(err) {
			return err
		}
	}
	return nil
}

func (o observedBatch) ClaimMany(ctx context.Context, items []KeyToken, lease time.Duration) []ClaimReply {
	start := time.Now()
	out := o.b.ClaimMany(ctx, items, lease)
	var err error
	for _, r := range out {
		if Failed(r.Err) {
			err = r.Err
			break
		}
	}
	o.report("claim", start, err)
	return out
}

func (o observedBatch) CommitMany(ctx context.Context, items []KeyToken, ttl time.Duration) []error {
	start := time.Now()
	out := o.b.CommitMany(ctx, items, ttl)
	o.report("commit", start, firstFailure(out))
	return out
}
