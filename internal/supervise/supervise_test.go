package supervise

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
)

// logLines records what a Dep logs, one "LEVEL msg" (and its attrs' keys)
// per line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

var lines = Lines{Up: "up", Lost: "lost", Failing: "failing"}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Each outage is one warning, its repeats debug, and one up line with
// down_for; the first failure of a dependency never up is Failing.
func TestDepLogsEachTransitionOnce(t *testing.T) {
	var logs logLines
	var changes []bool
	d := New(Options{Log: slog.New(&logs), Lines: lines, Err: errors.New("not yet"),
		OnChange: func(up bool) { changes = append(changes, up) }})
	if d.IsUp() || isClosed(d.Up()) || d.Err().Error() != "not yet" {
		t.Fatalf("new Dep: up %v err %v", d.IsUp(), d.Err())
	}
	d.SetDown(errors.New("refused"), false)
	d.SetDown(errors.New("refused again"), false, "retry_in", "1s")
	if got := d.Err(); got == nil || got.Error() != "refused again" {
		t.Fatalf("Err = %v, want the last error", got)
	}
	held := d.Up()
	if !d.SetUp("workers", 2) || d.SetUp() {
		t.Fatal("SetUp reports the transition only")
	}
	if !isClosed(held) || d.Err() != nil {
		t.Fatalf("up: channel closed %v, err %v", isClosed(held), d.Err())
	}
	if !d.SetDown(errors.New("reset"), true) || d.SetDown(nil, false) {
		t.Fatal("SetDown reports whether the Dep was up")
	}
	if d.Err().Error() != "reset" {
		t.Fatalf("a nil error replaced the last one: %v", d.Err())
	}
	if isClosed(d.Up()) {
		t.Fatal("the channel of a Dep down is closed")
	}
	d.SetUp()
	want := []string{
		"WARN failing err=refused",
		"DEBUG failing err=refused again retry_in=1s",
		"INFO up workers=2 down_for=",
		"WARN lost err=reset",
		"DEBUG failing err=reset",
		"INFO up down_for=",
	}
	got := logs.take()
	if len(got) != len(want) {
		t.Fatalf("lines:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d = %q, want %q…", i, got[i], want[i])
		}
	}
	if len(changes) != 3 || !changes[0] || changes[1] || !changes[2] {
		t.Errorf("OnChange calls = %v, want up, down, up", changes)
	}
}

// A Dep without lines logs nothing; one started up has an open channel;
// Lose takes it down without a line and the loop's SetDown then warns.
func TestDepQuietAndLose(t *testing.T) {
	var logs logLines
	q := New(Options{Log: slog.New(&logs), Up: true})
	if !q.IsUp() || !isClosed(q.Up()) {
		t.Fatal("Options.Up: the Dep starts down")
	}
	q.SetDown(errors.New("x"), true)
	q.SetUp()
	if got := logs.take(); len(got) != 0 {
		t.Fatalf("a Dep without lines logged %q", got)
	}

	d := New(Options{Log: slog.New(&logs), Lines: Lines{Up: "up", Lost: "lost"}})
	d.SetUp()
	d.Lose(errors.New("cut"))
	if d.IsUp() || d.Err().Error() != "cut" {
		t.Fatalf("after Lose: up %v err %v", d.IsUp(), d.Err())
	}
	d.SetDown(nil, true)
	// Failing "" is Lost.
	d.SetDown(errors.New("again"), false)
	got := logs.take()
	if len(got) != 3 || got[1] != "WARN lost err=cut" || got[2] != "DEBUG lost err=again" {
		t.Fatalf("lines: %q", got)
	}
}

// Failing reports a failure for window after it, up or down, and a
// success clears it.
func TestDepFailingWindow(t *testing.T) {
	d := New(Options{Up: true})
	if d.Failing(time.Hour) != nil {
		t.Fatal("Failing before any failure")
	}
	d.Failed(errors.New("fetch refused"))
	if !d.IsUp() || d.Err() != nil {
		t.Fatal("Failed took the Dep down")
	}
	if err := d.Failing(time.Hour); err == nil || err.Error() != "fetch refused" {
		t.Fatalf("Failing = %v", err)
	}
	if d.Failing(0) != nil {
		t.Fatal("a failure older than the window counts")
	}
	d.SetUp()
	if d.Failing(time.Hour) != nil {
		t.Fatal("a success left the failure")
	}
	d.SetDown(errors.New("broken"), true)
	if err := d.Failing(time.Hour); err == nil || err.Error() != "broken" {
		t.Fatalf("Failing after SetDown = %v", err)
	}
}

func TestDepWait(t *testing.T) {
	d := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d.Wait(ctx) {
		t.Fatal("Wait on a Dep down reported up")
	}
	done := make(chan bool)
	go func() { done <- d.Wait(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	d.SetUp()
	if !<-done {
		t.Fatal("Wait did not see the Dep come up")
	}
}

// The loop passes reconnect false only to the first session, reports
// each end (lost when the session had connected) with retry_in, backs
// off between sessions — from the start again after one connected — and
// stops on ctx, without a line for the session ctx cut.
func TestLoopRunsSessionsWithBackoff(t *testing.T) {
	var logs logLines
	d := New(Options{Log: slog.New(&logs), Lines: lines})
	var reconnects []bool
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	Loop{Dep: d, Policy: backoff.Policy{Initial: 20 * time.Millisecond, Max: time.Second}}.Run(ctx,
		func(ctx context.Context, reconnect bool) (bool, error) {
			reconnects = append(reconnects, reconnect)
			switch calls.Add(1) {
			case 1, 2:
				return false, errors.New("refused")
			case 3:
				d.SetUp()
				return true, errors.New("reset")
			case 4:
				return false, errors.New("refused")
			default:
				cancel()
				return true, errors.New("cut by ctx")
			}
		})
	if want := []bool{false, false, false, true, true}; len(reconnects) != len(want) {
		t.Fatalf("reconnect flags %v, want %v", reconnects, want)
	} else {
		for i := range want {
			if reconnects[i] != want[i] {
				t.Fatalf("reconnect flags %v, want %v", reconnects, want)
			}
		}
	}
	// retry_in: 20ms, 40ms, then from the start again after the session
	// that connected.
	got := logs.take()
	want := []string{"WARN failing err=refused retry_in=20ms", "DEBUG failing err=refused retry_in=40ms", "INFO up down_for=",
		"WARN lost err=reset retry_in=20ms", "DEBUG failing err=refused retry_in=40ms"}
	if len(got) != len(want) {
		t.Fatalf("lines:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d = %q, want %q…", i, got[i], want[i])
		}
	}
}

// Stop ends the loop as ctx does: during a session and during a wait.
func TestLoopStop(t *testing.T) {
	d := New(Options{})
	stop := make(chan struct{})
	done := make(chan struct{})
	started := make(chan struct{}, 10)
	go func() {
		defer close(done)
		Loop{Dep: d, Policy: backoff.Policy{Initial: time.Hour}, Stop: stop}.Run(context.Background(),
			func(context.Context, bool) (bool, error) {
				started <- struct{}{}
				return false, errors.New("refused")
			})
	}()
	<-started
	time.Sleep(10 * time.Millisecond) // into the hour's wait
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end the loop's wait")
	}
}

// Probe reports each answer, bounds each check by Timeout, and does not
// report a check that shutdown cut short.
func TestProbe(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	var deadlines atomic.Int32
	d := New(Options{Err: errors.New("not probed yet")})
	p := Probe{Interval: 5 * time.Millisecond, Timeout: time.Second, Check: func(ctx context.Context) error {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= time.Second {
			deadlines.Add(1)
		}
		if fail.Load() {
			return errors.New("status 503")
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, d) }()
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	wait("a failed check recorded", func() bool { return d.Err() != nil && d.Err().Error() == "status 503" })
	fail.Store(false)
	if !d.Wait(ctx) {
		t.Fatal("not up")
	}
	fail.Store(true)
	wait("down again", func() bool { return !d.IsUp() })
	cancel()
	<-done
	if deadlines.Load() == 0 {
		t.Error("no check had Timeout's deadline")
	}

	// A check that shutdown cuts short leaves the Dep as it was.
	up := New(Options{Up: true})
	ctx, cancel = context.WithCancel(context.Background())
	Probe{Interval: time.Hour, Check: func(context.Context) error { cancel(); return context.Canceled }}.Run(ctx, up)
	if !up.IsUp() {
		t.Fatal("a check cut by shutdown took the Dep down")
	}
}

// Severe starts each outage at error; its repeats are still debug.
func TestDepSevere(t *testing.T) {
	var logs logLines
	d := New(Options{Log: slog.New(&logs), Lines: lines, Up: true, Severe: true})
	d.SetDown(errors.New("404"), true)
	d.SetDown(errors.New("404 again"), true)
	d.SetUp()
	d.SetDown(errors.New("404"), true)
	got := logs.take()
	want := []string{"ERROR lost err=404", "DEBUG lost err=404 again", "INFO up down_for=", "ERROR lost err=404"}
	if len(got) != len(want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("logged %q, want %q", got, want)
		}
	}
}
