package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func publishJSON(h *harness, body []byte) {
	h.rabbit.Publish(h.queue, amqp.Publishing{ContentType: "application/json", Body: body})
}

// Every idempotency sequence of BabelQueue's conformance suite, each
// delivery published to a real queue, the handler's outcome played by the
// app's status (ok → 200, throw → 400, dead-lettered so the id stays
// unmarked), effects counted at the app.
func TestBabelQueueIdempotencySequences(t *testing.T) {
	cases := testutil.IdempotencySequences(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			var dlq string
			h := newHarness(t, nil)
			dlq = h.rabbit.Queue("dptest.dlq.", nil)
			h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
			p := h.start()
			h.replaySequence(p, c, 10*time.Second, func(i int, id string) {
				publishJSON(h, envelope(id, fmt.Sprint(i)))
			})
			p.stop(t)
			if n := h.rabbit.Ready(h.queue); n != 0 {
				t.Fatalf("queue holds %d messages after the sequence; every delivery must be acked", n)
			}
		})
	}
}

// Every fixture, valid or not, reaches the app byte for byte. Several
// fixtures share one meta.id, so each key is forgotten before its fixture
// is published (an operator's replay).
func TestFixturesReachAppByteForByte(t *testing.T) {
	dir := testutil.BabelQueueDir(t)
	files, _ := filepath.Glob(filepath.Join(dir, "fixtures", "*.json"))
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	h := newHarness(t, nil)
	p := h.start()
	for i, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var env struct{ Meta struct{ ID string } }
		_ = json.Unmarshal(body, &env)
		if _, err := p.d.Store().Forget(context.Background(), storedKey(env.Meta.ID)); err != nil {
			t.Fatal(err)
		}
		publishJSON(h, body)
		testutil.Eventually(t, 10*time.Second, filepath.Base(f)+" forwarded", func() bool { return p.result(t, "forwarded") == float64(i+1) })
		r := h.app.Requests()[i]
		if !bytes.Equal(r.Body, body) {
			t.Errorf("%s: body changed on the way:\n got %q\nwant %q", filepath.Base(f), r.Body, body)
		}
		if r.Key != env.Meta.ID || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Idempotency-Key %q Content-Type %q", filepath.Base(f), r.Key, r.Header.Get("Content-Type"))
		}
	}
}

// The request carries the contract's headers.
func TestForwardedHeaders(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.App.HeaderAllowlist = []string{"x-tenant"}
		c.Sources[0].Path = "/hooks/orders"
	})
	p := h.start()
	h.rabbit.Publish(h.queue, amqp.Publishing{
		Body:    envelope("hdr-1", ""),
		Headers: amqp.Table{"x-tenant": "acme", "x-secret": "no", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	})
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	r := h.app.Requests()[0]
	checks := map[string]string{
		"Idempotency-Key":      "hdr-1",
		"X-Dedupe-Attempt":     "1",
		"Content-Type":         "application/json", // no content_type property, a JSON body
		"X-Dedupe-Source":      "orders",
		"X-Dedupe-Queue":       h.queue,
		"X-Dedupe-Redelivered": "false",
		"X-Tenant":             "acme",
		"X-Secret":             "",
		"Traceparent":          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	for k, v := range checks {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if r.Path != "/hooks/orders" {
		t.Errorf("path = %q", r.Path)
	}
}

// The same message published twice at once, to one queue read by two
// proxies: one forward, both deliveries acked, queue empty.
func TestConcurrentDuplicateTwoProxies(t *testing.T) {
	h := newHarness(t, nil)
	h.app.SetRespond(func(*testutil.Request, int) int {
		time.Sleep(300 * time.Millisecond) // both copies arrive while the first is in flight
		return http.StatusOK
	})
	p1, p2 := h.start(), h.start()
	const keys = 20
	for i := range keys {
		body := envelope(fmt.Sprintf("twin-%d", i), "")
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); publishJSON(h, body) }()
		}
		wg.Wait()
	}
	testutil.Eventually(t, 30*time.Second, "both copies of every key settled", func() bool {
		return p1.result(t, "forwarded")+p2.result(t, "forwarded")+p1.result(t, "duplicate")+p2.result(t, "duplicate") == 2*keys
	})
	for k, n := range h.app.Effects() {
		if n != 1 {
			t.Errorf("key %s effected %d times", k, n)
		}
	}
	if n := len(h.app.Effects()); n != keys {
		t.Errorf("%d keys effected, want %d", n, keys)
	}
	p1.stop(t)
	p2.stop(t)
	if n := h.rabbit.Ready(h.queue); n != 0 {
		t.Fatalf("queue holds %d messages", n)
	}
}

// 503 then 200: forwarded twice, committed once, acked once.
func TestRetryThenSuccess(t *testing.T) {
	h := newHarness(t, nil)
	h.app.SetRespond(func(_ *testutil.Request, n int) int {
		if n == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	p := h.start()
	publishJSON(h, envelope("retry-1", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	reqs := h.app.Requests()
	if len(reqs) != 2 || reqs[0].Attempt != "1" || reqs[1].Attempt != "2" {
		t.Fatalf("requests = %d (attempts %v), want 2 with attempts 1,2", len(reqs), attempts(reqs))
	}
	if p.event(t, "retry") != 1 {
		t.Errorf("retry events = %v", p.event(t, "retry"))
	}
	if s := h.status("retry-1"); s.State != seenset.Done {
		t.Errorf("key state = %s, want done", s.State)
	}
	p.stop(t)
	if n := h.rabbit.Ready(h.queue); n != 0 {
		t.Fatalf("queue holds %d messages", n)
	}
}

func attempts(rs []testutil.Request) []string {
	var a []string
	for _, r := range rs {
		a = append(a, r.Attempt)
	}
	return a
}

// 400: dead-lettered with the reason, key not marked, so a redrive is
// forwarded again.
func TestPermanentFailureDeadLettersAndRedrives(t *testing.T) {
	var dlq string
	h := newHarness(t, nil)
	dlq = h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	h.app.SetRespond(func(*testutil.Request, int) int { return http.StatusBadRequest })
	p := h.start()
	h.rabbit.Publish(h.queue, amqp.Publishing{Body: envelope("poison-1", ""), MessageId: "poison-1", Headers: amqp.Table{"x-tenant": "acme"}})
	testutil.Eventually(t, 10*time.Second, "dead-lettered", func() bool { return p.result(t, "dead_lettered") == 1 })
	if h.app.Count() != 1 {
		t.Fatalf("app called %d times, want 1 (permanent failures are not retried)", h.app.Count())
	}
	m, ok := h.rabbit.Get(dlq)
	if !ok {
		t.Fatal("dead-letter queue is empty")
	}
	if m.Headers["x-dedupe-reason"] != "permanent: status 400" || fmt.Sprint(m.Headers["x-dedupe-last-status"]) != "400" ||
		m.Headers["x-dedupe-original-queue"] != h.queue || fmt.Sprint(m.Headers["x-dedupe-attempts"]) != "1" ||
		m.Headers["x-tenant"] != "acme" || m.MessageId != "poison-1" {
		t.Fatalf("dead letter headers = %v, message id %q", m.Headers, m.MessageId)
	}
	if s := h.status("poison-1"); s.State != seenset.Absent {
		t.Fatalf("key state after dead letter = %s, want absent", s.State)
	}
	// Redrive: the app is fixed and the message is published again.
	h.app.SetRespond(nil)
	h.rabbit.Publish(h.queue, amqp.Publishing{Body: m.Body})
	testutil.Eventually(t, 10*time.Second, "redrive forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	if e := h.app.Effects()["poison-1"]; e != 1 {
		t.Fatalf("effects after redrive = %d", e)
	}
}

// Without a dead letter configured, a failing message is requeued, never
// dropped.
func TestNoDeadLetterRequeues(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Delivery.MaxAttempts = 2 })
	var fail sync.Mutex
	failing := true
	h.app.SetRespond(func(*testutil.Request, int) int {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	p := h.start()
	publishJSON(h, envelope("held-1", ""))
	testutil.Eventually(t, 10*time.Second, "requeued twice", func() bool { return p.result(t, "requeued") >= 2 })
	fail.Lock()
	failing = false
	fail.Unlock()
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	if p.result(t, "dead_lettered") != 0 {
		t.Fatal("dead-lettered without a dead letter")
	}
}

// A message that fails for good with no dead letter goes back to the
// queue and comes straight back; each delivery counts its attempts
// afresh, so the wait before giving it back grows with the times it came
// back, not with the attempt: the app is not sent the same message at
// backoff_initial for as long as it fails.
func TestNoDeadLetterBounceWaitGrows(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Delivery.BackoffInitial = 50 * time.Millisecond
		c.Delivery.BackoffMax = 800 * time.Millisecond
		c.Delivery.Jitter = 0
	})
	var mu sync.Mutex
	var at []time.Time
	var attempts []string
	failing := true
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		if !failing {
			return http.StatusOK
		}
		at = append(at, time.Now())
		attempts = append(attempts, r.Attempt)
		return http.StatusUnprocessableEntity
	})
	p := h.start()
	publishJSON(h, envelope("bounce-1", ""))
	const sends = 7
	testutil.Eventually(t, 20*time.Second, "sent 7 times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= sends
	})
	mu.Lock()
	failing = false
	mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "forwarded once the app takes it", func() bool { return p.result(t, "forwarded") == 1 })
	mu.Lock()
	defer mu.Unlock()
	// Only lower bounds: a loaded machine makes the gaps longer, never
	// shorter. Before the count, every gap was backoff_initial and the
	// redelivery, 50 ms and a few.
	wait := 50 * time.Millisecond
	for k := 1; k < sends; k++ {
		if gap := at[k].Sub(at[k-1]); gap < wait*9/10 {
			t.Errorf("gap before send %d = %s, want at least %s (the wait after %d bounces)", k+1, gap, wait, k)
		}
		wait = min(2*wait, 800*time.Millisecond)
	}
	for i, a := range attempts {
		if a != "1" {
			t.Errorf("send %d: X-Dedupe-Attempt %q, want 1: each delivery counts its own attempts", i+1, a)
		}
	}
	if p.result(t, "dead_lettered") != 0 {
		t.Fatal("dead-lettered without a dead letter")
	}
}

// App unreachable for 5 s: nothing acked, nothing lost; all delivered once
// it is up.
func TestAppDownThenUp(t *testing.T) {
	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	h := newHarness(t, func(c *config.Config) {
		c.App.URL = "http://" + addr
		c.Delivery.MaxAttempts = 3
	})
	p := h.start()
	const n = 30
	for i := range n {
		publishJSON(h, envelope(fmt.Sprintf("down-%d", i), ""))
	}
	time.Sleep(5 * time.Second)
	if f := p.result(t, "forwarded") + p.result(t, "duplicate") + p.result(t, "dead_lettered"); f != 0 {
		t.Fatalf("%v messages acked or dead-lettered while the app was down", f)
	}
	serveAppOn(t, h.app, addr)
	testutil.Eventually(t, 30*time.Second, "all forwarded once the app is up", func() bool { return p.result(t, "forwarded") == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
	p.stop(t)
	if r := h.rabbit.Ready(h.queue); r != 0 {
		t.Fatalf("queue holds %d messages", r)
	}
}

// Redis unreachable: nothing forwarded, nothing acked; work resumes when it
// is back.
func TestRedisDownFailsClosed(t *testing.T) {
	rs := testutil.StartRedis(t)
	h := newHarness(t, func(c *config.Config) {
		c.SeenSet.Redis.Addrs = []string{rs.Addr()}
		c.SeenSet.Redis.DialTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.ReadTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.WriteTimeout = 200 * time.Millisecond
	})
	p := h.start()
	rs.Kill()
	const n = 20
	for i := range n {
		publishJSON(h, envelope(fmt.Sprintf("rd-%d", i), ""))
	}
	testutil.Eventually(t, 10*time.Second, "store errors seen", func() bool { return p.event(t, "store_error") > 0 })
	time.Sleep(time.Second)
	if h.app.Count() != 0 {
		t.Fatalf("app called %d times while Redis was down (must fail closed)", h.app.Count())
	}
	if s := p.settled(t); s != 0 {
		t.Fatalf("%v deliveries settled while Redis was down", s)
	}
	rs.Restart()
	testutil.Eventually(t, 30*time.Second, "all forwarded after Redis is back", func() bool { return p.result(t, "forwarded") == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
}

// on_store_error: forward is the opt-in fail-open mode.
func TestRedisDownFailOpen(t *testing.T) {
	rs := testutil.StartRedis(t)
	h := newHarness(t, func(c *config.Config) {
		c.SeenSet.Redis.Addrs = []string{rs.Addr()}
		c.SeenSet.Redis.DialTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.ReadTimeout = 200 * time.Millisecond
		c.SeenSet.OnStoreError = "forward"
	})
	p := h.start()
	rs.Kill()
	publishJSON(h, envelope("fo-1", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded without the store", func() bool { return p.result(t, "forwarded") == 1 })
	if p.event(t, "store_fail_open") != 1 {
		t.Fatalf("store_fail_open = %v", p.event(t, "store_fail_open"))
	}
}

// RabbitMQ connection cut mid-stream through a relay: the proxy
// reconnects and nothing is lost or effected twice.
func TestRabbitConnectionCut(t *testing.T) {
	relay := testutil.NewRelay(t, "127.0.0.1:5672")
	h := newHarness(t, func(c *config.Config) {
		u := strings.Replace(testutil.RabbitURL(), "127.0.0.1:5672", relay.Addr(), 1)
		c.Sources[0].RabbitMQ.URL = u
	})
	h.app.SetRespond(func(*testutil.Request, int) int { time.Sleep(2 * time.Millisecond); return http.StatusOK })
	p := h.start()
	const n = 400
	go func() {
		for i := range n {
			publishJSON(h, envelope(fmt.Sprintf("cut-%d", i), ""))
		}
	}()
	for i := range 3 {
		testutil.Eventually(t, 20*time.Second, "progress before cut", func() bool { return h.app.Count() > (i+1)*n/5 })
		relay.Cut()
		testutil.Eventually(t, 10*time.Second, "reconnected", func() bool { return p.d.Ready(context.Background()) == nil })
	}
	testutil.Eventually(t, 60*time.Second, "every key effected", func() bool { return len(h.app.Effects()) == n })
	p.stop(t)
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
	if r := h.rabbit.Ready(h.queue); r != 0 {
		t.Fatalf("queue holds %d messages after the cuts", r)
	}
	if rc := testutil.Counter(t, p.d.Registry(), "dedupe_proxy_broker_reconnects_total", nil); rc < 3 {
		t.Fatalf("reconnects = %v, want >= 3", rc)
	}
}

// A message without meta.id is forwarded every time (fail-open) and
// counted.
func TestMissingKeyFailsOpen(t *testing.T) {
	h := newHarness(t, nil)
	p := h.start()
	body := []byte(`{"job":"urn:babel:orders:created","data":{"order_id":1}}`)
	publishJSON(h, body)
	publishJSON(h, body)
	publishJSON(h, []byte("not json at all"))
	testutil.Eventually(t, 10*time.Second, "forwarded 3", func() bool { return p.result(t, "forwarded") == 3 })
	if p.event(t, "no_key") != 3 {
		t.Fatalf("no_key = %v", p.event(t, "no_key"))
	}
	for _, r := range h.app.Requests() {
		if r.Key != "" {
			t.Errorf("Idempotency-Key %q sent for a message without a key", r.Key)
		}
	}
	found := false
	for _, r := range h.app.Requests() {
		found = found || bytes.Equal(r.Body, []byte("not json at all"))
	}
	if !found {
		t.Error("non-JSON body altered on the way")
	}
}

// AMQP message_id is a key rule (BabelQueue puts meta.id there too).
func TestMessageIDKeyRule(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Sources[0].Key = []string{"json:meta.id", "property:message_id"} })
	p := h.start()
	for range 2 {
		h.rabbit.Publish(h.queue, amqp.Publishing{Body: []byte("opaque"), MessageId: "mid-1"})
	}
	testutil.Eventually(t, 10*time.Second, "both acked", func() bool { return p.result(t, "forwarded")+p.result(t, "duplicate") == 2 })
	if p.result(t, "forwarded") != 1 || p.result(t, "duplicate") != 1 {
		t.Fatalf("forwarded %v duplicate %v", p.result(t, "forwarded"), p.result(t, "duplicate"))
	}
}

// SIGTERM while a forward runs: it finishes within shutdown_timeout, is
// committed and acked, and Run returns nil.
func TestShutdownFinishesInFlight(t *testing.T) {
	h := newHarness(t, nil)
	started := make(chan struct{}, 1)
	h.app.SetRespond(func(*testutil.Request, int) int {
		started <- struct{}{}
		time.Sleep(time.Second)
		return http.StatusOK
	})
	p := h.start()
	publishJSON(h, envelope("drain-1", ""))
	<-started
	p.stop(t)
	if p.result(t, "forwarded") != 1 {
		t.Fatalf("forwarded = %v", p.result(t, "forwarded"))
	}
	if s := h.status("drain-1"); s.State != seenset.Done {
		t.Fatalf("state = %s", s.State)
	}
	if r := h.rabbit.Ready(h.queue); r != 0 {
		t.Fatalf("queue holds %d", r)
	}
}

// SIGTERM with a forward that outlives shutdown_timeout: it is cut off
// and requeued, not dead-lettered, and its key stays claimed until
// app.max_request_time from the request's start, while the app may go on
// with it.
func TestShutdownTimeoutRequeues(t *testing.T) {
	var dlq string
	h := newHarness(t, func(c *config.Config) {
		c.ShutdownTimeout = 300 * time.Millisecond
		c.App.MaxRequestTime = 20 * time.Second
	})
	dlq = h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	started := make(chan struct{}, 1)
	h.app.SetRespond(func(*testutil.Request, int) int {
		started <- struct{}{}
		time.Sleep(3 * time.Second)
		return http.StatusOK
	})
	p := h.start()
	publishJSON(h, envelope("slow-1", ""))
	<-started
	p.stop(t)
	if p.result(t, "requeued") != 1 || p.result(t, "dead_lettered") != 0 {
		t.Fatalf("requeued %v dead-lettered %v", p.result(t, "requeued"), p.result(t, "dead_lettered"))
	}
	// The app may still be working on it: the key stays claimed until
	// the request could have ended, so the redelivery is not sent while
	// the first may run.
	if s := h.status("slow-1"); s.State != seenset.Inflight || s.TTL <= h.cfg.SeenSet.Lease || s.TTL > h.cfg.App.MaxRequestTime {
		t.Fatalf("state = %+v, want inflight past the lease (%s), up to app.max_request_time (%s)", s, h.cfg.SeenSet.Lease, h.cfg.App.MaxRequestTime)
	}
	if r := h.rabbit.Ready(h.queue); r != 1 {
		t.Fatalf("queue holds %d, want the requeued message", r)
	}
}

// The same meta.id on two sources of one consumer is two jobs: each
// reaches the app on its own path. Sources that name one key_space share
// their keys on purpose: then it is one job.
func TestSameIDOnTwoSources(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			h := newHarness(t, nil)
			returns := h.rabbit.Queue("dptest.returns.", nil)
			second := h.cfg.Sources[0]
			second.Name, second.Path, second.RabbitMQ.Queue = "returns", "/returns", returns
			h.cfg.Sources[0].Path = "/orders"
			if shared {
				h.cfg.Sources[0].KeySpace, second.KeySpace = "money", "money"
			}
			h.cfg.Sources = append(h.cfg.Sources, second)
			if err := h.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			p := h.start()
			publishJSON(h, envelope("same-1", "order"))
			testutil.Eventually(t, 10*time.Second, "first settled", func() bool { return p.settled(t) == 1 })
			h.rabbit.Publish(returns, amqp.Publishing{ContentType: "application/json", Body: envelope("same-1", "return")})
			testutil.Eventually(t, 10*time.Second, "second settled", func() bool { return p.settled(t) == 2 })
			var paths []string
			for _, r := range h.app.Requests() {
				paths = append(paths, r.Path)
			}
			want := "[/orders /returns]"
			if shared {
				want = "[/orders]"
			}
			if got := fmt.Sprint(paths); got != want {
				t.Fatalf("app saw %s, want %s", got, want)
			}
			if h.rabbit.Ready(h.queue) != 0 || h.rabbit.Ready(returns) != 0 {
				t.Fatal("a queue still holds a message")
			}
		})
	}
}

// The app takes longer than app.timeout and the lease. The slow request
// is not abandoned: its late 2xx is taken, and neither this replica nor
// the other sends the key again meanwhile.
func TestSlowRequestIsNotOverlapped(t *testing.T) {
	var mu sync.Mutex
	running, most, calls := 0, 0, 0
	h := newHarness(t, func(c *config.Config) { c.App.Timeout = 300 * time.Millisecond; c.SeenSet.Lease = time.Second })
	h.app.SetRespond(func(*testutil.Request, int) int {
		mu.Lock()
		running++
		calls++
		most = max(most, running)
		first := calls == 1
		mu.Unlock()
		if first {
			time.Sleep(1500 * time.Millisecond)
		}
		mu.Lock()
		running--
		mu.Unlock()
		return http.StatusOK
	})
	a, b := h.start(), h.start()
	publishJSON(h, envelope("slow-2", ""))
	testutil.Eventually(t, 20*time.Second, "acked", func() bool { return a.result(t, "forwarded")+b.result(t, "forwarded") == 1 })
	mu.Lock()
	defer mu.Unlock()
	if most != 1 || h.app.Count() != 1 {
		t.Fatalf("%d requests, at most %d at once; want 1, the slow one whose late 2xx is taken", h.app.Count(), most)
	}
	if n := a.event(t, "slow") + b.event(t, "slow"); n != 1 {
		t.Errorf("slow events = %v, want 1", n)
	}
}

// A restarting app (connection refused) does not exhaust max_attempts:
// with a dead letter configured, nothing is dead-lettered while the app is
// away, and everything is delivered once when it is back.
func TestAppRestartDoesNotDeadLetter(t *testing.T) {
	port := testutil.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var dlq string
	h := newHarness(t, func(c *config.Config) {
		c.App.URL = "http://" + addr
		c.Delivery.MaxAttempts = 2
	})
	dlq = h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	p := h.start()
	for i := range 10 {
		publishJSON(h, envelope(fmt.Sprintf("restart-%d", i), ""))
	}
	time.Sleep(3 * time.Second)
	if d := p.result(t, "dead_lettered"); d != 0 {
		t.Fatalf("%v messages dead-lettered while the app was merely unreachable", d)
	}
	serveAppOn(t, h.app, addr)
	testutil.Eventually(t, 20*time.Second, "all forwarded", func() bool { return p.result(t, "forwarded") == 10 })
	if _, ok := h.rabbit.Get(dlq); ok {
		t.Fatal("dead-letter queue is not empty")
	}
}

// What most REST handlers answer, a 2xx with a "status" word that is
// not Dapr's, is a success: each message reaches the app once and is
// acked, not retried five times and dead-lettered.
func TestRESTStatusWordsAreSuccess(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	words := map[string]string{"ok-1": `{"status":"ok"}`, "created-1": `{"status":"created","id":7}`, "accepted-1": `{"status":"Accepted"}`}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if key == "created-1" {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = io.WriteString(w, words[key])
	}))
	t.Cleanup(app.Close)
	h := newHarness(t, func(c *config.Config) { c.App.URL = app.URL })
	p := h.start()
	for id := range words {
		publishJSON(h, envelope(id, ""))
	}
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 3 })
	p.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for id := range words {
		if seen[id] != 1 {
			t.Errorf("%s reached the app %d times, want 1", id, seen[id])
		}
	}
	if n := p.event(t, "retry"); n != 0 {
		t.Errorf("retries = %v, want 0", n)
	}
	if n := h.rabbit.Ready(h.queue); n != 0 {
		t.Fatalf("queue holds %d messages", n)
	}
}
