package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Isolation levels: which records of transactional producers a partition
// reads.
const (
	// IsolationReadCommitted reads only up to the last stable offset and
	// drops the records of aborted transactions.
	IsolationReadCommitted = "read_committed"
	// IsolationReadUncommitted reads every record as soon as it is written,
	// those of open and aborted transactions included.
	IsolationReadUncommitted = "read_uncommitted"
)

// poll hands every fetched record to its partition's queue until ctx
// ends. Handing over only appends (a full partition is paused, never
// waited for), so the loop always drains what the client buffered and
// one slow partition never holds up the fetches of the others.
func (s *Source) poll(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			cl.AllowRebalance()
			return
		}
		fs.EachError(func(topic string, part int32, err error) {
			var session *kgo.ErrGroupSession
			switch {
			case errors.Is(err, context.Canceled):
			case errors.As(err, &session):
				// Reported by the group hook; the partitions were
				// lost and the client re-joins.
			default:
				// What kgo hands back (an authorization or a
				// data-loss error, say) may clear up; the client
				// keeps fetching.
				err = fmt.Errorf("topic %s partition %d: %w", topic, part, err)
				s.link.fetchFailed(err)
				s.fetching.Down(err)
				s.log.Debug("kafka fetch failed, retrying", "topic", topic, "partition", part, "err", err)
			}
		})
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			s.partsMu.Lock()
			p := s.parts[topicPartition{fp.Topic, fp.Partition}]
			s.partsMu.Unlock()
			if p == nil {
				// Cannot happen while polls and rebalances exclude each
				// other; were it to, the records stay uncommitted and
				// their next owner reads them.
				s.log.Debug("kafka records for a partition not held, dropped", "topic", fp.Topic, "partition", fp.Partition)
				return
			}
			p.enqueue(fp.Records, fp.HighWatermark)
		})
		cl.AllowRebalance()
	}
}

// link follows whether the connections the source depends on work. A
// fetch or heartbeat that fails on the wire breaks it: the Lost channel
// of everything handed out closes. A fetch or heartbeat that succeeds
// mends it, and deliveries from then on get a new channel.
type link struct {
	mu       sync.Mutex
	down     bool
	up       chan struct{} // closed when a broken link works again
	failedAt time.Time     // last failure, zero once something worked
	lastErr  error
}

func (l *link) init() {
	l.up = make(chan struct{})
	close(l.up)
}

// broke records a connection failure; true when it just broke.
func (l *link) broke(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failedAt, l.lastErr = time.Now(), err
	if l.down {
		return false
	}
	l.down = true
	l.up = make(chan struct{})
	return true
}

// fetchFailed records a failure that left the connection up.
func (l *link) fetchFailed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failedAt, l.lastErr = time.Now(), err
}

// works records a success; it reports whether the link was broken.
func (l *link) works() (mended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failedAt, l.lastErr = time.Time{}, nil
	if l.down {
		l.down = false
		close(l.up)
		return true
	}
	return false
}

func (l *link) isDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

// wait returns once the link works (true) or ctx ended (false).
func (l *link) wait(ctx context.Context) bool {
	l.mu.Lock()
	up := l.up
	l.mu.Unlock()
	select {
	case <-up:
		return true
	case <-ctx.Done():
		return false
	}
}

// failing is the last failure if it is more recent than window: an idle
// client may not fetch again for a while, so a failure counts only while
// it is recent (a client that stays cut off reports another one at least
// every RetryBackoffMax).
func (l *link) failing(window time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failedAt.IsZero() || time.Since(l.failedAt) >= window {
		return nil
	}
	return l.lastErr
}

// hooks report connection, fetch and group failures, which kgo retries
// by itself without surfacing them to the poll: without them a source
// cut off from its brokers would look ready.
type hooks struct{ s *Source }

var (
	_ kgo.HookBrokerConnect    = (*hooks)(nil)
	_ kgo.HookBrokerE2E        = (*hooks)(nil)
	_ kgo.HookGroupManageError = (*hooks)(nil)
)

func (h *hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
		h.broke(meta, err)
	}
}

func (h *hooks) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != kmsg.Fetch.Int16() && key != kmsg.Heartbeat.Int16() {
		return
	}
	err := e2e.Err()
	if err == nil {
		h.works()
		return
	}
	// A fetch kgo cancels itself (a partition moved, the client closes)
	// is no failure of the connection.
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	h.broke(meta, err)
}

func (h *hooks) OnGroupManageError(err error) {
	s := h.s
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	s.member.Store(false)
	s.groupLost.Store(true)
	s.group.Down(err)
	s.log.Debug("kafka group unavailable, retrying", "err", err)
}

func (h *hooks) broke(meta kgo.BrokerMetadata, err error) {
	s := h.s
	broker := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
	err = fmt.Errorf("broker %s: %w", broker, err)
	if s.link.broke(err) {
		for _, p := range s.holding() {
			p.breakLost()
		}
	}
	s.fetching.Down(err)
	s.log.Debug("kafka fetch failed, retrying", "broker", broker, "err", err)
}

func (h *hooks) works() {
	s := h.s
	if s.link.works() {
		for _, p := range s.holding() {
			p.renewLost()
		}
	}
	// Every success, not only the first after a failure: a failure that
	// comes while the "back" line waits out its Settle cancels that line,
	// and only a later success arms it again (one atomic load when up).
	s.fetching.Up()
}

// kgoLogger turns kgo's logging into slog lines, one level down: the
// source logs what matters to an operator itself.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	switch ctx := context.Background(); {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelNone
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelDebug
	if level <= kgo.LogLevelWarn {
		l = slog.LevelInfo
	}
	k.l.Log(context.Background(), l, "kgo: "+msg, keyvals...)
}
