package redissource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// link is what both modes keep of their connection to the broker Redis:
// the dependency's state (consuming or not, why the last session ended),
// a problem Ready reports while connected (WRONGTYPE), and the loop that
// starts sessions again with a backoff. One copy, so the list and the
// stream reconnect and report their state the same way.
type link struct {
	rdb redis.UniversalClient
	// batch sends the settles (acks, requeues, dead letters) of every
	// worker in shared pipelines, one in flight at a time, as the
	// seen-set does its claims and commits.
	batch *rediscoalesce.Coalescer
	log   *slog.Logger
	// what names the key consumed, for Ready: `redis queue "orders"`.
	what string

	// dep is up while a session consumes; Run sets it.
	dep     atomic.Pointer[supervise.Dep]
	problem atomic.Pointer[error]
	closed  sync.Once
}

// Ready implements broker.Source.
func (l *link) Ready() error {
	d := l.dep.Load()
	if d == nil {
		return broker.ErrNotConnected
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w to %s: %v", broker.ErrNotConnected, l.what, err)
	}
	if !d.IsUp() {
		return broker.ErrNotConnected
	}
	if p := l.problem.Load(); p != nil {
		return *p
	}
	return nil
}

// Close implements broker.Source.
func (l *link) Close() error {
	var err error
	l.closed.Do(func() {
		l.batch.Close()
		err = l.rdb.Close()
	})
	return err
}

// reconnect runs session until ctx ends, waiting a backoff between
// sessions; lines are what the source logs when it starts consuming,
// when a session that had consumed ends and when one could not start.
func (l *link) reconnect(ctx context.Context, p backoff.Policy, lines supervise.Lines,
	session func(ctx context.Context, reconnect bool) (bool, error)) error {
	d := supervise.New(supervise.Options{Log: l.log, Lines: lines})
	l.dep.Store(d)
	supervise.Loop{Dep: d, Policy: p}.Run(ctx, session)
	return nil
}

// started marks a session consuming: Ready answers nil, a reconnect is
// counted, and the start line is logged with attrs and, after an
// outage, how long it lasted.
func (l *link) started(reconnect bool, m *metrics.SourceMetrics, attrs ...any) *session {
	if reconnect && m != nil {
		m.Reconnects.Inc()
	}
	l.dep.Load().SetUp(append(attrs, "reconnect", reconnect)...)
	return &session{lost: make(chan struct{}), failed: make(chan struct{})}
}

// stopped marks a session no longer consuming, at once: the loop logs
// why once the session has wound down.
func (l *link) stopped(err error) { l.dep.Load().Lose(err) }

// wrongType is ErrWrongType for key, which should hold a kind ("list",
// "stream"), when err is Redis's WRONGTYPE answer; nil otherwise.
func wrongType(err error, key, kind string) error {
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return nil
	}
	return fmt.Errorf("%w: %q is not a %s (%v); nothing is consumed until it is fixed", ErrWrongType, key, kind, err)
}

// refused records a server's answer that refused a read (WRONGTYPE and
// its like: the connection is fine) as the problem Ready reports, logs
// line at the first of a run, and waits retry's next delay: an operator
// may be fixing the key. False when the session ended meanwhile.
func (l *link) refused(ctx context.Context, stop <-chan struct{}, retry *backoff.Backoff, err error, line string) bool {
	if l.problem.Swap(&err) == nil {
		l.log.Error(line, "err", err)
	}
	return backoff.Wait(ctx, stop, retry.Next())
}

// reading clears the problem once a read works, logging line if there
// was one.
func (l *link) reading(line string) {
	if l.problem.Swap(nil) != nil {
		l.log.Info(line)
	}
}

// newLink is the link of one source on rdb.
func newLink(rdb redis.UniversalClient, what string) link {
	// A pipeline's bound: the client's read timeout and a write's.
	return link{rdb: rdb, what: what, batch: rediscoalesce.New(rdb, 6*time.Second, 0, 0)}
}
