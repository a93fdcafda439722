// Package pipeline ties a source, the seen-set and the app together,
// message by message: key → claim → forward → commit → ack, with
// retries, dead letters and a drain on shutdown.
//
// The guarantee rests on one ordering: the key is marked done only after
// the app succeeded, and the broker is acked only after that. Every other
// path (store down, app down, busy key, shutdown) leaves the message
// unacked or requeued, so nothing is lost; a claim with a lease keeps two
// replicas from forwarding the same key at once.
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
)

// Forwarder sends one request to the app; *forward.Client implements it.
type Forwarder interface {
	Do(ctx context.Context, r forward.Request) forward.Result
}

// Gate holds deliveries back while the app is known to be down (its
// health URL fails), so that no retries are burned against it.
type Gate interface {
	// Open returns a channel that is closed while the app is up and stays
	// open, until the app is back, while it is down.
	Open() <-chan struct{}
}

// Options configure a Pipeline.
type Options struct {
	// Consumer namespaces every stored key: "<consumer>:<key space>:<key>".
	Consumer  string
	Store     seenset.Store
	Forwarder Forwarder
	Lease     time.Duration
	TTL       time.Duration
	// FailOpenOnStoreError forwards without the seen-set when the store is
	// unreachable. Off by default: fail closed.
	FailOpenOnStoreError bool
	MaxAttempts          int
	BackoffInitial       time.Duration
	BackoffMax           time.Duration
	Jitter               float64
	BusyDelay            time.Duration
	CommitAttempts       int
	// MaxRequestTime is how long a request the app has not answered is
	// waited for (app.max_request_time); forward.Client enforces it, and a
	// request cut short by a shutdown keeps its claim until then.
	MaxRequestTime time.Duration
	MaxBodyBytes   int64
	LogBodies      bool
	Logger         *slog.Logger
	Metrics        *metrics.Metrics
	// Gate, when set, is waited on before every claim and forward.
	Gate Gate
	// Claims is the claim protocol shared with the process's other users
	// of the seen-set (the daemon builds one); its lease wins over Lease.
	// Nil: one of the pipeline's own, from Store, Lease, TTL,
	// CommitAttempts, MaxRequestTime and the delivery backoff.
	Claims *claim.Protocol
}

// SourceOptions are the per-source parts of the pipeline.
type SourceOptions struct {
	Name string
	Kind string
	// KeySpace scopes the source's stored keys, "<consumer>:<KeySpace>:<key>";
	// empty means Name. A message on another source is another job, so the
	// same id there is not a duplicate — unless both sources name the same
	// key space on purpose.
	KeySpace string
	// Path is appended to the app URL.
	Path string
	// ContentType is the app's Content-Type for every message of the
	// source (sources[].content_type); "" lets each message say
	// (contentType).
	ContentType string
	Keys        *keys.Extractor
	// DeadLetterMissingKey dead-letters messages without a usable key
	// instead of forwarding them without dedupe.
	DeadLetterMissingKey bool
	// KeyReuse is what becomes of a message whose key is done for another
	// body: claim.KeyReuseWarn ("" too), KeyReuseDeadLetter or
	// KeyReuseForward.
	KeyReuse string
	// Digest computes the body digest kept with each claim; nil: over the
	// whole body.
	Digest *keys.Digester
	// Requeues: the source hands requeued messages back to the broker
	// (RabbitMQ). When false (Kafka) the pipeline holds the message and
	// retries it itself, since the partition must not move past it.
	Requeues bool
}

// Pipeline processes deliveries. Stop it in two steps: Drain (stop
// retrying, requeue what is waiting; forwards in progress finish), then
// Abort (cancel forwards in progress, release and requeue them).
type Pipeline struct {
	o        Options
	log      *slog.Logger
	m        *metrics.Metrics
	draining chan struct{}
	drainOne atomic.Bool
	hard     context.Context
	// calm is hard without its cancellation, made once: commits, renewals
	// and releases run on through a shutdown.
	calm  context.Context
	abort context.CancelFunc
	// claims begins each message's claim session: the protocol the
	// webhook handler uses too, seen through the pipeline's store state.
	claims *claim.Protocol
	// store and app log when Redis or the app goes down and comes back,
	// once each way; per-message lines about it are debug. app is nil
	// with a Gate, whose health check logs the app's state.
	store, app *statelog.Tracker
	// retry is the delivery policy's backoff (delivery.backoff_*).
	retry backoff.Policy
	// busy spaces the looks at a key busy elsewhere (see waiting.go).
	busy backoff.Policy
}

// New returns a Pipeline.
func New(o Options) *Pipeline {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil)
	}
	if o.MaxAttempts < 1 {
		o.MaxAttempts = 1
	}
	if o.CommitAttempts < 1 {
		o.CommitAttempts = 1
	}
	if o.MaxRequestTime <= 0 {
		o.MaxRequestTime = forward.DefaultMaxRequestTime
	}
	if o.Claims != nil {
		o.Lease = o.Claims.Lease()
	}
	hard, abort := context.WithCancel(context.Background())
	storeDown := "seen-set unreachable: messages are neither forwarded nor acked until it is back"
	if o.FailOpenOnStoreError {
		storeDown = "seen-set unreachable: forwarding without dedupe until it is back (on_store_error: forward)"
	}
	var app *statelog.Tracker
	if o.Gate == nil {
		app = statelog.New(o.Logger, "app unreachable: messages wait unacked until it answers", "app answers again")
	}
	p := &Pipeline{
		retry:    backoff.Policy{Initial: o.BackoffInitial, Max: o.BackoffMax, Jitter: o.Jitter},
		busy:     backoff.Policy{Initial: o.BusyDelay, Max: max(o.BusyDelay, o.Lease/3), Jitter: o.Jitter},
		store:    statelog.New(o.Logger, storeDown, "seen-set reachable again"),
		app:      app,
		o:        o,
		log:      o.Logger,
		m:        o.Metrics,
		draining: make(chan struct{}),
		hard:     hard,
		calm:     context.WithoutCancel(hard),
		abort:    abort,
	}
	claims := o.Claims
	if claims == nil {
		claims = claim.New(claim.Options{
			Store:          o.Store,
			Observers:      []seenset.Observer{o.Metrics.Store()},
			Lease:          o.Lease,
			TTL:            o.TTL,
			CommitAttempts: o.CommitAttempts,
			Backoff:        p.retry,
			MaxRequestTime: o.MaxRequestTime,
		})
	}
	p.claims = claims.Observe(claim.StoreState{Tracker: p.store})
	return p
}

// Drain stops retries and waits: messages waiting for a retry, a busy key
// or the store are released and requeued; forwards in progress go on.
func (p *Pipeline) Drain() {
	if p.drainOne.CompareAndSwap(false, true) {
		close(p.draining)
	}
}

// Abort cancels forwards still in progress (the shutdown timeout ran out):
// they are released and requeued, never dead-lettered.
func (p *Pipeline) Abort() {
	p.Drain()
	p.abort()
}

// Handler returns the broker.Handler for one source.
func (p *Pipeline) Handler(s SourceOptions) broker.Handler {
	src := p.source(s)
	return func(d broker.Delivery) { p.handle(src, d) }
}

// BatchHandler returns the broker.BatchHandler for one source (see
// batch.go). Use one of Handler and BatchHandler per source.
func (p *Pipeline) BatchHandler(s SourceOptions) broker.BatchHandler {
	h, _ := p.SetHandlers(s)
	return h
}

// SetHandlers returns the handlers of a broker.SetSource (see set.go):
// one source's BatchHandler and SetHandler, sharing its metrics.
func (p *Pipeline) SetHandlers(s SourceOptions) (broker.BatchHandler, broker.SetHandler) {
	src := p.source(s)
	batch := func(ds []broker.Delivery) {
		if len(ds) == 1 {
			p.handle(src, ds[0])
			return
		}
		p.handleBatch(src, ds)
	}
	set := func(ds []broker.Delivery) {
		if len(ds) == 1 {
			p.handle(src, ds[0])
			return
		}
		p.handleSet(src, ds)
	}
	return batch, set
}

func (p *Pipeline) source(s SourceOptions) *source {
	if s.Keys == nil {
		s.Keys, _ = keys.Parse(nil)
	}
	if s.KeySpace == "" {
		s.KeySpace = s.Name
	}
	p.m.InitSource(s.Name, s.Kind)
	src := &source{SourceOptions: s, p: p, m: p.bind(s.Name), prefix: p.o.Consumer + ":" + s.KeySpace + ":"}
	// Past a bounce's longest wait, and its redelivery, with room to spare.
	src.bounced.stale = 2*p.o.BackoffMax + 30*time.Second
	src.rules = strings.Join(s.Keys.Specs(), ", ")
	src.noKey = statelog.NewLimiter(time.Second, func(n int) {
		p.log.Info("no usable key", slog.String("source", s.Name), slog.String("rules", src.rules), slog.Int("suppressed", n))
	})
	return src
}

func (p *Pipeline) handle(src *source, d broker.Delivery) {
	w := &work{s: src, d: d}
	src.m.inflight.Inc()
	w.guarded(w.run)
}

// recoverPanic keeps a bug that one message triggers from killing the
// process: a poison message would otherwise take down every replica in
// turn. The message is given back after a backoff (RabbitMQ requeues it,
// Kafka holds the partition and hands it over again), and counted.
func (w *work) recoverPanic() {
	r := recover()
	if r == nil {
		return
	}
	p := w.s.p
	w.event(metrics.EventPanic)
	p.log.Error("panic while handling a message; recovered, the message is given back",
		w.attrs(slog.Any("panic", r), slog.String("stack", string(debug.Stack())))...)
	// A claim whose request may be at the app is left to expire, which
	// keeps the key from being sent again meanwhile; one whose request
	// never left is released.
	if err := w.c.GiveBack(p.calm); err != nil {
		w.releaseFailed(err)
	}
	if w.settled {
		return
	}
	// Not a hot loop between replicas when it panics every time.
	w.Wait(p.backoff(p.o.MaxAttempts, 0))
	// Counted as a delivery: a message that panics every time must reach
	// max_deliveries.
	w.requeueAs("panic", true)
}

// source is a source's options with its metric series resolved once:
// WithLabelValues hashes its labels on every call, per message.
type source struct {
	SourceOptions
	p *Pipeline
	m *boundMetrics
	// prefix is "<consumer>:<key space>:", joined once.
	prefix string
	// rules names the key rules for the no-key line, which noKey limits
	// to one a second: a producer that stopped setting the id would
	// otherwise log a line per message.
	rules string
	noKey *statelog.Limiter
	// room holds the source's messages waiting for a busy key.
	room waitingRoom
	// bounced counts the messages given back after giving up on them.
	bounced bounces
	// queueMeta are the metadata headers of the last queue seen (a
	// RabbitMQ source has one), by Redelivered: the same for every
	// message of that queue, so built once and shared read-only.
	queueMeta atomic.Pointer[queueMeta]
}

type queueMeta struct {
	source, kind, queue string
	h                   [2][]forward.Header
}

type boundMetrics struct {
	inflight prometheus.Gauge
	waiting  prometheus.Gauge
	duration prometheus.Observer
	keyReuse prometheus.Counter
	results  map[string]prometheus.Counter
	events   map[string]prometheus.Counter
	classes  map[string]prometheus.Counter
}

func (p *Pipeline) bind(name string) *boundMetrics {
	b := &boundMetrics{
		inflight: p.m.InFlight.WithLabelValues(name),
		waiting:  p.m.BusyWaiting.WithLabelValues(name),
		duration: p.m.ForwardDuration.WithLabelValues(name),
		keyReuse: p.m.KeyReuse.WithLabelValues(name),
		results:  map[string]prometheus.Counter{},
		events:   map[string]prometheus.Counter{},
		classes:  map[string]prometheus.Counter{},
	}
	for _, r := range metrics.Results() {
		b.results[r] = p.m.Messages.WithLabelValues(name, r)
	}
	for _, e := range metrics.Events() {
		b.events[e] = p.m.Events.WithLabelValues(name, e)
	}
	for _, c := range metrics.Classes() {
		b.classes[c] = p.m.AppResponses.WithLabelValues(name, c)
	}
	return b
}

func (w *work) deadLetter(info broker.DeadLetterInfo) error {
	p := w.s.p
	ctx, cancel := context.WithTimeout(p.calm, 30*time.Second)
	err := w.d.DeadLetter(ctx, info)
	cancel()
	switch {
	case err == nil:
		w.settled = true
		w.endBounces()
		w.result(metrics.DeadLettered)
		p.log.Warn("dead-lettered", w.attrs(slog.String("reason", info.Reason), slog.Int("attempt", info.Attempts))...)
	case !errors.Is(err, broker.ErrNoDeadLetter):
		w.event(metrics.EventDeadLetterFail)
		p.log.Error("dead-letter failed; message kept", w.attrs(slog.String("err", err.Error()))...)
	}
	return err
}

// forward sends one attempt, holding the claim (renewing its lease) for
// as long as the request is open. A request the app has not answered
// within app.timeout is slow, not abandoned: it is waited for up to
// app.max_request_time with the claim held, and its late answer settles
// the message as an early one would.
func (w *work) forward() forward.Result {
	p, m := w.s.p, w.d.Message()
	w.attempt++
	req := forward.Request{
		Path:           w.s.Path,
		Body:           m.Body,
		ContentType:    w.contentType(),
		IdempotencyKey: w.key(),
		Attempt:        w.attempt,
		Meta:           w.reuseMeta(w.metaHeaders()),
		MessageHeaders: m.Headers,
	}
	// The attempt is copied: the callback runs on a timer's goroutine,
	// maybe still after Do returned and the next attempt began.
	attempt := w.attempt
	req.OnSlow = func() { w.slow(attempt) }
	if w.c.Active() {
		// Deferred: a panic in Do must not leave the renewal running,
		// which would hold the key for ever.
		defer w.c.Hold(w).Stop()
	}
	// Neither Drain nor a lost channel (a Kafka revocation) cancels a
	// forward in progress: the app may be acting on it, and finishing
	// lets us commit, which turns the redelivery into a duplicate instead
	// of a second effect. Only Abort (shutdown_timeout) does.
	res := p.o.Forwarder.Do(p.hard, req)
	switch {
	case res.Unreachable:
		p.app.Down(res.Err)
	case res.Status != 0:
		p.app.Up()
	}
	if res.Abandoned {
		w.event(metrics.EventAbandoned)
		p.log.Error("no answer from the app within app.max_request_time; giving up on the request while the app may still be working on it, so a second request for this key may now overlap it",
			w.attrs(slog.Int("attempt", w.attempt), slog.Duration("max_request_time", p.o.MaxRequestTime))...)
	} else if res.Slow && res.Status != 0 {
		p.log.Info("late answer from the app", w.attrs(slog.Int("status", res.Status), slog.Duration("took", res.Duration), slog.Int("attempt", w.attempt))...)
	}
	w.s.m.duration.Observe(res.Duration.Seconds())
	w.s.m.classes[metrics.StatusClass(res.Status)].Inc()
	return res
}

// slow is told when the app has not answered attempt within app.timeout.
func (w *work) slow(attempt int) {
	w.event(metrics.EventSlow)
	w.s.p.log.Warn("the app has not answered within app.timeout; waiting for its answer, with the key held, up to app.max_request_time",
		w.attrs(slog.Int("attempt", attempt), slog.Duration("max_request_time", w.s.p.o.MaxRequestTime))...)
}

// LeaseLost is told when a renewal found the claim gone while the
// request was open.
func (w *work) LeaseLost(error) { w.leaseLost("lease lost while forwarding") }

// leaseLost reports a claim found to be someone else's: its lease
// expired and another replica took the key.
func (w *work) leaseLost(msg string) {
	w.event(metrics.EventLeaseLost)
	if w.c.TakenHere() {
		msg += ": another delivery of this key on this replica claimed it and may forward it too"
	} else {
		msg += ": another replica claimed the key and may forward it too"
	}
	w.s.p.log.Error(msg, w.attrs()...)
}

// letGo releases the message's claim; it runs even while the pipeline
// is stopping.
func (w *work) letGo() {
	if err := w.c.LetGo(w.s.p.calm); err != nil {
		w.releaseFailed(err)
	}
}

// letGoPrior gives up a claim this message may hold from its batch, so
// the next owner need not wait for the lease to run out.
func (w *work) letGoPrior() {
	if err := w.c.LetGoPrior(w.s.p.calm); err != nil {
		w.releaseFailed(err)
	}
}

func (w *work) releaseFailed(err error) {
	// Harmless: the lease expires by itself.
	w.s.p.log.Log(context.Background(), claim.LogLevel(err), "release failed; the lease will expire", w.attrs(slog.String("err", err.Error()))...)
}

func (w *work) ack(result string) {
	// No deadline, and no timer per message: both sources settle without
	// waiting on the network (RabbitMQ's acks are coalesced and written
	// by the channel, Kafka's only mark the offset).
	w.settled = true
	w.endBounces()
	if err := w.d.Ack(context.Background()); err != nil {
		w.event(metrics.EventSettleFailed)
		w.s.p.log.Log(context.Background(), w.settleErrLevel(), "ack failed; the broker will redeliver and the seen-set will skip it", w.attrs(slog.String("err", err.Error()))...)
	}
	w.result(result)
}

func (w *work) requeue(why string) { w.requeueAs(why, w.attempt != 0 || w.down != 0) }

// requeueAs gives the delivery back; counted: it was at the app (or
// panicked), a delivery its broker counts.
func (w *work) requeueAs(why string, counted bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.settled = true
	var err error
	if g, ok := w.d.(broker.GiveBacker); ok && !counted {
		// Never at the app this time: not a delivery its broker counts.
		err = g.GiveBack(ctx)
	} else {
		err = w.d.Requeue(ctx)
	}
	if err != nil {
		w.event(metrics.EventSettleFailed)
		w.s.p.log.Log(ctx, w.settleErrLevel(), "requeue failed; the broker will redeliver", w.attrs(slog.String("err", err.Error()))...)
	}
	w.s.p.log.Debug("requeued", w.attrs(slog.String("reason", why))...)
	w.result(metrics.Requeued)
}

// Wait sleeps for d unless the pipeline drains or the delivery is lost;
// it reports whether the full wait elapsed (and implements claim.Waiter:
// a claim's retries wait so).
func (w *work) Wait(d time.Duration) bool { return w.waitOr(nil, d) }

// waitOr is wait that also ends, reporting true, when ch is closed (a nil
// ch never is).
func (w *work) waitOr(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ch:
		return true
	case <-w.s.p.draining:
	case <-w.s.p.hard.Done():
	case <-w.d.Lost():
	}
	return false
}

// waitGate blocks while the Gate says the app is down. It runs before the
// claim, never between claim and forward: a lease held while waiting would
// expire unrenewed. The delivery stays unacked meanwhile; like wait, it
// reports false when the pipeline drains or the delivery is lost, and the
// caller requeues.
func (w *work) waitGate() bool {
	if w.gateOpen() {
		return true
	}
	w.event(metrics.EventAppWait)
	w.s.p.log.Debug("app down: holding the message until it is back", w.attrs()...)
	select {
	case <-w.s.p.o.Gate.Open():
		return true
	case <-w.s.p.draining:
	case <-w.s.p.hard.Done():
	case <-w.d.Lost():
	}
	return false
}

// gateOpen reports, without waiting, whether the app is up (always, when
// there is no Gate).
func (w *work) gateOpen() bool {
	if w.s.p.o.Gate == nil {
		return true
	}
	select {
	case <-w.s.p.o.Gate.Open():
		return true
	default:
		return false
	}
}

// backoff is the delivery policy's delay before attempt; a Retry-After
// from the app wins when longer, capped at BackoffMax so a hostile header
// cannot park a worker.
func (p *Pipeline) backoff(attempt int, retryAfter time.Duration) time.Duration {
	return p.retry.Delay(attempt, retryAfter)
}

// settleErrLevel: a settle that failed because the delivery's channel or
// partition is gone is one of many; the source logs that once.
func (w *work) settleErrLevel() slog.Level {
	select {
	case <-w.d.Lost():
		return slog.LevelDebug
	default:
		return slog.LevelWarn
	}
}

func (w *work) info(last forward.Result, reason string, attempts int) broker.DeadLetterInfo {
	info := broker.DeadLetterInfo{Reason: reason, LastStatus: last.Status, Attempts: attempts}
	if last.Err != nil {
		info.LastError = last.Err.Error()
	}
	return info
}

// metaHeaders are the metadata headers of the message's requests, built
// for each attempt (a retry is rare; a field to keep them is not).
func (w *work) metaHeaders() []forward.Header {
	m := w.d.Message()
	if m.Topic == "" {
		// Nothing per message but Redelivered: share the queue's.
		q := w.s.queueMeta.Load()
		if q == nil || q.source != m.Source || q.kind != m.Kind || q.queue != m.Queue {
			q = &queueMeta{source: m.Source, kind: m.Kind, queue: m.Queue}
			for i, redelivered := range []bool{false, true} {
				q.h[i] = buildMeta(m, redelivered)
			}
			w.s.queueMeta.Store(q)
		}
		i := 0
		if m.Redelivered {
			i = 1
		}
		return q.h[i]
	}
	return buildMeta(m, m.Redelivered)
}

func buildMeta(m *broker.Message, redelivered bool) []forward.Header {
	h := make([]forward.Header, 0, 8)
	h = append(h, forward.Header{Name: "X-Dedupe-Source", Value: m.Source}, forward.Header{Name: "X-Dedupe-Broker", Value: m.Kind})
	if m.Queue != "" {
		h = append(h, forward.Header{Name: "X-Dedupe-Queue", Value: m.Queue})
	}
	if m.Topic != "" {
		h = append(h,
			forward.Header{Name: "X-Dedupe-Topic", Value: m.Topic},
			forward.Header{Name: "X-Dedupe-Partition", Value: strconv.Itoa(m.Partition)},
			forward.Header{Name: "X-Dedupe-Offset", Value: strconv.FormatInt(m.Offset, 10)})
		if len(m.RecordKey) > 0 {
			h = append(h, forward.Header{Name: "X-Dedupe-Record-Key", Value: string(m.RecordKey)})
		}
	}
	return append(h, forward.Header{Name: "X-Dedupe-Redelivered", Value: strconv.FormatBool(redelivered)})
}

func (w *work) attrs(extra ...any) []any {
	m := w.d.Message()
	a := []any{slog.String("source", w.s.Name)}
	if key := w.key(); key != "" {
		a = append(a, slog.String("key", key))
	}
	if m.Topic != "" {
		a = append(a, slog.String("topic", m.Topic), slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset))
	}
	if w.s.p.o.LogBodies {
		a = append(a, slog.String("body", string(m.Body)))
	}
	return append(a, extra...)
}

// fail logs a message given up on, with the last answer of the app (a
// zero one when it was never asked).
func (w *work) fail(last forward.Result, msg string, extra ...any) {
	w.event(metrics.EventFailed)
	a := extra
	if last.Status != 0 || last.Reason != "" {
		// A message given up on before it reached the app (too large,
		// unforwardable) has no answer to report.
		a = append([]any{slog.Int("status", last.Status), slog.String("reason", last.Reason)}, extra...)
	}
	w.s.p.log.Warn(msg, w.attrs(a...)...)
}

func (w *work) event(e string) { w.s.m.events[e].Inc() }

func (w *work) result(r string) { w.s.m.results[r].Inc() }
