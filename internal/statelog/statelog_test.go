package statelog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTrackerLogsEachChangeOnce(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	read := func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
	tr := New(slog.New(slog.NewTextHandler(w, nil)), "redis down", "redis back", "what", "redis")
	tr.Settle = 50 * time.Millisecond
	tr.Up() // up at start: nothing to say
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); tr.Down(errors.New("connection refused")) }()
	}
	wg.Wait()
	if !tr.IsDown() {
		t.Fatal("not down")
	}
	// Back, but flickering: a failure within Settle is the same outage.
	tr.Up()
	tr.Down(errors.New("flicker"))
	time.Sleep(80 * time.Millisecond)
	if !tr.IsDown() || strings.Contains(read(), "redis back") {
		t.Fatalf("reported back while still failing:\n%s", read())
	}
	for range 10 {
		tr.Up()
	}
	deadline := time.Now().Add(5 * time.Second)
	for tr.IsDown() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	tr.Down(errors.New("again"))
	out := read()
	if strings.Count(out, "msg=\"redis down\"") != 2 || strings.Count(out, "msg=\"redis back\"") != 1 {
		t.Fatalf("log:\n%s", out)
	}
	if !strings.Contains(out, "failures=51") || !strings.Contains(out, `err="connection refused"`) || !strings.Contains(out, "what=redis") {
		t.Fatalf("log:\n%s", out)
	}
	var nilTracker *Tracker
	nilTracker.Down(nil)
	nilTracker.Up()
}

func TestLimiter(t *testing.T) {
	flushed := make(chan int, 1)
	l := NewLimiter(50*time.Millisecond, func(n int) { flushed <- n })
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for range 9 {
		if ok, _ := l.Allow(); ok {
			t.Fatal("let through within the interval")
		}
	}
	select {
	case n := <-flushed:
		if n != 9 {
			t.Fatalf("flushed %d, want 9", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held-back events never reported")
	}
	// Reported once: the next event after the interval starts afresh.
	time.Sleep(60 * time.Millisecond)
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatalf("after flush: %v %d", ok, n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
