package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// harness is one test's world: its own queue, its own key prefix, a
// recording app, and proxies started in-process from a real Config.
type harness struct {
	t      *testing.T
	rabbit *testutil.Rabbit
	queue  string
	app    *testutil.App
	cfg    config.Config
	// logger, when set, replaces testLogger (tests that read the log).
	logger *slog.Logger
}

func newHarness(t *testing.T, mutate func(*config.Config)) *harness {
	t.Helper()
	h := &harness{t: t, rabbit: testutil.NewRabbit(t), app: testutil.NewApp(t)}
	h.queue = h.rabbit.Queue("dptest.", nil)
	cfg, src := testConfig(h.app.URL)
	src.RabbitMQ.Queue = h.queue
	src.RabbitMQ.ReconnectInitial = 50 * time.Millisecond
	src.RabbitMQ.ReconnectMax = 500 * time.Millisecond
	src.RabbitMQ.Workers = 8
	src.RabbitMQ.Prefetch = 16
	h.finish(cfg, src, mutate)
	return h
}

// finish installs the one source, applies the test's changes, validates
// and registers the key cleanup.
func (h *harness) finish(cfg config.Config, src config.Source, mutate func(*config.Config)) {
	h.t.Helper()
	cfg.Sources = []config.Source{src}
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		h.t.Fatalf("test config invalid: %v", err)
	}
	h.cfg = cfg
	h.t.Cleanup(func() { h.cleanupKeys() })
}

// replaySequence plays one BabelQueue idempotency sequence through a
// running proxy: the app answers 400 for a "throw" (dead-lettered, id
// unmarked) and 200 otherwise; send publishes delivery i. It checks run /
// skip per delivery and the effect total, and returns how many runs threw.
func (h *harness) replaySequence(p *proxy, c testutil.Sequence, timeout time.Duration, send func(i int, id string)) (throws int) {
	t := h.t
	var mu sync.Mutex
	var outcome string
	h.app.SetRespond(func(*testutil.Request, int) int {
		mu.Lock()
		defer mu.Unlock()
		if outcome == "throw" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	effects := 0
	for i, d := range c.Deliveries {
		if d.ForgetBefore {
			if _, err := p.d.Store().Forget(context.Background(), storedKey(d.MetaID)); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		outcome = d.Outcome
		mu.Unlock()
		before, settled := h.app.Count(), p.settled(t)
		send(i, d.MetaID)
		testutil.Eventually(t, timeout, fmt.Sprintf("delivery %d settled", i), func() bool { return p.settled(t) == settled+1 })
		ran := h.app.Count() - before
		switch d.ExpectEffect {
		case "run":
			if ran != 1 {
				t.Fatalf("delivery %d (%q): app called %d times, want 1", i, d.MetaID, ran)
			}
			effects++
			if d.Outcome == "throw" {
				throws++
			}
		case "skip":
			if ran != 0 {
				t.Fatalf("delivery %d (%q): app called %d times, want 0 (skip)", i, d.MetaID, ran)
			}
		}
	}
	if effects != c.ExpectedEffects || h.app.Count() != c.ExpectedEffects {
		t.Fatalf("effects = %d, app requests = %d, want %d", effects, h.app.Count(), c.ExpectedEffects)
	}
	return throws
}

func (h *harness) cleanupKeys() {
	if h.cfg.SeenSet.Backend != "redis" || h.cfg.SeenSet.Redis.Addrs[0] != testutil.RedisAddr() {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, h.cfg.SeenSet.Redis.Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// testConfig is the defaults with short timeouts and backoffs, this
// test's own Redis key prefix, and one source named "orders".
func testConfig(appURL string) (config.Config, config.Source) {
	cfg := config.Default()
	cfg.Consumer = "test"
	cfg.Admin.Listen = ""
	cfg.ShutdownTimeout = 10 * time.Second
	cfg.App.URL = appURL
	cfg.App.Timeout = 5 * time.Second
	cfg.SeenSet.Lease = 3 * time.Second
	cfg.SeenSet.Redis.Addrs = []string{testutil.RedisAddr()}
	cfg.SeenSet.Redis.Prefix = testutil.UniqueName("dptest:") + ":"
	cfg.Delivery.BackoffInitial = 20 * time.Millisecond
	cfg.Delivery.BackoffMax = 200 * time.Millisecond
	cfg.Delivery.BusyDelay = 100 * time.Millisecond
	src := config.DefaultSource()
	src.Name = "orders"
	return cfg, src
}

// serveAppOn starts the recording app on addr, a port the proxy was
// already pointed at while nothing listened there (the app "comes up").
func serveAppOn(t *testing.T, app *testutil.App, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(app.Config.Handler)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
}

// proxy is a running in-process daemon.
type proxy struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
}

func (h *harness) start() *proxy {
	h.t.Helper()
	cfg := h.cfg
	log := h.logger
	if log == nil {
		log = testLogger(h.t)
	}
	d, err := New(&cfg, Deps{Logger: log})
	if err != nil {
		h.t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- d.Run(ctx) }()
	h.t.Cleanup(func() { p.stop(h.t) })
	testutil.Eventually(h.t, 10*time.Second, "proxy ready", func() bool {
		return d.Ready(context.Background()) == nil
	})
	return p
}

// stop is SIGTERM for an in-process proxy; it fails the test on an error.
func (p *proxy) stop(t testing.TB) {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("daemon.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("daemon did not stop within 30s")
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("DEDUPE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (p *proxy) settled(t testing.TB) float64 {
	return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_messages_total", nil)
}

func (p *proxy) result(t testing.TB, result string) float64 {
	return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_messages_total", map[string]string{"result": result})
}

func (p *proxy) event(t testing.TB, event string) float64 {
	return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_events_total", map[string]string{"event": event})
}

// envelope is a BabelQueue envelope with the given meta.id ("" leaves it
// empty, nil-like ids are the caller's business).
func envelope(id string, extra string) []byte {
	m := map[string]any{
		"job":      "urn:babel:orders:created",
		"trace_id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		"data":     map[string]any{"order_id": 1042, "note": extra},
		"meta":     map[string]any{"id": id, "schema_version": 1, "lang": "go"},
		"attempts": 0,
	}
	b, _ := json.Marshal(m)
	return b
}

// storedKey is a message key as the harness' source stores it: consumer
// "test", source "orders" (its key space).
func storedKey(key string) string { return "test:orders:" + key }

func (h *harness) status(key string) seenset.Status {
	h.t.Helper()
	st, err := NewStore(&h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Status(context.Background(), storedKey(key))
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}
