package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
				s.link.Failed(err)
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
	if s.link.SetDown(err, true) {
		for _, p := range s.holding() {
			p.breakLost()
		}
	}
	s.fetching.Down(err)
	s.log.Debug("kafka fetch failed, retrying", "broker", broker, "err", err)
}

func (h *hooks) works() {
	s := h.s
	if s.link.SetUp() {
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
