package daemon

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// durabilityReporter is a store that can say whether its servers may lose
// keys (Redis).
type durabilityReporter interface {
	Durability(ctx context.Context) (seenset.Durability, error)
}

// topologyReporter is a store that can say how its servers are deployed
// (Redis: standalone, Sentinel or Cluster, masters and replicas).
type topologyReporter interface {
	Describe(ctx context.Context) (seenset.Topology, error)
}

// durabilityCheck asks the store's servers whether they may evict or lose
// the seen-set's keys: at start (until it gets an answer), every few
// minutes after, and when /readyz finds the answer older than maxAge. An
// evicting or unpersisted Redis still works, so this only warns: each
// problem once in the log while it lasts, on /readyz and in two gauges.
type durabilityCheck struct {
	r          durabilityReporter
	log        *slog.Logger
	m          *metrics.Metrics
	every      time.Duration // between reads once one succeeded
	retry      time.Duration // between reads until one succeeds
	maxAge     time.Duration // /readyz reads again when the answer is older
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan struct{}
	started    bool
	reading    sync.Mutex // one read at a time
	mu         sync.Mutex // guards the fields below
	warnings   []string   // of the last answer; nil before one
	answeredAt time.Time
	warned     map[string]bool // the problems logged and still present
	topology   string          // the last deployment found, logged when it changes
	// downLogged: the seen-set did not answer the first read, and the log
	// said so (once: the pipeline says it again when a message needs it).
	downLogged bool
}

// unreachableAtStart logs, once, that the seen-set has not answered since
// the start: with no message yet nothing else would say so, and an
// operator starting the proxy wants to know before the first message.
func (c *durabilityCheck) unreachableAtStart(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.answeredAt.IsZero() || c.downLogged {
		return
	}
	c.downLogged = true
	c.log.Warn("seen-set unreachable at start: messages are neither forwarded nor acked until it answers", "err", err.Error())
}

func newDurabilityCheck(st seenset.Store, log *slog.Logger, m *metrics.Metrics) *durabilityCheck {
	r, ok := st.(durabilityReporter)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &durabilityCheck{
		r: r, log: log, m: m,
		every: 5 * time.Minute, retry: 5 * time.Second, maxAge: 30 * time.Second,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), warned: map[string]bool{},
	}
}

// start runs the periodic reads until stop.
func (c *durabilityCheck) start() {
	if c == nil {
		return
	}
	c.started = true
	go func() {
		defer close(c.done)
		for {
			wait := c.every
			rctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			if !c.read(rctx) {
				wait = c.retry
			}
			cancel()
			if !backoff.Wait(c.ctx, nil, wait) {
				return
			}
		}
	}()
}

// stop ends the reads before the store they use is closed.
func (c *durabilityCheck) stop() {
	if c == nil {
		return
	}
	c.cancel()
	if c.started {
		<-c.done
	}
}

// read asks the servers and records the answer; false when they could not
// be reached (readiness reports that; the last answer stays).
func (c *durabilityCheck) read(ctx context.Context) bool {
	c.reading.Lock()
	defer c.reading.Unlock()
	d, err := c.r.Durability(ctx)
	if err != nil {
		c.unreachableAtStart(err)
		return false
	}
	c.m.SeenSetEvicting.Set(d.Evicting().Gauge())
	c.m.SeenSetPersistent.Set(d.Persistent().Gauge())
	ws := d.Warnings()
	topology := ""
	if tr, ok := c.r.(topologyReporter); ok {
		t, err := tr.Describe(ctx)
		if err != nil {
			return false
		}
		topology = "redis " + t.String()
		ws = append(ws, t.Warnings...)
		c.mu.Lock()
		changed := topology != c.topology
		c.topology = topology
		c.mu.Unlock()
		if changed {
			c.log.Info("seen-set redis", "mode", string(t.Mode), "masters", len(t.Masters), "topology", t.String())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := map[string]bool{}
	for _, w := range ws {
		now[w] = true
		if !c.warned[w] {
			c.log.Warn(w)
		}
	}
	c.warned = now
	c.warnings = append([]string{}, ws...)
	c.answeredAt = time.Now()
	return true
}

// warning is /readyz's line: the problems of the last answer. When the
// store answered its ping, a missing answer is read first, and a stale
// one too unless a read is already under way.
func (c *durabilityCheck) warning(ctx context.Context, reachable bool) string {
	c.mu.Lock()
	answered, stale := c.warnings != nil, time.Since(c.answeredAt) > c.maxAge
	c.mu.Unlock()
	switch {
	case !reachable:
	case !answered:
		// Wait for a read under way: its answer is the one to show.
		c.reading.Lock()
		c.mu.Lock()
		answered = c.warnings != nil
		c.mu.Unlock()
		c.reading.Unlock()
		if !answered {
			c.read(ctx)
		}
	case stale && c.reading.TryLock():
		c.reading.Unlock()
		c.read(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.warnings, "; ")
}

// detail is the deployment last found, for /readyz's seenset line.
func (c *durabilityCheck) detail() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topology
}
