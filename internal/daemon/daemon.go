// Package daemon is dedupe-proxy as a library: it builds the store, the
// forwarder, the sources and the admin listener from a Config and runs
// them until the context ends. main only parses flags and turns signals
// into that context, so tests run the whole proxy in-process.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/gcfloor"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// Version is set by the linker (-X) at build time.
var Version = "dev"

// Deps lets tests inject parts; zero fields are built from the Config.
type Deps struct {
	Logger   *slog.Logger
	Store    seenset.Store
	Registry *prometheus.Registry
}

// Daemon is one running proxy.
type Daemon struct {
	cfg      *config.Config
	log      *slog.Logger
	store    seenset.Store
	ownStore bool
	fwd      *forward.Client
	reg      *prometheus.Registry
	metrics  *metrics.Metrics
	pipe     *pipeline.Pipeline
	claims   *claim.Protocol // every source's and webhook's (newClaims)
	sources  []source
	admin    *http.Server
	adminLn  net.Listener
	health   *appHealth       // nil without app.health_url
	keysAPI  http.Handler     // nil unless an admin token is configured
	durable  *durabilityCheck // nil unless the store can report it
	// failed holds the error of a source that stopped by itself; /healthz
	// reports it while the process shuts down to be restarted.
	failed atomic.Pointer[error]
	// abortGrace bounds the wait for in-flight work after Abort.
	abortGrace time.Duration
	// summaryEvery is how often the summary line is logged.
	summaryEvery time.Duration
}

// defaultAbortGrace is how long Run waits for in-flight work once the
// shutdown timeout ran out and forwards were cancelled; past it the
// process exits anyway (non-zero) and the broker redelivers whatever was
// not settled.
const defaultAbortGrace = 10 * time.Second

type source struct {
	src unit
	run func(context.Context) error
}

// unit is what the daemon needs of a source to report on it and close
// it: a broker source or a webhook listener.
type unit interface {
	Name() string
	Ready() error
	Close() error
}

// New builds a Daemon; nothing connects until Run.
func New(cfg *config.Config, deps Deps) (_ *Daemon, err error) {
	// What New built is undone in reverse order when a later step fails,
	// as each step registers its own cleanup once it succeeded.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	d := &Daemon{cfg: cfg, log: deps.Logger, store: deps.Store, reg: deps.Registry, abortGrace: defaultAbortGrace, summaryEvery: summaryEvery}
	if d.log == nil {
		d.log = newLogger(cfg.Log, nil)
	}
	setRedisLogger(d.log)
	if d.reg == nil {
		d.reg = prometheus.NewRegistry()
		d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	d.metrics = metrics.New(d.reg)
	metrics.RegisterBuildInfo(d.reg, build())
	if d.store == nil {
		st, err := NewStore(cfg)
		if err != nil {
			return nil, err
		}
		d.store, d.ownStore = st, true
		undo = append(undo, func() { _ = st.Close() })
	}
	d.durable = newDurabilityCheck(d.store, d.log, d.metrics)
	fc := cfg.App.Forward()
	fc.UserAgent = "dedupe-proxy/" + Version
	fwd, err := forward.New(fc)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	d.fwd = fwd
	undo = append(undo, fwd.Close)
	var gate pipeline.Gate
	if cfg.App.HealthURL != "" {
		d.health = newAppHealth(supervise.AppCheck(fwd, cfg.App.HealthURL),
			cfg.App.HealthInterval, d.log, d.metrics.AppUp)
		gate = d.health
	}
	token, err := admin.LoadToken(cfg.Admin)
	if err != nil {
		return nil, err
	}
	if token != "" {
		k := &admin.Keys{Store: seenset.Observe(d.store, d.metrics.Store()), Consumer: cfg.Consumer, Spaces: cfg.KeySpaces(), Lease: cfg.SeenSet.Lease, TTL: cfg.SeenSet.TTL}
		d.keysAPI = k.Handler(token, d.log)
	}
	for _, w := range cfg.Warnings() {
		d.log.Warn(w.Msg, "field", w.Path)
	}
	dl := cfg.Delivery
	d.claims = newClaims(cfg, d.store, d.metrics)
	d.pipe = pipeline.New(pipeline.Options{
		Consumer:             cfg.Consumer,
		Claims:               d.claims,
		Forwarder:            fwd,
		FailOpenOnStoreError: cfg.SeenSet.OnStoreError == "forward",
		MaxAttempts:          dl.MaxAttempts,
		BackoffInitial:       dl.BackoffInitial,
		BackoffMax:           dl.BackoffMax,
		Jitter:               dl.Jitter,
		BusyDelay:            dl.BusyDelay,
		MaxRequestTime:       cfg.App.MaxRequestTime,
		MaxBodyBytes:         int64(dl.MaxBodyBytes),
		LogBodies:            cfg.Log.Bodies,
		Logger:               d.log,
		Metrics:              d.metrics,
		Gate:                 gate,
	})
	for _, sc := range cfg.Sources {
		if sc.Type == "webhook" {
			l, err := d.newWebhook(sc)
			if err != nil {
				return nil, fmt.Errorf("source %s: %w", sc.Name, err)
			}
			undo = append(undo, func() { _ = l.Close() })
			d.sources = append(d.sources, source{src: l, run: l.Run})
			continue
		}
		ex, err := keys.Parse(sc.Key)
		if err != nil {
			return nil, fmt.Errorf("source %s key: %w", sc.Name, err)
		}
		src, err := d.newSource(sc, ex)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", sc.Name, err)
		}
		undo = append(undo, func() { _ = src.Close() })
		dg, err := keys.ParseDigestFields(sc.KeyReuseFields)
		if err != nil {
			return nil, fmt.Errorf("source %s key_reuse_fields: %w", sc.Name, err)
		}
		so := pipeline.SourceOptions{
			Name:                 sc.Name,
			KeyReuse:             sc.KeyReuse,
			Digest:               dg,
			Kind:                 sc.Type,
			Path:                 sc.Path,
			ContentType:          sc.ContentType,
			Keys:                 ex,
			KeySpace:             sc.KeySpaceName(),
			DeadLetterMissingKey: sc.OnMissingKey == "dead_letter",
			Requeues:             src.Requeues(),
		}
		s := source{src: src}
		if ss, ok := src.(broker.SetSource); ok {
			h, set := d.pipe.SetHandlers(so)
			s.run = func(ctx context.Context) error { return ss.RunSets(ctx, h, set) }
		} else if bs, ok := src.(broker.BatchSource); ok {
			h := d.pipe.BatchHandler(so)
			s.run = func(ctx context.Context) error { return bs.RunBatches(ctx, h) }
		} else {
			h := d.pipe.Handler(so)
			s.run = func(ctx context.Context) error { return src.Run(ctx, h) }
		}
		d.sources = append(d.sources, s)
	}
	d.metrics.SetConnectedProbe(func(set func(string, bool)) {
		for _, s := range d.sources {
			set(s.src.Name(), s.src.Ready() == nil)
		}
	})
	return d, nil
}

// newSource builds a broker source by its kind's row.
func (d *Daemon) newSource(sc config.Source, ex *keys.Extractor) (broker.Source, error) {
	k := config.KindOf(sc.Type)
	if k == nil || k.NewSource == nil {
		return nil, fmt.Errorf("unknown source type %q", sc.Type)
	}
	return k.NewSource(sc, config.SourceEnv{
		Consumer: d.cfg.Consumer,
		Logger:   d.log,
		Metrics:  d.metrics.ForSource(sc.Name, sc.Type),
		Key: func(m *broker.Message) string {
			k, _ := ex.Key(m)
			return k
		},
	})
}

// NewStore builds the configured seen-set backend.
func NewStore(cfg *config.Config) (seenset.Store, error) {
	switch cfg.SeenSet.Backend {
	case "memory":
		return seenset.NewMemory(), nil
	case "redis":
		return seenset.NewRedis(cfg.SeenSet.Redis)
	}
	return nil, fmt.Errorf("unknown seen-set backend %q", cfg.SeenSet.Backend)
}

// Registry exposes the metrics registry (tests read it).
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Store exposes the seen-set (tests and the admin API use it).
func (d *Daemon) Store() seenset.Store { return d.store }

// AdminAddr is the admin listener's address once Run started it.
func (d *Daemon) AdminAddr() string {
	if d.adminLn == nil {
		return ""
	}
	return d.adminLn.Addr().String()
}

// Ready is nil when every source is connected, the store answers and,
// with app.health_url, the app's last health check passed: what
// /readyz?deps=1 answers 200 for.
func (d *Daemon) Ready(ctx context.Context) error {
	var errs []error
	for _, c := range d.checks(ctx) {
		if c.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, c.err))
		}
	}
	return errors.Join(errs...)
}

type check struct {
	name string
	err  error
	warn string // shown on /readyz; never makes the proxy unready
	// detail follows "ok" on /readyz.
	detail string
}

// checks are /readyz's lines, in a fixed order.
func (d *Daemon) checks(ctx context.Context) []check {
	var cs []check
	for _, s := range d.sources {
		cs = append(cs, check{name: "source " + s.src.Name(), err: s.src.Ready()})
	}
	err := seenset.Observe(d.store, d.metrics.Store()).Ping(ctx)
	cs = append(cs, check{name: "seenset", err: err})
	if d.durable != nil {
		w := d.durable.warning(ctx, err == nil)
		cs[len(cs)-1].detail = d.durable.detail()
		if w != "" {
			cs = append(cs, check{name: "seenset durability", warn: w})
		}
	}
	if d.health != nil {
		cs = append(cs, check{name: "app", err: d.health.Err()})
	}
	return cs
}

// Run runs until ctx is cancelled, then shuts down in order: stop fetching
// → let in-flight forwards finish (bounded by shutdown_timeout) → ack or
// requeue them → close the brokers → close the store → close the admin
// listener. It returns nil after a clean shutdown.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.startAdmin(); err != nil {
		return errors.Join(err, d.closeStore())
	}
	d.log.Info("dedupe-proxy starting", append([]any{"version", build().Version, "consumer", d.cfg.Consumer,
		"sources", len(d.sources), "seenset", d.cfg.SeenSet.Backend, "app", redactURL(d.cfg.App.URL)}, d.listeners()...)...)
	d.durable.start()
	// The process's live heap is a few MiB: without a floor the
	// collector runs every few MiB allocated, which was the largest
	// single cost per message (docs/performance.md).
	defer gcfloor.Start(int64(d.cfg.HeapFloor)).Stop()

	healthDone := make(chan struct{})
	hctx, stopHealth := context.WithCancel(context.Background())
	defer stopHealth()
	if d.health != nil {
		go func() { defer close(healthDone); d.health.run(hctx) }()
	} else {
		close(healthDone)
	}

	// A source that stops by itself while we run (a fault retrying
	// cannot fix) stops the whole process: a proxy that consumes nothing
	// while its probes say ok is the worst outcome, and a restart is what
	// Kubernetes does best.
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	for _, s := range d.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.run(ctx)
			if ctx.Err() != nil {
				if err != nil {
					d.log.Error("source stopped with an error during shutdown", "source", s.src.Name(), "err", err)
				}
				return
			}
			if err == nil {
				err = errors.New("stopped consuming by itself")
			}
			err = fmt.Errorf("source %s: %w", s.src.Name(), err)
			if d.failed.CompareAndSwap(nil, &err) {
				d.log.Error("source stopped; shutting down to be restarted", "source", s.src.Name(), "err", err)
			}
			stopAll()
		}()
	}
	sourcesDone := make(chan struct{})
	go func() { wg.Wait(); close(sourcesDone) }()
	summaryDone := make(chan struct{})
	go func() { defer close(summaryDone); d.summarize(ctx, d.summaryEvery) }()

	<-ctx.Done()
	<-summaryDone
	start := time.Now()
	d.log.Info("shutting down: no new messages; finishing in-flight ones", "timeout", d.cfg.ShutdownTimeout.String())
	d.pipe.Drain()
	timer := time.NewTimer(d.cfg.ShutdownTimeout)
	defer timer.Stop()
	var errs []error
	if f := d.failed.Load(); f != nil {
		errs = append(errs, *f)
	}
	select {
	case <-sourcesDone:
	case <-timer.C:
		d.log.Warn("shutdown timeout reached: cancelling forwards still in progress and requeuing them; their keys stay claimed until app.max_request_time from each request's start")
		d.pipe.Abort()
		grace := time.NewTimer(d.abortGrace)
		defer grace.Stop()
		select {
		case <-sourcesDone:
		case <-grace.C:
			err := fmt.Errorf("in-flight work did not stop within %s of the shutdown timeout; exiting anyway, the broker redelivers what was not settled", d.abortGrace)
			d.log.Error(err.Error())
			errs = append(errs, err)
		}
	}
	// Nothing waits at the gate any more: the prober can stop before the
	// forwarder it probes through is closed.
	stopHealth()
	<-healthDone
	for _, s := range d.sources {
		if err := s.src.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close source %s: %w", s.src.Name(), err))
		}
	}
	d.fwd.Close()
	if err := d.closeStore(); err != nil {
		errs = append(errs, fmt.Errorf("close seen-set: %w", err))
	}
	if d.admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := d.admin.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("close admin listener: %w", err))
		}
		cancel()
	}
	d.log.Info("stopped", append([]any{"took", time.Since(start).String()}, readTotals(d.reg).attrs()...)...)
	return errors.Join(errs...)
}

func (d *Daemon) closeStore() error {
	d.durable.stop()
	if d.ownStore && d.store != nil {
		return d.store.Close()
	}
	return nil
}
