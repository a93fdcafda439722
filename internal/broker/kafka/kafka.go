// Package kafka is the Kafka source: one consumer-group member built on
// one franz-go (kgo) client, which does the group membership, fetches
// every assigned partition, commits, and produces the dead letters.
//
// Membership. The group callbacks (OnPartitionsAssigned, Revoked, Lost)
// start and stop one worker per assigned partition. The default balancer
// list is cooperative-sticky, then range: a group whose members all speak
// cooperative-sticky rebalances incrementally (a member that joins or
// leaves moves only the partitions that change owner, the others never
// stop), and a group that still has members speaking only range (an
// older dedupe-proxy, during a rolling upgrade) agrees on range and
// rebalances eagerly until the last of them is gone. GroupInstanceID
// makes the member static (KIP-345): a member restarted with the same id
// within the session timeout gets its partitions back without a
// rebalance of the others.
//
// Fetching. One poll loop hands each partition's records to its worker's
// queue, in offset order. A partition whose queue is full (its app is
// slow, or it is held) is paused at the client, so it never stops the
// others and never reads further ahead than one fetch. Polls and group
// callbacks exclude each other (BlockRebalanceOnPoll), so a record is
// never queued to a partition that was revoked meanwhile. With
// IsolationReadCommitted (the default) records of aborted transactions
// never reach the handler and an open transaction's records wait until it
// ends; transaction markers are never handed out at either level.
//
// Ordering. OrderingPartition (the default) hands a partition's messages
// to the handler in offset order: to a BatchHandler (RunBatches) up to
// BatchSize at a time, as many as were already fetched, to a Handler (Run)
// one at a time. OrderingKey keeps order per key only: a message waits
// for the earlier messages of its record key, or without one of its
// OrderKey (the daemon's dedupe key), and a message with neither waits
// for nothing. Ready messages of different keys are handed to a
// SetHandler together (RunSets), up to BatchSize, each holding one of
// MaxInFlight slots until it is settled, so a slow one holds only its
// key. MaxInFlight bounds the handlers running at once across the
// source, ReadAhead how far past its oldest unfinished message a
// partition reads (so how much is delivered again after a crash).
//
// Offsets. A tracker per partition follows which handed-out messages are
// finished (acked or dead-lettered). The source commits, for every
// partition it holds, the highest contiguous finished offset + 1 — never
// past an unfinished message, never below what it committed before —
// every CommitInterval, sooner once a partition has CommitEvery finished
// messages, and a last time when the partition is revoked or the source
// stops, after the partition's running handlers have returned and while
// the group still counts this member as its owner. With StartLatest, a
// partition the group has no offset for gets the log end committed before
// anything is handed out, so a member that takes it over later resumes
// there and not at a newer end.
//
// Settling. Ack and DeadLetter finish a message. Requeue leaves it
// unfinished: the partition does not commit past it, and it is delivered
// again after the rebalance or restart (the seen-set then recognises what
// was done). A message requeued while its partition is still assigned is
// handed to the handler again here, in place, keeping the partition's
// order. Lost is closed when the partition is revoked or lost, when the
// source stops, and when the connection its fetches or the group's
// heartbeats travel on breaks: the group may count the member as gone by
// the time it is back, so the pipeline stops waiting on those messages;
// while the partition is still ours they are handed over again, in place,
// once fetching works again.
//
// Dead letters are produced to DeadLetterTopic through the source's own
// client (acks=all, with a deadline) with x-dedupe-* reason headers, the
// original headers and the original key, and only then finished. Without
// a dead-letter topic DeadLetter returns broker.ErrNoDeadLetter: the
// pipeline keeps retrying, the partition holds (it neither skips nor
// commits past the message), and the partitions-held gauge and an error
// log line say so.
package kafka

import (
	"context"
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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
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

// Group balancers, in the order a member prefers them.
const (
	BalancerCooperativeSticky = "cooperative-sticky"
	BalancerRange             = "range"
	BalancerSticky            = "sticky"
	BalancerRoundRobin        = "roundrobin"
)

// DefaultBalancers: cooperative-sticky wherever every member speaks it,
// range while a member that speaks only range (an older dedupe-proxy)
// is in the group, so a rolling upgrade never meets a group it cannot
// join.
var DefaultBalancers = []string{BalancerCooperativeSticky, BalancerRange}

// Options configure a Source. Zero durations and counts take the
// defaults noted on each field.
type Options struct {
	Name    string   `mapstructure:"-"`
	Brokers []string `mapstructure:"brokers"`
	Topics  []string `mapstructure:"topics"`
	Group   string   `mapstructure:"group"`
	// GroupInstanceID makes the member static (KIP-345); "" is a dynamic
	// member.
	GroupInstanceID string `mapstructure:"group_instance_id"`
	// Balancers are the group protocols this member speaks, preferred
	// first; default DefaultBalancers.
	Balancers []string `mapstructure:"balancers"`
	// StartOffset is where a partition without a committed offset starts:
	// StartEarliest (default) or StartLatest.
	StartOffset string `mapstructure:"start_offset"`
	// IsolationLevel is IsolationReadCommitted (default) or
	// IsolationReadUncommitted.
	IsolationLevel string `mapstructure:"isolation_level"`
	// Ordering is OrderingPartition (default) or OrderingKey.
	Ordering string `mapstructure:"ordering"`
	// OrderKey (OrderingKey) is the key a message without a record key
	// is ordered by: the daemon gives the source's dedupe key. "" (or a
	// nil OrderKey) leaves the message in no order with any other.
	OrderKey func(*broker.Message) string `mapstructure:"-"`
	// MaxInFlight (OrderingKey) bounds the messages of the source at the
	// handler at once. Default 64.
	MaxInFlight int `mapstructure:"max_in_flight"`
	// ReadAhead (OrderingKey) bounds how many messages of one partition
	// are read past its oldest unfinished one: the commit waits behind
	// that message, so they are what a crash delivers again. Default
	// 1024.
	ReadAhead int `mapstructure:"read_ahead"`
	// BatchSize (OrderingPartition) is the most messages of one partition
	// handed to a BatchHandler at once: those already fetched, never
	// waiting for more. Default 32; 1 hands them over one by one.
	BatchSize int `mapstructure:"batch_size"`
	// CommitInterval and CommitEvery batch offset commits. Defaults 1s, 500.
	CommitInterval time.Duration `mapstructure:"commit_interval"`
	CommitEvery    int           `mapstructure:"commit_every"`
	// Group timing; defaults 10s, 1s, 30s.
	SessionTimeout    time.Duration `mapstructure:"session_timeout"`
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval"`
	RebalanceTimeout  time.Duration `mapstructure:"rebalance_timeout"`
	// DeadLetterTopic receives dead letters; empty: none (partitions hold).
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
	SASL            SASL   `mapstructure:"sasl"`
	TLS             TLS    `mapstructure:"tls"`
	// ClientID names the client to the brokers. Default "dedupe-proxy".
	ClientID string `mapstructure:"-"`
	// NetworkTimeout bounds dials, offset commits and leaving the group.
	// Default 5s.
	NetworkTimeout time.Duration `mapstructure:"-"`
	// RetryBackoff and RetryBackoffMax pace retries of failed requests
	// and re-joins. Defaults 500ms and 5s.
	RetryBackoff    time.Duration `mapstructure:"-"`
	RetryBackoffMax time.Duration `mapstructure:"-"`
	// FetchMaxWait is how long a fetch waits for data on idle partitions;
	// a partition resumed after a pause is fetched again at the latest
	// after it. Default 250ms.
	FetchMaxWait time.Duration `mapstructure:"-"`
	// DeadLetterTimeout bounds one dead-letter produce. Default 10s.
	DeadLetterTimeout time.Duration          `mapstructure:"-"`
	Logger            *slog.Logger           `mapstructure:"-"`
	Metrics           *metrics.SourceMetrics `mapstructure:"-"`
}

type topicPartition struct {
	topic string
	id    int32
}

// Source is one consumer-group member.
type Source struct {
	o    Options
	log  *slog.Logger
	m    *metrics.SourceMetrics
	sec  []kgo.Opt
	bals []kgo.GroupBalancer

	// slots bounds the handlers running at once in OrderingKey.
	slots chan struct{}

	member atomic.Bool
	// link is up while the connections the source depends on work. A
	// fetch or heartbeat that fails on the wire takes it down: the Lost
	// channel of everything handed out closes. One that succeeds brings
	// it up, and deliveries from then on get a new channel. Its lines are
	// fetching's (statelog), which waits for successes to settle.
	link *supervise.Dep

	// h and runCtx are set by RunBatches before the client exists, and
	// read by the group callbacks it triggers. The client itself starts
	// joining inside kgo.NewClient, so its first callbacks may run before
	// NewClient returned: each callback stores the client it was given.
	h      broker.BatchHandler
	set    broker.SetHandler
	runCtx context.Context
	cl     atomic.Pointer[kgo.Client]

	// partsMu guards parts; commitMu makes a commit and the removal of
	// a revoked partition exclude each other, so no commit carries the
	// offset of a partition that already moved to another member.
	partsMu  sync.Mutex
	parts    map[topicPartition]*partition
	commitMu sync.Mutex
	kick     chan struct{} // commit now (CommitEvery reached)

	held       prometheus.Gauge
	commits    prometheus.Counter
	commitFail prometheus.Counter
	reconnects prometheus.Counter

	// fetching and group log when fetching starts failing (or the group
	// cannot be joined) and when it works again, once each way; the
	// per-retry lines are debug.
	fetching, group *statelog.Tracker
	groupLost       atomic.Bool
}

var _ broker.Source = (*Source)(nil)

// New returns a Source; it connects when Run is called. It fails only on
// options that can never work (a TLS file that cannot be read, an unknown
// SASL mechanism, balancer or isolation level, a broker address kgo
// cannot parse).
func New(o Options) (*Source, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil).ForSource(o.Name, "kafka")
	}
	// A setting left zero takes its default from DefaultOptions, the
	// config file's own: one set of defaults.
	def := DefaultOptions()
	if o.StartOffset == "" {
		o.StartOffset = def.StartOffset
	}
	if o.Ordering == "" {
		o.Ordering = def.Ordering
	}
	if o.IsolationLevel == "" {
		o.IsolationLevel = def.IsolationLevel
	}
	if len(o.Balancers) == 0 {
		o.Balancers = def.Balancers
	}
	defaultInt(&o.MaxInFlight, def.MaxInFlight)
	defaultInt(&o.ReadAhead, def.ReadAhead)
	defaultInt(&o.BatchSize, def.BatchSize)
	defaultInt(&o.CommitEvery, def.CommitEvery)
	defaultDuration(&o.CommitInterval, def.CommitInterval)
	defaultDuration(&o.SessionTimeout, def.SessionTimeout)
	defaultDuration(&o.HeartbeatInterval, def.HeartbeatInterval)
	defaultDuration(&o.RebalanceTimeout, def.RebalanceTimeout)
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
	switch o.StartOffset {
	case StartEarliest, StartLatest:
	default:
		return nil, fmt.Errorf("kafka: unknown start offset %q", o.StartOffset)
	}
	bals, err := balancers(o.Balancers)
	if err != nil {
		return nil, err
	}
	if len(o.Brokers) == 0 || len(o.Topics) == 0 || o.Group == "" {
		return nil, errors.New("kafka: brokers, topics and group must be set")
	}
	sec, err := SecurityOpts(o.SASL, o.TLS)
	if err != nil {
		return nil, err
	}
	s := &Source{
		o:          o,
		log:        o.Logger.With("source", o.Name, "group", o.Group),
		m:          o.Metrics,
		sec:        sec,
		bals:       bals,
		slots:      make(chan struct{}, o.MaxInFlight),
		parts:      map[topicPartition]*partition{},
		kick:       make(chan struct{}, 1),
		held:       o.Metrics.PartitionsHeld,
		commits:    o.Metrics.Commits,
		commitFail: o.Metrics.CommitFailures,
		reconnects: o.Metrics.Reconnects,
	}
	s.link = supervise.New(supervise.Options{Up: true})
	s.fetching = statelog.New(s.log, "kafka fetch failing: the partitions affected wait, nothing is skipped", "kafka fetching again on every partition")
	s.group = statelog.New(s.log, "kafka group unavailable: retrying", "kafka group available again")
	if err := kgo.ValidateOpts(s.groupOpts()...); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return s, nil
}

func balancers(names []string) ([]kgo.GroupBalancer, error) {
	var out []kgo.GroupBalancer
	for _, n := range names {
		switch n {
		case BalancerCooperativeSticky:
			out = append(out, kgo.CooperativeStickyBalancer())
		case BalancerRange:
			out = append(out, kgo.RangeBalancer())
		case BalancerSticky:
			out = append(out, kgo.StickyBalancer())
		case BalancerRoundRobin:
			out = append(out, kgo.RoundRobinBalancer())
		default:
			return nil, fmt.Errorf("kafka: unknown balancer %q", n)
		}
	}
	return out, nil
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
// the group and fetching works.
func (s *Source) Ready() error {
	if !s.member.Load() {
		return broker.ErrNotConnected
	}
	if err := s.link.Failing(3 * s.o.RetryBackoffMax); err != nil {
		return fmt.Errorf("%w: fetching fails: %v", broker.ErrNotConnected, err)
	}
	return nil
}

// Close implements broker.Source; Run already closed everything it
// opened, the client included.
func (s *Source) Close() error { return nil }

// Run implements broker.Source. The client joins, re-joins after every
// rebalance and retries a lost coordinator on its own; the group
// callbacks start and stop the partitions. When ctx ends, every partition
// stops handing out, running handlers return (the pipeline bounds them by
// its shutdown timeout), finished work is committed while the member
// still holds its partitions, the member leaves the group — a static one
// too: a stopped pod is replaced by one with another name, and its
// partitions should move now rather than after the session timeout — and
// Run returns nil.
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

var _ broker.SetSource = (*Source)(nil)

// RunBatches is Run with a BatchHandler. In OrderingKey each message of
// a set is handed to h alone, on a goroutine of its own.
func (s *Source) RunBatches(ctx context.Context, h broker.BatchHandler) error {
	return s.RunSets(ctx, h, nil)
}

// RunSets is RunBatches with a SetHandler for OrderingKey, which gets
// fetched messages of a partition whose keys differ together.
func (s *Source) RunSets(ctx context.Context, h broker.BatchHandler, set broker.SetHandler) error {
	s.h, s.set, s.runCtx = h, set, ctx
	cl, err := kgo.NewClient(s.groupOpts()...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	s.cl.Store(cl)
	s.log.Info("kafka joining group", "brokers", strings.Join(s.o.Brokers, ","), "topics", strings.Join(s.o.Topics, ","),
		"ordering", s.o.Ordering, "dead_letter_topic", s.o.DeadLetterTopic, "instance_id", s.o.GroupInstanceID,
		"balancers", strings.Join(s.o.Balancers, ","))

	commitCtx, stopCommits := context.WithCancel(context.Background())
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		s.commitLoop(commitCtx)
	}()

	s.poll(ctx, cl)

	start := time.Now()
	// Drain and commit before leaving: the member keeps heartbeating
	// while its handlers finish, so the last commit is still its own.
	s.stopPartitions(s.holding(), "stopping", true)
	stopCommits()
	<-committed
	s.leave(cl)
	cl.Close()
	s.member.Store(false)
	s.log.Info("kafka left group", "took", time.Since(start).String())
	return nil
}

// groupOpts are the client options of the source: connection, security,
// group, fetching and the dead-letter producer.
func (s *Source) groupOpts() []kgo.Opt {
	level := kgo.ReadCommitted()
	if s.o.IsolationLevel == IsolationReadUncommitted {
		level = kgo.ReadUncommitted()
	}
	opts := append(s.baseOpts(),
		kgo.ConsumerGroup(s.o.Group),
		kgo.ConsumeTopics(s.o.Topics...),
		kgo.Balancers(s.bals...),
		kgo.SessionTimeout(s.o.SessionTimeout),
		kgo.HeartbeatInterval(s.o.HeartbeatInterval),
		kgo.RebalanceTimeout(s.o.RebalanceTimeout),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.AdjustFetchOffsetsFn(s.pinStart),
		kgo.FetchIsolationLevel(level),
		kgo.FetchMaxWait(s.o.FetchMaxWait),
		// One fetch carries every partition of a broker: 256 KiB each,
		// 1 MiB in all keeps a sidecar's memory small (make bench, six
		// partitions: peak RSS 61 MiB, against 76 MiB with one 256 KiB
		// client per partition, and no slower). A larger record still
		// arrives: the broker returns the first batch whatever its size.
		kgo.FetchMaxBytes(1<<20),
		kgo.FetchMaxPartitionBytes(256<<10),
		// Without a committed offset a partition starts at the log
		// start; StartLatest commits the log end first (pinStart). A
		// committed offset below the log start (retention passed it)
		// resumes at the log start too.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.WithHooks(&hooks{s: s}),
		// Dead letters: every in-sync replica has them before the
		// message is committed past.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(max(s.o.DeadLetterTimeout, time.Second)),
	)
	if s.o.GroupInstanceID != "" {
		opts = append(opts, kgo.InstanceID(s.o.GroupInstanceID))
	}
	return opts
}

// baseOpts connect to the brokers with the source's security.
func (s *Source) baseOpts() []kgo.Opt {
	return clientOpts(s.o.Brokers, s.o.ClientID, s.o.NetworkTimeout, s.o.RetryBackoff, s.o.RetryBackoffMax, s.sec, s.log)
}

// clientOpts are the options every client of the package starts from.
func clientOpts(brokers []string, clientID string, dial, retryFrom, retryMax time.Duration, sec []kgo.Opt, log *slog.Logger) []kgo.Opt {
	// From 100ms: a cut connection is usually back at once.
	policy := backoff.Policy{Initial: min(100*time.Millisecond, retryFrom), Max: retryMax}
	retry := func(tries int) time.Duration { return policy.Delay(tries, 0) }
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.DialTimeout(dial),
		kgo.RetryBackoffFn(retry),
		// A moved leader is found again within a second, not kgo's 5s.
		kgo.MetadataMinAge(time.Second),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(kgoLogger{log}),
	}
	return append(opts, sec...)
}

// holding returns every partition the source holds now.
func (s *Source) holding() []*partition {
	s.partsMu.Lock()
	defer s.partsMu.Unlock()
	out := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		out = append(out, p)
	}
	return out
}

func (s *Source) lookup(topics map[string][]int32) []*partition {
	s.partsMu.Lock()
	defer s.partsMu.Unlock()
	var out []*partition
	for t, ids := range topics {
		for _, id := range ids {
			if p := s.parts[topicPartition{t, id}]; p != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// assigned starts the partitions the group added; kgo fetches their
// offsets (pinStart) and starts fetching after it returns.
func (s *Source) assigned(_ context.Context, cl *kgo.Client, added map[string][]int32) {
	s.cl.Store(cl)
	if s.groupLost.Swap(false) {
		s.reconnects.Inc()
	}
	s.member.Store(true)
	s.group.Up()
	if len(added) == 0 {
		return
	}
	var names []string
	s.partsMu.Lock()
	for t, ids := range added {
		for _, id := range ids {
			tp := topicPartition{t, id}
			if s.parts[tp] != nil {
				continue
			}
			p := newPartition(s, cl, t, id)
			s.parts[tp] = p
			p.start(s.runCtx, s.h, s.set)
			names = append(names, t+"/"+strconv.Itoa(int(id)))
		}
	}
	s.partsMu.Unlock()
	slices.Sort(names)
	member, gen := cl.GroupMetadata()
	s.log.Info("kafka partitions assigned", "generation", gen, "member", member, "partitions", strings.Join(names, ","))
}

// revoked stops the partitions the group takes away, waits for their
// handlers and commits what they finished, before the group may give
// them to another member.
//
// A cooperative session that ends revokes nothing and comes here with
// nothing: the member is about to re-join, and a group that learns in
// that join that one of its members speaks only range turns eager and
// gives this member's partitions away before it is told to revoke them.
// Committing everything finished now keeps what their next owner reads
// again to what was still running.
func (s *Source) revoked(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	if len(gone) == 0 {
		s.commit("session end")
		return
	}
	s.stopPartitions(s.lookup(gone), "revoked", true)
}

// lost stops partitions the group already gave away (the session ended):
// a commit would be refused, and what they finished is delivered again.
func (s *Source) lost(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	s.member.Store(false)
	s.stopPartitions(s.lookup(gone), "lost", false)
}

// stopPartitions ends ps — Lost closes, nothing more is handed out — and
// waits for their handlers; with commit, it commits what they finished.
// Then the source forgets them.
//
// A revocation waits for its handlers at most half the rebalance
// timeout: past that the group would remove this member and stop every
// partition while it rejoins. A request still open at the app after that
// goes on with its claim held (the pipeline renews it): the partition's
// next owner finds the key busy and waits, and a late 2xx commits the key,
// which the next owner then acks as a duplicate. Its offset is not
// committed here, so it is delivered again; nothing is lost.
func (s *Source) stopPartitions(ps []*partition, why string, commit bool) {
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		p.stop()
	}
	bound := time.NewTimer(s.o.RebalanceTimeout / 2)
	defer bound.Stop()
	if why == "stopping" {
		// The daemon's shutdown_timeout bounds a stop instead.
		bound.Stop()
	}
wait:
	for _, p := range ps {
		select {
		case <-p.done:
		case <-bound.C:
			s.log.Warn("kafka partitions given up while requests for them are still open at the app; their keys stay claimed until those end",
				"when", why, "waited", s.o.RebalanceTimeout/2)
			break wait
		}
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if commit {
		s.commitLocked(ps, why)
	}
	s.partsMu.Lock()
	for _, p := range ps {
		delete(s.parts, topicPartition{p.topic, p.id})
	}
	s.partsMu.Unlock()
	for _, p := range ps {
		p.release()
	}
	s.log.Info("kafka partitions released", "when", why, "partitions", len(ps))
}

// pinStart runs once the group's offsets for newly assigned partitions
// are known, before any of them is fetched. With StartLatest, a partition
// without a committed offset gets the log end committed now: a member
// that holds its first messages without finishing any (the app is down)
// commits nothing, and whoever takes the partition over after a crash or
// rebalance would otherwise start at a newer log end and never deliver
// them. An error restarts the group session (the partitions are not
// fetched meanwhile).
func (s *Source) pinStart(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if s.o.StartOffset != StartLatest {
		return offsets, nil
	}
	var none []topicPartition
	for t, ps := range offsets {
		for p, off := range ps {
			if off.EpochOffset().Offset < 0 {
				none = append(none, topicPartition{t, p})
			}
		}
	}
	if len(none) == 0 {
		return offsets, nil
	}
	retry := backoff.Policy{Initial: s.o.RetryBackoff, Max: s.o.RetryBackoffMax}
	for attempt := 1; ; attempt++ {
		ends, err := s.pin(ctx, none)
		if err == nil {
			for tp, end := range ends {
				offsets[tp.topic][tp.id] = kgo.NewOffset().At(end)
			}
			s.log.Info("kafka start_offset latest: committed the log end for partitions the group had no offset for", "partitions", len(ends))
			return offsets, nil
		}
		if attempt == 3 || ctx.Err() != nil {
			s.log.Warn("kafka start_offset latest: could not commit the log end; rejoining before fetching", "err", err)
			return nil, err
		}
		if !backoff.Wait(ctx, nil, retry.Delay(attempt, 0)) {
			return nil, ctx.Err()
		}
	}
}

// pin resolves the log end (the last stable offset when reading
// committed) of tps and commits it for the group.
func (s *Source) pin(ctx context.Context, tps []topicPartition) (map[topicPartition]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.o.NetworkTimeout)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if s.o.IsolationLevel == IsolationReadCommitted {
		req.IsolationLevel = 1
	}
	byTopic := map[string][]int32{}
	for _, tp := range tps {
		byTopic[tp.topic] = append(byTopic[tp.topic], tp.id)
	}
	for t, ids := range byTopic {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, id := range ids {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = id
			rp.Timestamp = -1 // latest
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.cl.Load())
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	ends := map[topicPartition]int64{}
	commit := map[string]map[int32]kgo.EpochOffset{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets %s[%d]: %w", rt.Topic, rp.Partition, err)
			}
			ends[topicPartition{rt.Topic, rp.Partition}] = rp.Offset
			if commit[rt.Topic] == nil {
				commit[rt.Topic] = map[int32]kgo.EpochOffset{}
			}
			commit[rt.Topic][rp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: rp.Offset}
		}
	}
	if len(ends) != len(tps) {
		return nil, fmt.Errorf("list offsets answered %d of %d partitions", len(ends), len(tps))
	}
	if err := s.commitSync(ctx, commit); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return ends, nil
}

// commitSync commits offsets as this member of its current generation
// and reports the first error, the partitions' own included.
func (s *Source) commitSync(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	var rerr error
	s.cl.Load().CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return rerr
}

// commitLoop commits on a timer and when a partition reached CommitEvery.
func (s *Source) commitLoop(ctx context.Context) {
	t := time.NewTicker(s.o.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.commit("interval")
		case <-s.kick:
			s.commit("batch")
		}
	}
}

func (s *Source) requestCommit() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Source) commit(why string) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.commitLocked(s.holding(), why)
}

// commitLocked sends one OffsetCommit for every partition of ps whose
// mark moved; commitMu is held. It is bounded by NetworkTimeout, so a
// dead broker never blocks a revoke or the shutdown for longer.
func (s *Source) commitLocked(ps []*partition, why string) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	type done struct {
		p   *partition
		off int64
	}
	var todo []done
	for _, p := range ps {
		off, ok := p.track.candidate()
		if !ok {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.id] = kgo.EpochOffset{Epoch: -1, Offset: off}
		todo = append(todo, done{p, off})
	}
	if len(todo) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.NetworkTimeout)
	defer cancel()
	if err := s.commitSync(ctx, offsets); err != nil {
		s.commitFail.Inc()
		s.log.Warn("kafka offset commit failed; the messages stay uncommitted and are committed later or delivered again",
			"when", why, "err", err)
		return
	}
	s.commits.Inc()
	for _, d := range todo {
		d.p.track.committedTo(d.off)
		d.p.updateLag()
	}
	s.log.Debug("kafka offsets committed", "when", why, "partitions", len(todo))
}

// leave takes the member out of the group now, so its partitions move at
// once. kgo does not leave as a static member (it expects the same id
// back); a stopping pod is not coming back under its name, so the leave
// names the instance itself.
func (s *Source) leave(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.o.NetworkTimeout)
	defer cancel()
	member, _ := cl.GroupMetadata()
	if err := cl.LeaveGroupContext(ctx); err != nil {
		s.log.Info("kafka leave group", "err", err)
	}
	if s.o.GroupInstanceID == "" || member == "" {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = s.o.Group
	req.MemberID = member
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	m.InstanceID = kmsg.StringPtr(s.o.GroupInstanceID)
	m.Reason = kmsg.StringPtr("dedupe-proxy stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, m := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(m.ErrorCode)
			}
		}
	}
	if err != nil {
		s.log.Info("kafka leave group as static member", "instance_id", s.o.GroupInstanceID, "err", err)
	}
}
