// Package kafka is the Kafka source: a consumer-group member built on
// kafka-go's ConsumerGroup / Generation API, so that every rebalance is
// visible instead of hidden inside a Reader.
//
// Per generation, every assigned partition gets its own goroutine (started
// with Generation.Start, whose context ends on revocation) reading from the
// offset the group holds with its own franz-go (kgo) client, which consumes
// that one partition and nothing else: no group, no commits of its own.
// kgo and not a kafka-go Reader because only kgo honours the isolation
// level: with IsolationReadCommitted (the default) records of aborted
// transactions never reach the handler and an open transaction's records
// wait until it ends; transaction markers are never handed out at either
// level. Partitions run in parallel.
//
// Ordering. OrderingPartition (the default) hands a partition's messages
// to the handler in offset order: to a BatchHandler (RunBatches) up to
// BatchSize at a time, as many as were already fetched, to a Handler (Run)
// one at a time. OrderingKey lets messages
// of one partition with different record keys run concurrently, while
// messages with the same record key stay strictly in offset order (and all
// messages without a record key are ordered among themselves). MaxInFlight
// bounds both the handlers running at once across the source and how far
// past its oldest unfinished message a partition reads (so how much is
// delivered again after a crash).
//
// Offsets. A tracker per partition follows which fetched messages are
// finished (acked or dead-lettered). One committer per generation commits,
// for every partition of that generation, the highest contiguous finished
// offset + 1 — never past an unfinished message, never below what the
// group already holds — every CommitInterval, sooner once a partition has
// CommitEvery finished messages, and a last time when the generation ends
// (revocation or shutdown), after the partition's running handlers have
// returned. Commits go through the generation, so a member that lost the
// group cannot move offsets, and only for the partitions it was assigned.
//
// Settling. Ack and DeadLetter finish a message. Requeue leaves it
// unfinished: the partition does not commit past it, and it is delivered
// again after the rebalance or restart (the seen-set then recognises what
// was done). A message requeued while its partition is still assigned is
// handed to the handler again here, in place, keeping the partition's
// order. Lost is closed when the partition is revoked or the source stops.
//
// Dead letters are produced to DeadLetterTopic (acks=all, with a deadline)
// with x-dedupe-* reason headers, the original headers and the original
// key, and only then finished. Without a dead-letter topic DeadLetter
// returns broker.ErrNoDeadLetter: the pipeline keeps retrying, the
// partition holds (it neither skips nor commits past the message), and the
// partitions-held gauge and an error log line say so.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
)

// Ordering modes.
const (
	OrderingPartition = "partition"
	OrderingKey       = "key"
)

// Start offsets for a group without a committed offset.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Options configure a Source. Zero durations and counts take the
// defaults noted on each field.
type Options struct {
	Name    string
	Brokers []string
	Topics  []string
	Group   string
	// StartOffset is where a partition without a committed offset starts:
	// StartEarliest (default) or StartLatest.
	StartOffset string
	// IsolationLevel is IsolationReadCommitted (default) or
	// IsolationReadUncommitted.
	IsolationLevel string
	// Ordering is OrderingPartition (default) or OrderingKey.
	Ordering string
	// MaxInFlight (OrderingKey) bounds the messages of the source at the
	// handler at once, and how many fetched messages of one partition may
	// wait behind its oldest unfinished one. Default 64.
	MaxInFlight int
	// BatchSize (OrderingPartition) is the most messages of one partition
	// handed to a BatchHandler at once: those already fetched, never
	// waiting for more. Default 32; 1 hands them over one by one.
	BatchSize int
	// CommitInterval and CommitEvery batch offset commits. Defaults 1s, 500.
	CommitInterval time.Duration
	CommitEvery    int
	// Group timing; defaults 10s, 1s, 30s. kafka-go's own 30s session
	// timeout leaves partitions of a crashed member idle for ~100s.
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration
	// DeadLetterTopic receives dead letters; empty: none (partitions hold).
	DeadLetterTopic string
	SASL            SASL
	TLS             TLS
	// ClientID names the client to the brokers. Default "dedupe-proxy".
	ClientID string
	// NetworkTimeout bounds dials and every request to the group
	// coordinator, offset commits included. Default 5s.
	NetworkTimeout time.Duration
	// RetryBackoff and RetryBackoffMax pace retries of failed fetches and
	// re-joins. Defaults 500ms and 5s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// FetchMaxWait is how long a fetch waits for data on an idle partition;
	// it also bounds how long stopping a partition's reader takes. Default
	// 250ms.
	FetchMaxWait time.Duration
	// DeadLetterTimeout bounds one dead-letter produce. Default 10s.
	DeadLetterTimeout time.Duration
	Logger            *slog.Logger
	Metrics           *metrics.SourceMetrics
}

// Source is one consumer-group member.
type Source struct {
	o         Options
	log       *slog.Logger
	m         *metrics.SourceMetrics
	dialer    *kafkago.Dialer
	transport *kafkago.Transport
	writer    *kafkago.Writer
	start     int64
	// tls and kgoSASL configure the partition readers' kgo clients.
	tls     *tls.Config
	kgoSASL kgosasl.Mechanism

	// slots bounds the handlers running at once in OrderingKey.
	slots chan struct{}

	member atomic.Bool
	// fetchErr holds, per partition whose last fetch failed, when it did.
	// A partition reader reconnects on its own and an idle partition then
	// just waits, so a failure counts only while it is recent: a reader
	// that stays cut off reports another error at least every
	// RetryBackoffMax.
	fetchMu  sync.Mutex
	fetchErr map[*partition]time.Time

	held       prometheus.Gauge
	commits    prometheus.Counter
	commitFail prometheus.Counter
	reconnects prometheus.Counter

	// fetching and group log when fetching starts failing on some
	// partition (or the group cannot be joined) and when it works again,
	// once each way; the per-retry lines are debug.
	fetching, group *statelog.Tracker

	closeOnce sync.Once
}

var _ broker.Source = (*Source)(nil)

// New returns a Source; it connects when Run is called. It fails only on
// options that can never work (a TLS file that cannot be read, an unknown
// SASL mechanism or isolation level, a broker address kgo cannot parse).
func New(o Options) (*Source, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil).ForSource(o.Name)
	}
	if o.StartOffset == "" {
		o.StartOffset = StartEarliest
	}
	if o.Ordering == "" {
		o.Ordering = OrderingPartition
	}
	if o.IsolationLevel == "" {
		o.IsolationLevel = IsolationReadCommitted
	}
	defaultInt(&o.MaxInFlight, 64)
	defaultInt(&o.BatchSize, 32)
	defaultInt(&o.CommitEvery, 500)
	defaultDuration(&o.CommitInterval, time.Second)
	defaultDuration(&o.SessionTimeout, 10*time.Second)
	defaultDuration(&o.HeartbeatInterval, time.Second)
	defaultDuration(&o.RebalanceTimeout, 30*time.Second)
	defaultDuration(&o.NetworkTimeout, 5*time.Second)
	defaultDuration(&o.RetryBackoff, 500*time.Millisecond)
	defaultDuration(&o.RetryBackoffMax, 5*time.Second)
	defaultDuration(&o.FetchMaxWait, 250*time.Millisecond)
	defaultDuration(&o.DeadLetterTimeout, 10*time.Second)
	if o.RetryBackoffMax < o.RetryBackoff {
		o.RetryBackoffMax = o.RetryBackoff
	}
	if o.ClientID == "" {
		o.ClientID = "dedupe-proxy"
	}
	switch o.Ordering {
	case OrderingPartition, OrderingKey:
	default:
		return nil, fmt.Errorf("kafka: unknown ordering %q", o.Ordering)
	}
	switch o.IsolationLevel {
	case IsolationReadCommitted, IsolationReadUncommitted:
	default:
		return nil, fmt.Errorf("kafka: unknown isolation level %q", o.IsolationLevel)
	}
	var start int64
	switch o.StartOffset {
	case StartEarliest:
		start = kafkago.FirstOffset
	case StartLatest:
		start = kafkago.LastOffset
	default:
		return nil, fmt.Errorf("kafka: unknown start offset %q", o.StartOffset)
	}
	if len(o.Brokers) == 0 || len(o.Topics) == 0 || o.Group == "" {
		return nil, errors.New("kafka: brokers, topics and group must be set")
	}
	mech, err := o.SASL.mechanism()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := o.TLS.config()
	if err != nil {
		return nil, err
	}
	s := &Source{
		o:       o,
		log:     o.Logger.With("source", o.Name, "group", o.Group),
		m:       o.Metrics,
		start:   start,
		tls:     tlsCfg,
		kgoSASL: o.SASL.kgoMechanism(),
		dialer: &kafkago.Dialer{
			ClientID:      o.ClientID,
			Timeout:       o.NetworkTimeout,
			DualStack:     true,
			SASLMechanism: mech,
			TLS:           tlsCfg,
		},
		slots:      make(chan struct{}, o.MaxInFlight),
		fetchErr:   map[*partition]time.Time{},
		held:       o.Metrics.PartitionsHeld,
		commits:    o.Metrics.Commits,
		commitFail: o.Metrics.CommitFailures,
		reconnects: o.Metrics.Reconnects,
	}
	s.fetching = statelog.New(s.log, "kafka fetch failing: the partitions affected wait, nothing is skipped", "kafka fetching again on every partition")
	s.group = statelog.New(s.log, "kafka group unavailable: retrying", "kafka group available again")
	if err := kgo.ValidateOpts(s.kgoOpts()...); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if o.DeadLetterTopic != "" {
		s.transport = &kafkago.Transport{
			DialTimeout: o.NetworkTimeout,
			ClientID:    o.ClientID,
			TLS:         tlsCfg,
			SASL:        mech,
		}
		s.writer = &kafkago.Writer{
			Addr:  kafkago.TCP(o.Brokers...),
			Topic: o.DeadLetterTopic,
			// Same key, same dead-letter partition: a redrive keeps the
			// order of a key's failures.
			Balancer: &kafkago.Hash{},
			// The default (no acks) reports success for a write to a dead
			// broker; a dead letter must be on the brokers before the
			// message is committed past.
			RequiredAcks: kafkago.RequireAll,
			// A synchronous write waits out BatchTimeout (default 1s).
			BatchTimeout:    2 * time.Millisecond,
			MaxAttempts:     3,
			WriteBackoffMin: 100 * time.Millisecond,
			WriteBackoffMax: time.Second,
			ReadTimeout:     o.NetworkTimeout,
			WriteTimeout:    o.NetworkTimeout,
			Transport:       s.transport,
			Logger:          kafkaLogger(s.log, slog.LevelDebug),
			ErrorLogger:     kafkaLogger(s.log, slog.LevelInfo),
		}
	}
	return s, nil
}

func defaultInt(v *int, d int) {
	if *v <= 0 {
		*v = d
	}
}

func defaultDuration(v *time.Duration, d time.Duration) {
	if *v <= 0 {
		*v = d
	}
}

// Name implements broker.Source.
func (s *Source) Name() string { return s.o.Name }

// Requeues implements broker.Source: a partition is ordered, so a message
// is never handed to another consumer; the pipeline retries it itself.
func (s *Source) Requeues() bool { return false }

// Ready implements broker.Source: nil while this process is a member of
// the group and every assigned partition can fetch.
func (s *Source) Ready() error {
	if !s.member.Load() {
		return broker.ErrNotConnected
	}
	s.fetchMu.Lock()
	n := 0
	for _, at := range s.fetchErr {
		if time.Since(at) < 3*s.o.RetryBackoffMax {
			n++
		}
	}
	s.fetchMu.Unlock()
	if n > 0 {
		return fmt.Errorf("%w: fetching fails on %d partition(s)", broker.ErrNotConnected, n)
	}
	return nil
}

// fetchFailed records (failed) or clears a partition's fetch failure.
func (s *Source) fetchFailed(p *partition, failed bool) {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if failed {
		s.fetchErr[p] = time.Now()
	} else {
		delete(s.fetchErr, p)
		if len(s.fetchErr) == 0 {
			s.fetching.Up()
		}
	}
}

// Close implements broker.Source; Run already closed everything it opened.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		if s.writer != nil {
			_ = s.writer.Close()
		}
		if s.transport != nil {
			s.transport.CloseIdleConnections()
		}
	})
	return nil
}

// Run implements broker.Source. kafka-go's ConsumerGroup joins, re-joins
// after every rebalance and retries a lost coordinator on its own; Run
// starts the partitions of every generation it hands out. When ctx ends,
// closing the group ends the current generation: partitions stop
// fetching, running handlers return (the pipeline bounds them by its
// shutdown timeout), finished work is committed, the member leaves the
// group, and Run returns nil.
func (s *Source) Run(ctx context.Context, h broker.Handler) error {
	return s.RunBatches(ctx, func(ds []broker.Delivery) {
		for _, d := range ds {
			select {
			case <-d.Lost():
				// Stopped or revoked while the batch was being handed
				// over: the rest stays unfinished, never handed out.
				return
			default:
			}
			h(d)
			if !d.(*delivery).finished() {
				// Left unfinished: the rest must wait behind it, and
				// the partition hands it over again (or stops).
				return
			}
		}
	})
}

var _ broker.BatchSource = (*Source)(nil)

// RunBatches is Run with a BatchHandler.
func (s *Source) RunBatches(ctx context.Context, h broker.BatchHandler) error {
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID:                     s.o.Group,
		Brokers:                s.o.Brokers,
		Dialer:                 s.dialer,
		Topics:                 s.o.Topics,
		HeartbeatInterval:      s.o.HeartbeatInterval,
		SessionTimeout:         s.o.SessionTimeout,
		RebalanceTimeout:       s.o.RebalanceTimeout,
		JoinGroupBackoff:       s.o.RetryBackoffMax,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 5 * time.Second,
		StartOffset:            s.start,
		Timeout:                s.o.NetworkTimeout,
		Logger:                 kafkaLogger(s.log, slog.LevelDebug),
		ErrorLogger:            kafkaLogger(s.log, slog.LevelInfo),
	})
	if err != nil {
		return fmt.Errorf("kafka consumer group: %w", err)
	}
	s.log.Info("kafka joining group", "brokers", strings.Join(s.o.Brokers, ","), "topics", strings.Join(s.o.Topics, ","),
		"ordering", s.o.Ordering, "dead_letter_topic", s.o.DeadLetterTopic)
	lost := false
	for {
		gen, err := cg.Next(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if errors.Is(err, kafkago.RebalanceInProgress) {
				s.log.Info("kafka group rebalancing", "err", err)
				continue
			}
			s.setMember(false)
			lost = true
			s.group.Down(err)
			s.log.Debug("kafka group unavailable, retrying", "err", err, "retry_in", s.o.RetryBackoffMax.String())
			continue
		}
		if lost {
			s.reconnects.Inc()
			lost = false
		}
		s.setMember(true)
		s.group.Up()
		s.startGeneration(ctx, gen, h)
	}
	start := time.Now()
	// Ends the generation and waits for its goroutines (handlers, final
	// commit), then leaves the group.
	_ = cg.Close()
	s.setMember(false)
	_ = s.Close()
	s.log.Info("kafka left group", "took", time.Since(start).String())
	return nil
}

func (s *Source) setMember(v bool) { s.member.Store(v) }

// generation is one assignment: its partitions and their committer.
type generation struct {
	s      *Source
	gen    *kafkago.Generation
	runCtx context.Context
	parts  []*partition
	wg     sync.WaitGroup // partition goroutines
	kick   chan struct{}  // commit now (CommitEvery reached)
}

func (s *Source) startGeneration(runCtx context.Context, gen *kafkago.Generation, h broker.BatchHandler) {
	g := &generation{s: s, gen: gen, runCtx: runCtx, kick: make(chan struct{}, 1)}
	var names []string
	for topic, as := range gen.Assignments {
		for _, a := range as {
			g.parts = append(g.parts, newPartition(g, topic, a.ID, a.Offset))
			names = append(names, topic+"/"+strconv.Itoa(a.ID))
		}
	}
	slices.Sort(names)
	s.log.Info("kafka partitions assigned", "generation", gen.ID, "member", gen.MemberID, "partitions", strings.Join(names, ","))
	// Add before any Start: the committer waits for all of them.
	g.wg.Add(len(g.parts))
	for _, p := range g.parts {
		gen.Start(func(ctx context.Context) {
			defer g.wg.Done()
			p.run(ctx, h)
		})
	}
	gen.Start(g.commitLoop)
}

// commitLoop commits on a timer and when a partition reached CommitEvery;
// when the generation ends it waits for the partitions' handlers and
// commits what they finished, while the group still holds this
// generation (kafka-go re-joins only after every Start function returned).
func (g *generation) commitLoop(ctx context.Context) {
	t := time.NewTicker(g.s.o.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.wg.Wait()
			g.commit("revoked")
			g.release()
			return
		case <-t.C:
			g.commit("interval")
		case <-g.kick:
			g.commit("batch")
		}
	}
}

func (g *generation) requestCommit() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// commit sends one OffsetCommit for every partition whose mark moved. The
// generation's coordinator connection carries a deadline of NetworkTimeout
// on every request, so this never blocks on a dead broker.
func (g *generation) commit(why string) {
	offsets := map[string]map[int]int64{}
	type done struct {
		p   *partition
		off int64
	}
	var todo []done
	for _, p := range g.parts {
		off, ok := p.track.candidate()
		if !ok {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int]int64{}
		}
		offsets[p.topic][p.id] = off
		todo = append(todo, done{p, off})
	}
	if len(todo) == 0 {
		return
	}
	if err := g.gen.CommitOffsets(offsets); err != nil {
		g.s.commitFail.Inc()
		g.s.log.Warn("kafka offset commit failed; the messages stay uncommitted and are committed later or delivered again",
			"generation", g.gen.ID, "when", why, "err", err)
		return
	}
	g.s.commits.Inc()
	for _, d := range todo {
		d.p.track.committedTo(d.off)
		d.p.updateLag()
	}
	g.s.log.Debug("kafka offsets committed", "generation", g.gen.ID, "when", why, "partitions", len(todo))
}

// release forgets the generation's per-partition metrics: another member
// owns them now, or nobody does.
func (g *generation) release() {
	for _, p := range g.parts {
		g.s.m.Lag.DeleteLabelValues(p.topic, p.label)
	}
	g.s.log.Info("kafka partitions released", "generation", g.gen.ID, "partitions", len(g.parts))
}

// kafkaLogger turns kafka-go's printf logging into slog lines.
func kafkaLogger(l *slog.Logger, level slog.Level) kafkago.LoggerFunc {
	return func(format string, args ...any) {
		if !l.Enabled(context.Background(), level) {
			return
		}
		l.Log(context.Background(), level, "kafka-go: "+strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
