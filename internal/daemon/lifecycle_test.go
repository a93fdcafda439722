package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A source that stops by itself (a fault it cannot retry) must not leave
// a process that consumes nothing while its probes say ok: Run returns
// the error (main exits non-zero) and /healthz reports it meanwhile.
func TestSourceFailureStopsTheProcess(t *testing.T) {
	h := newHarness(t, nil)
	d, err := New(&h.cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	fails := make(chan struct{})
	d.sources = append(d.sources, source{src: d.sources[0].src, run: func(context.Context) error {
		<-fails
		return errors.New("consumer cancelled by the broker")
	}})
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { return d.Ready(context.Background()) == nil })
	rec := httptest.NewRecorder()
	d.adminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz before = %d", rec.Code)
	}
	close(fails)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "consumer cancelled by the broker") || !strings.Contains(err.Error(), "source orders") {
			t.Fatalf("Run = %v, want the source's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after a source failed")
	}
	rec = httptest.NewRecorder()
	d.adminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "consumer cancelled") {
		t.Fatalf("healthz after = %d %q, want 503 with the reason", rec.Code, rec.Body.String())
	}
	// A process on its way out is not ready, whatever its dependencies say.
	for _, path := range []string{"/readyz", "/readyz?deps=1"} {
		rec = httptest.NewRecorder()
		d.adminHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "process: stopping: source orders: consumer cancelled") {
			t.Fatalf("%s after = %d %q, want 503 with the reason", path, rec.Code, rec.Body.String())
		}
	}
}

// stuckStore never returns from Commit, whatever its context says: a
// handler that no Abort can end.
type stuckStore struct{ *seenset.Memory }

func (stuckStore) Commit(context.Context, string, string, time.Duration) error { select {} }

// The wait after Abort is bounded: a handler stuck beyond it does not keep
// the process from exiting (non-zero, saying why).
func TestShutdownAbortWaitIsBounded(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.ShutdownTimeout = 200 * time.Millisecond })
	d, err := New(&h.cfg, Deps{Logger: testLogger(t), Store: stuckStore{seenset.NewMemory()}})
	if err != nil {
		t.Fatal(err)
	}
	d.abortGrace = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { return d.Ready(context.Background()) == nil })
	publishJSON(h, envelope("stuck-1", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return h.app.Count() == 1 })
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not stop within") {
			t.Fatalf("Run = %v, want the bounded-wait error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return: the wait after Abort is unbounded")
	}
}

// A New that fails half-way undoes what it built — the Redis store with
// its batcher goroutines, the app's connection pool, the sources — so a
// caller that retries New leaks nothing.
func TestNewFailureUndoesWhatItBuilt(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Admin.TokenFile = filepath.Join(t.TempDir(), "missing") })
	opts := goleak.IgnoreCurrent()
	for range 3 {
		if _, err := New(&h.cfg, Deps{Logger: testLogger(t)}); err == nil || !strings.Contains(err.Error(), "admin.token_file") {
			t.Fatalf("New = %v, want the token file's error", err)
		}
	}
	goleak.VerifyNone(t, opts)
}
