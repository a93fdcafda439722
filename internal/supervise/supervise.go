// Package supervise follows the proxy's outside dependencies one way: a
// broker connection, the webhook target, the app behind app.health_url.
//
// A Dep is one dependency's state: up or down, the error that took it
// down, a channel closed while it is up. It logs the start of an outage
// once (a warning) and the end of it once (info, with down_for); what
// happens in between is debug. Loop keeps a connection: it runs sessions
// with the one backoff and reports each end to the Dep. Probe asks a
// dependency on a timer (the app's health URL) and reports each answer.
//
// A dependency that flickers as it comes back is statelog's business, not
// this package's: a Dep changes on every report it is given.
package supervise

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
)

// Lines are what a Dep logs; an empty line is not logged, so a Dep whose
// owner logs for itself (Kafka's, through statelog) logs nothing.
type Lines struct {
	// Up (info) is logged when the dependency comes up: at the first
	// success and after each outage, then with down_for.
	Up string
	// Lost (warn) starts an outage of a dependency that was up.
	Lost string
	// Failing (warn) starts an outage of one that never came up, or could
	// not come up again after Lost; "" is Lost. Its repeats are debug.
	Failing string
}

// Options configure a Dep.
type Options struct {
	Log   *slog.Logger
	Lines Lines
	// Up starts the Dep up; by default it starts down with Err.
	Up  bool
	Err error
	// OnChange is called, with the Dep's lock held, on every transition
	// (a metric that follows the state); nil: none.
	OnChange func(up bool)
	// Severe logs the start of an outage at error instead of warn: a
	// loss that is a misconfiguration rather than weather (a dead-letter
	// exchange that does not exist).
	Severe bool
}

// Dep is one dependency's state. Its methods are safe for concurrent use.
type Dep struct {
	log      *slog.Logger
	lines    Lines
	onChange func(bool)
	start    slog.Level // of an outage's first line

	mu       sync.Mutex
	up       bool
	open     chan struct{} // closed while up
	err      error         // why it is down; kept while up for Failing
	downAt   time.Time     // start of the logged outage; zero while up
	failedAt time.Time     // last failure; zero once something worked
}

// New returns a Dep in the state o says.
func New(o Options) *Dep {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &Dep{log: o.Log, lines: o.Lines, onChange: o.OnChange, start: slog.LevelWarn, up: o.Up, err: o.Err, open: make(chan struct{})}
	if o.Severe {
		d.start = slog.LevelError
	}
	if o.Up {
		d.err = nil
		close(d.open)
	}
	return d
}

// Up returns a channel that is closed while the dependency is up; the
// channel of a Dep that goes down stays open, and a new one is handed out.
func (d *Dep) Up() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open
}

// Wait returns once the dependency is up (true) or ctx ended (false).
func (d *Dep) Wait(ctx context.Context) bool {
	select {
	case <-d.Up():
		return true
	case <-ctx.Done():
		return false
	}
}

// IsUp reports whether the dependency is up.
func (d *Dep) IsUp() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.up
}

// Err is nil while the dependency is up, else the last error reported
// (the Options' Err before any): what a Ready answers.
func (d *Dep) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.up {
		return nil
	}
	return d.err
}

// Failing is the last failure reported if it is more recent than window,
// whether or not it took the dependency down; a success clears it.
func (d *Dep) Failing(window time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failedAt.IsZero() || time.Since(d.failedAt) >= window {
		return nil
	}
	return d.err
}

// SetUp records a success. When the dependency was down it comes up, the
// Up line is logged with attrs (and down_for after an outage) and SetUp
// reports true.
func (d *Dep) SetUp(attrs ...any) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failedAt = time.Time{}
	if d.up {
		return false
	}
	d.up, d.err = true, nil
	close(d.open)
	if !d.downAt.IsZero() {
		attrs = append(attrs, "down_for", time.Since(d.downAt).Round(time.Millisecond).String())
		d.downAt = time.Time{}
	}
	if d.lines.Up != "" {
		d.log.Info(d.lines.Up, attrs...)
	}
	d.change(true)
	return true
}

// SetDown records err (a nil err keeps the last one) and takes the
// dependency down. The first failure of an outage is logged at warn (at
// error when Severe) with the Lost line when lost (the dependency had
// been up), else the Failing line; later ones at debug. attrs follow
// err. It reports whether the dependency was up.
func (d *Dep) SetDown(err error, lost bool, attrs ...any) (wasUp bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	wasUp = d.down(err)
	line := d.lines.Failing
	if lost || line == "" {
		line = d.lines.Lost
	}
	level := slog.LevelDebug
	if d.downAt.IsZero() {
		level, d.downAt = d.start, time.Now()
	}
	if line != "" {
		d.log.Log(context.Background(), level, line, append([]any{"err", errText(d.err)}, attrs...)...)
	}
	return wasUp
}

// Lose takes the dependency down at once, without a line: a session
// that has just failed and is winding down, whose loop then logs the
// outage (SetDown); or a dependency closed on purpose.
func (d *Dep) Lose(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down(err)
}

// Failed records a failure that leaves the dependency up (a fetch
// refused on a working connection), for Failing.
func (d *Dep) Failed(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failedAt, d.err = time.Now(), err
}

// down marks the Dep down; mu is held.
func (d *Dep) down(err error) (wasUp bool) {
	d.failedAt = time.Now()
	if err != nil {
		d.err = err
	}
	if !d.up {
		return false
	}
	d.up = false
	d.open = make(chan struct{})
	d.change(false)
	return true
}

func (d *Dep) change(up bool) {
	if d.onChange != nil {
		d.onChange(up)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Session is one connection's lifetime, from a dial to its end. reconnect
// is false for the first session only. It reports whether it got as far
// as working (then it called SetUp) and why it ended; it returns when ctx
// ends, and then what it reports is not logged.
type Session func(ctx context.Context, reconnect bool) (connected bool, err error)

// Loop keeps one connection: it runs sessions until ctx ends (or Stop is
// closed), waiting Policy's backoff between them, reset by a session that
// connected.
type Loop struct {
	Dep    *Dep
	Policy backoff.Policy
	// Stop ends the loop as ctx does; nil: only ctx.
	Stop <-chan struct{}
}

// Run runs sessions; each end is reported to Dep (SetDown, lost when the
// session had connected) with the delay before the next as retry_in.
func (l Loop) Run(ctx context.Context, session Session) {
	retry := backoff.New(l.Policy)
	first := true
	for {
		connected, err := session(ctx, !first)
		if ctx.Err() != nil || closed(l.Stop) {
			return
		}
		if connected {
			first = false
			retry.Reset()
		}
		delay := retry.Next()
		l.Dep.SetDown(err, connected, "retry_in", delay.String())
		if !backoff.Wait(ctx, l.Stop, delay) {
			return
		}
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Probe asks a dependency whether it is up, every Interval, and reports
// each answer to a Dep.
type Probe struct {
	Check    func(context.Context) error
	Interval time.Duration
	// Timeout bounds one Check.
	Timeout time.Duration
}

// Once runs one Check within Timeout.
func (p Probe) Once(ctx context.Context) error {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	return p.Check(ctx)
}

// Run probes until ctx ends, the first time at once.
func (p Probe) Run(ctx context.Context, d *Dep) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		err := p.Once(ctx)
		if ctx.Err() != nil {
			return // a check cut short by shutdown says nothing of the dependency
		}
		if err == nil {
			d.SetUp()
		} else {
			d.SetDown(err, d.IsUp())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
