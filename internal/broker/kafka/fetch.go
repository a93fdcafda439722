package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
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

// reader fetches one assigned partition with franz-go's kgo client.
// kafka-go's Reader reads the aborted-transaction list of a fetch response
// and throws it away, and hands out the commit/abort markers as records: a
// read_committed consumer built on it would deliver aborted payments and
// empty messages. kgo filters both. Group membership and commits stay
// with kafka-go: this client never joins a group, it consumes exactly the
// one partition from exactly the offset the generation assigned.
type reader struct {
	cl *kgo.Client
	// buf holds records polled and not yet handed out; hwm is the high
	// watermark of the fetch they came in.
	buf []*kgo.Record
	hwm int64
	max int
}

// newReader starts fetching p from p.start. One client per partition
// keeps a revocation, a fetch failure and the read-ahead bound a matter
// of that partition alone, as with one kafka-go Reader each before.
func (p *partition) newReader() (*reader, error) {
	s := p.s
	var at kgo.Offset
	switch p.start {
	case kafkago.FirstOffset:
		at = kgo.NewOffset().AtStart()
	case kafkago.LastOffset:
		at = kgo.NewOffset().AtEnd()
	default:
		at = kgo.NewOffset().At(p.start)
	}
	opts := append(s.kgoOpts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.topic: {int32(p.id): at}}),
		kgo.WithHooks(&fetchHook{p: p}),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &reader{cl: cl, hwm: -1, max: max(s.o.BatchSize, 1)}, nil
}

// kgoOpts are the client options every partition reader shares.
func (s *Source) kgoOpts() []kgo.Opt {
	level := kgo.ReadCommitted()
	if s.o.IsolationLevel == IsolationReadUncommitted {
		level = kgo.ReadUncommitted()
	}
	// From 100ms, as the kafka-go reader retried: a cut connection is
	// usually back at once.
	backoff := func(tries int) time.Duration {
		d := min(100*time.Millisecond, s.o.RetryBackoff)
		for i := 1; i < tries && d < s.o.RetryBackoffMax; i++ {
			d *= 2
		}
		return min(d, s.o.RetryBackoffMax)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.o.Brokers...),
		kgo.ClientID(s.o.ClientID),
		kgo.DialTimeout(s.o.NetworkTimeout),
		kgo.RetryBackoffFn(backoff),
		// A moved leader is found again within a second, not kgo's 5s.
		kgo.MetadataMinAge(time.Second),
		kgo.FetchIsolationLevel(level),
		kgo.FetchMaxWait(s.o.FetchMaxWait),
		// kgo issues a partition's next fetch only once the previous
		// response was polled completely, so at most one response waits
		// per partition; 256 KiB keeps a sidecar's memory small with many
		// partitions (peak RSS with six, make bench: 74 MiB at 10 MiB,
		// 51 MiB at 1 MiB, 34 MiB at 256 KiB, no slower) and still holds
		// hundreds of envelopes. A larger record still arrives: the broker
		// returns the first batch whatever its size.
		kgo.FetchMaxBytes(256 << 10),
		kgo.FetchMaxPartitionBytes(256 << 10),
		// A committed offset below the log start (retention passed it)
		// resumes at the log start, as kafka-go's reader did.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// One partition per client gains nothing from a fetch session,
		// and each would take one of the broker's session cache slots,
		// evicting other consumers' sessions.
		kgo.DisableFetchSessions(),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(kgoLogger{s.log}),
	}
	if s.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(s.tls))
	}
	if s.kgoSASL != nil {
		opts = append(opts, kgo.SASL(s.kgoSASL))
	}
	return opts
}

// next returns the next record of the partition and the high watermark of
// its fetch, waiting for one; an error is a failed fetch (kgo keeps
// retrying on its own) or ctx's.
func (r *reader) next(ctx context.Context) (kafkago.Message, int64, error) {
	for len(r.buf) == 0 {
		// Polling at most max records leaves the rest of the response in
		// kgo, which does not fetch again until it is drained: the
		// partition never reads further ahead than one response.
		fs := r.cl.PollRecords(ctx, r.max)
		if err := ctx.Err(); err != nil {
			return kafkago.Message{}, 0, err
		}
		var ferr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil && ferr == nil {
				ferr = fmt.Errorf("%s[%d]: %w", fp.Topic, fp.Partition, fp.Err)
			}
			if fp.HighWatermark > r.hwm {
				r.hwm = fp.HighWatermark
			}
			r.buf = append(r.buf, fp.Records...)
		})
		if ferr != nil && len(r.buf) == 0 {
			return kafkago.Message{}, 0, ferr
		}
	}
	rec := r.buf[0]
	r.buf[0] = nil
	r.buf = r.buf[1:]
	return message(rec, r.hwm), r.hwm, nil
}

// close stops the client: no fetch survives it.
func (r *reader) close() { r.cl.Close() }

// message is a record in the shape the rest of the source uses.
func message(r *kgo.Record, hwm int64) kafkago.Message {
	var hs []kafkago.Header
	if len(r.Headers) > 0 {
		hs = make([]kafkago.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kafkago.Header{Key: h.Key, Value: h.Value}
		}
	}
	return kafkago.Message{
		Topic:         r.Topic,
		Partition:     int(r.Partition),
		Offset:        r.Offset,
		HighWaterMark: hwm,
		Key:           r.Key,
		Value:         r.Value,
		Headers:       hs,
		Time:          r.Timestamp,
	}
}

// fetchHook reports the partition's fetch failures and recoveries. kgo
// retries a failed connection or fetch by itself, with RetryBackoff up to
// RetryBackoffMax between attempts, and does not surface it to the poll:
// without this hook a partition cut off from its leader would look ready.
type fetchHook struct{ p *partition }

var (
	_ kgo.HookBrokerConnect = (*fetchHook)(nil)
	_ kgo.HookBrokerE2E     = (*fetchHook)(nil)
)

func (h *fetchHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.failed(meta, err)
	}
}

func (h *fetchHook) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != kmsg.Fetch.Int16() {
		return
	}
	if err := e2e.Err(); err != nil {
		h.failed(meta, err)
		return
	}
	h.p.setFailing(false)
}

func (h *fetchHook) failed(meta kgo.BrokerMetadata, err error) {
	p := h.p
	if p.setFailing(true) {
		broker := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
		p.s.fetching.Down(fmt.Errorf("topic %s partition %d, broker %s: %w", p.topic, p.id, broker, err))
		p.s.log.Debug("kafka fetch failed, retrying", "topic", p.topic, "partition", p.id, "broker", broker, "err", err)
	}
}

// kgoLogger turns kgo's logging into slog lines, one level down as for
// kafka-go: the source logs what matters to an operator itself.
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
