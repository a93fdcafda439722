package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Tests of issue 5, "Operate it": metrics, /readyz, the key API, health
// gating, failure log lines, pprof.

func withAdmin(c *config.Config) { c.Admin.Listen = "127.0.0.1:0" }

// adminDo sends one request to the proxy's admin listener.
func adminDo(t testing.TB, p *proxy, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.d.AdminAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A known sequence of messages gives known metric values; every series a
// source has exists at 0 before the first message.
func TestMetricsAfterKnownSequence(t *testing.T) {
	h := newHarness(t, withAdmin)
	dlq := h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	var mu sync.Mutex
	seen := map[string]int{}
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Key]++
		switch {
		case r.Key == "seq-retry" && seen[r.Key] == 1:
			return http.StatusServiceUnavailable
		case r.Key == "seq-bad":
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	p := h.start()
	reg := p.d.Registry()
	src := map[string]string{"source": "orders"}
	with := func(k, v string) map[string]string { return map[string]string{"source": "orders", k: v} }

	for _, r := range []string{"forwarded", "duplicate", "dead_lettered", "requeued"} {
		if v, ok := testutil.Series(t, reg, "dedupe_proxy_messages_total", with("result", r)); !ok || v != 0 {
			t.Errorf("messages_total{result=%s} = %v (exists %v) before any message, want 0", r, v, ok)
		}
	}
	for _, e := range []string{"no_key", "busy", "retry", "failed", "store_error", "commit_failed", "app_wait"} {
		if v, ok := testutil.Series(t, reg, "dedupe_proxy_events_total", with("event", e)); !ok || v != 0 {
			t.Errorf("events_total{event=%s} = %v (exists %v) before any message, want 0", e, v, ok)
		}
	}

	steps := []struct {
		body []byte
		what string
	}{
		{envelope("seq-1", ""), "first"},
		{envelope("seq-1", ""), "duplicate"},
		{[]byte(`{"no":"key"}`), "no key"},
		{envelope("seq-retry", ""), "503 then 200"},
		{envelope("seq-bad", ""), "400"},
	}
	for i, s := range steps {
		publishJSON(h, s.body)
		testutil.Eventually(t, 10*time.Second, s.what+" settled", func() bool { return p.settled(t) == float64(i+1) })
	}
	testutil.Eventually(t, 5*time.Second, "nothing in flight", func() bool {
		v, _ := testutil.Series(t, reg, "dedupe_proxy_inflight_messages", src)
		return v == 0
	})

	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"dedupe_proxy_messages_total", with("result", "forwarded"), 3},
		{"dedupe_proxy_messages_total", with("result", "duplicate"), 1},
		{"dedupe_proxy_messages_total", with("result", "dead_lettered"), 1},
		{"dedupe_proxy_messages_total", with("result", "requeued"), 0},
		{"dedupe_proxy_events_total", with("event", "no_key"), 1},
		{"dedupe_proxy_events_total", with("event", "retry"), 1},
		{"dedupe_proxy_events_total", with("event", "failed"), 1},
		{"dedupe_proxy_events_total", with("event", "busy"), 0},
		{"dedupe_proxy_events_total", with("event", "store_error"), 0},
		{"dedupe_proxy_app_responses_total", with("class", "2xx"), 3},
		{"dedupe_proxy_app_responses_total", with("class", "4xx"), 1},
		{"dedupe_proxy_app_responses_total", with("class", "5xx"), 1},
		{"dedupe_proxy_app_responses_total", with("class", "3xx"), 0},
		{"dedupe_proxy_app_responses_total", with("class", "error"), 0},
		{"dedupe_proxy_forward_duration_seconds", src, 5},
		// seq-1 twice, seq-retry twice (claimed again after the release), seq-bad.
		{"dedupe_proxy_seenset_duration_seconds", map[string]string{"op": "claim"}, 5},
		{"dedupe_proxy_seenset_duration_seconds", map[string]string{"op": "commit"}, 2},
		{"dedupe_proxy_seenset_duration_seconds", map[string]string{"op": "release"}, 2},
		{"dedupe_proxy_seenset_errors_total", map[string]string{"op": "claim"}, 0},
		{"dedupe_proxy_inflight_messages", src, 0},
		{"dedupe_proxy_broker_connected", src, 1},
		{"dedupe_proxy_broker_reconnects_total", src, 0},
		{"dedupe_proxy_app_up", map[string]string{}, 1},
	}
	for _, w := range want {
		if v, ok := testutil.Series(t, reg, w.name, w.labels); !ok || v != w.value {
			t.Errorf("%s%v = %v (exists %v), want %v", w.name, w.labels, v, ok, w.value)
		}
	}

	// The same numbers on /metrics, in the exposition format.
	code, body := adminDo(t, p, "GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range []string{
		`dedupe_proxy_messages_total{result="forwarded",source="orders"} 3`,
		`dedupe_proxy_events_total{event="no_key",source="orders"} 1`,
		`dedupe_proxy_app_responses_total{class="5xx",source="orders"} 1`,
		`dedupe_proxy_forward_duration_seconds_count{source="orders"} 5`,
		`dedupe_proxy_broker_connected{source="orders"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	// Never a key as a label.
	if strings.Contains(body, "seq-1") {
		t.Error("/metrics mentions a message key")
	}
}

// /readyz names each check and keeps answering 200 with Redis down: the
// sidecar's readiness is its app pod's, and a Redis blip must not pull
// every replica out of the app's Service. /readyz?deps=1 flips with it.
func TestReadyzFlipsWithRedis(t *testing.T) {
	rs := testutil.StartRedis(t)
	h := newHarness(t, func(c *config.Config) {
		withAdmin(c)
		c.SeenSet.Redis.Addrs = []string{rs.Addr()}
		c.SeenSet.Redis.DialTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.ReadTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.WriteTimeout = 200 * time.Millisecond
	})
	p := h.start()
	// The private server keeps nothing across a restart: a warning that
	// leaves the proxy ready.
	want := "source orders: ok\nseenset: ok (redis standalone, 1 master, 0 replicas)\nseenset durability: warning: redis " + rs.Addr() +
		" has neither AOF nor RDB snapshots: a restart without a replica taking over empties the seen-set," +
		" and every message delivered again after it is forwarded again; set appendonly yes\n"
	for _, path := range []string{"/readyz", "/readyz?deps=1"} {
		if code, body := adminDo(t, p, "GET", path, ""); code != http.StatusOK || body != want {
			t.Fatalf("%s = %d %q, want 200 %q", path, code, body, want)
		}
	}
	rs.Kill()
	var code int
	var body string
	testutil.Eventually(t, 10*time.Second, "/readyz?deps=1 503 with Redis down", func() bool {
		code, body = adminDo(t, p, "GET", "/readyz?deps=1", "")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "source orders: ok\nseenset: store unavailable: ") {
		t.Fatalf("/readyz?deps=1 body with Redis down = %q", body)
	}
	code, body = adminDo(t, p, "GET", "/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "source orders: ok\nseenset: store unavailable: ") {
		t.Fatalf("/readyz with Redis down = %d %q, want 200 with the detail", code, body)
	}
	if v, _ := testutil.Series(t, p.d.Registry(), "dedupe_proxy_seenset_errors_total", map[string]string{"op": "ping"}); v == 0 {
		t.Error("failed pings not counted in seenset_errors_total{op=ping}")
	}
	rs.Restart()
	testutil.Eventually(t, 10*time.Second, "/readyz?deps=1 200 with Redis back", func() bool {
		code, _ = adminDo(t, p, "GET", "/readyz?deps=1", "")
		return code == http.StatusOK
	})
}

// A deps value that is not a boolean is refused, not read as "no": a
// typo must not make a strict probe lax.
func TestReadyzDepsValue(t *testing.T) {
	h := newHarness(t, withAdmin)
	p := h.start()
	for path, want := range map[string]int{
		"/readyz?deps=0": http.StatusOK, "/readyz?deps=true": http.StatusOK, "/readyz?deps=": http.StatusOK,
		"/readyz?deps=yes": http.StatusBadRequest, "/readyz?deps=strict": http.StatusBadRequest,
	} {
		if code, body := adminDo(t, p, "GET", path, ""); code != want {
			t.Errorf("%s = %d %q, want %d", path, code, body, want)
		}
	}
}

// /readyz and broker_connected flip with the broker connection.
func TestReadyzFlipsWithBroker(t *testing.T) {
	relay := testutil.NewRelay(t, "127.0.0.1:5672")
	h := newHarness(t, func(c *config.Config) {
		withAdmin(c)
		c.Sources[0].RabbitMQ.URL = strings.Replace(testutil.RabbitURL(), "127.0.0.1:5672", relay.Addr(), 1)
	})
	p := h.start()
	reg := p.d.Registry()
	src := map[string]string{"source": "orders"}
	if v, _ := testutil.Series(t, reg, "dedupe_proxy_broker_connected", src); v != 1 {
		t.Fatalf("broker_connected = %v, want 1", v)
	}
	relay.SetDown(true)
	relay.Cut()
	var body string
	testutil.Eventually(t, 10*time.Second, "/readyz?deps=1 503 with the broker gone", func() bool {
		var code int
		code, body = adminDo(t, p, "GET", "/readyz?deps=1", "")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "source orders: broker: not connected\n") || !strings.Contains(body, "seenset: ok (redis standalone, 1 master, ") {
		t.Fatalf("/readyz?deps=1 body with the broker gone = %q", body)
	}
	// The app's Service keeps the pod: /readyz reports the process.
	if code, body := adminDo(t, p, "GET", "/readyz", ""); code != http.StatusOK || !strings.Contains(body, "source orders: broker: not connected\n") {
		t.Fatalf("/readyz with the broker gone = %d %q, want 200 with the detail", code, body)
	}
	if v, _ := testutil.Series(t, reg, "dedupe_proxy_broker_connected", src); v != 0 {
		t.Fatalf("broker_connected = %v while disconnected, want 0", v)
	}
	if _, body := adminDo(t, p, "GET", "/metrics", ""); !strings.Contains(body, `dedupe_proxy_broker_connected{source="orders"} 0`+"\n") {
		t.Fatal("/metrics does not show broker_connected 0 while disconnected")
	}
	relay.SetDown(false)
	testutil.Eventually(t, 10*time.Second, "/readyz?deps=1 200 with the broker back", func() bool {
		code, _ := adminDo(t, p, "GET", "/readyz?deps=1", "")
		return code == http.StatusOK
	})
	if v, _ := testutil.Series(t, reg, "dedupe_proxy_broker_connected", src); v != 1 {
		t.Fatalf("broker_connected = %v after reconnecting, want 1", v)
	}
	if v, _ := testutil.Series(t, reg, "dedupe_proxy_broker_reconnects_total", src); v < 1 {
		t.Fatalf("broker_reconnects_total = %v, want >= 1", v)
	}
}

// The key API is off without a token and needs the right one.
func TestAdminKeysAPIAuth(t *testing.T) {
	t.Run("no token: 404", func(t *testing.T) {
		p := newHarness(t, withAdmin).start()
		for _, m := range []string{"GET", "DELETE"} {
			if code, _ := adminDo(t, p, m, "/v1/keys/k", "Bearer x"); code != http.StatusNotFound {
				t.Errorf("%s without a configured token = %d, want 404", m, code)
			}
		}
	})
	t.Run("token", func(t *testing.T) {
		p := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Token = "s3cret-token" }).start()
		for _, tc := range []struct {
			method, auth string
			want         int
		}{
			{"GET", "", http.StatusUnauthorized},
			{"DELETE", "", http.StatusUnauthorized},
			{"GET", "Bearer wrong", http.StatusUnauthorized},
			{"GET", "Bearer s3cret-toke", http.StatusUnauthorized},
			{"GET", "Bearer s3cret-token-and-more", http.StatusUnauthorized},
			{"DELETE", "Bearer wrong", http.StatusUnauthorized},
			{"GET", "Basic s3cret-token", http.StatusUnauthorized},
			{"GET", "s3cret-token", http.StatusUnauthorized},
			{"GET", "Bearer s3cret-token", http.StatusOK},
			{"GET", "bearer s3cret-token", http.StatusOK},
			{"DELETE", "Bearer s3cret-token", http.StatusOK},
			{"PUT", "Bearer s3cret-token", http.StatusMethodNotAllowed},
		} {
			code, body := adminDo(t, p, tc.method, "/v1/keys/auth-1", tc.auth)
			if code != tc.want {
				t.Errorf("%s with Authorization %q = %d %s, want %d", tc.method, tc.auth, code, body, tc.want)
			}
		}
		// Health and metrics need no token.
		if code, _ := adminDo(t, p, "GET", "/metrics", ""); code != http.StatusOK {
			t.Errorf("/metrics = %d", code)
		}
	})
	t.Run("token file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte("  from-a-file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.TokenFile = f }).start()
		if code, _ := adminDo(t, p, "GET", "/v1/keys/k", "Bearer from-a-file"); code != http.StatusOK {
			t.Errorf("token from file refused: %d", code)
		}
	})
	t.Run("empty token file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "token")
		_ = os.WriteFile(f, []byte("\n"), 0o600)
		h := newHarness(t, func(c *config.Config) { c.Admin.TokenFile = f })
		if _, err := New(&h.cfg, Deps{Logger: testLogger(t)}); err == nil || !strings.Contains(err.Error(), "admin.token_file") {
			t.Fatalf("New with an empty token file: %v", err)
		}
	})
}

type keyStatus struct {
	Key        string  `json:"key"`
	Space      string  `json:"space"`
	State      string  `json:"state"`
	TTLSeconds float64 `json:"ttl_seconds"`
}

func getKey(t testing.TB, p *proxy, key string) keyStatus {
	t.Helper()
	code, body := adminDo(t, p, "GET", "/v1/keys/"+key, "Bearer tok")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/keys/%s = %d %s", key, code, body)
	}
	var s keyStatus
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("GET /v1/keys/%s: %v in %q", key, err, body)
	}
	return s
}

// Status of absent, inflight and done keys; forget turns the next
// delivery of a done key into a forward.
func TestAdminKeysStatusAndForget(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Token = "tok" })
	p := h.start()

	if s := getKey(t, p, "never-seen"); s != (keyStatus{Key: "never-seen", Space: "orders", State: "absent"}) {
		t.Errorf("absent key: %+v", s)
	}
	// Inflight: another replica's claim, made directly on the store; the
	// API namespaces the key with the consumer as the pipeline does.
	if _, err := p.d.Store().Claim(context.Background(), storedKey("in/flight"), "other-replica", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := getKey(t, p, "in/flight"); s.State != "inflight" || s.TTLSeconds <= 0 || s.TTLSeconds > 3 {
		t.Errorf("inflight key: %+v", s)
	}

	publishJSON(h, envelope("replay-1", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	if s := getKey(t, p, "replay-1"); s.State != "done" || s.TTLSeconds < 86000 || s.TTLSeconds > 86400 {
		t.Errorf("done key: %+v", s)
	}
	publishJSON(h, envelope("replay-1", ""))
	testutil.Eventually(t, 10*time.Second, "duplicate", func() bool { return p.result(t, "duplicate") == 1 })

	code, body := adminDo(t, p, "DELETE", "/v1/keys/replay-1", "Bearer tok")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"key":"replay-1","space":"orders","forgotten":true}` {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if s := getKey(t, p, "replay-1"); s.State != "absent" {
		t.Errorf("after forget: %+v", s)
	}
	publishJSON(h, envelope("replay-1", ""))
	testutil.Eventually(t, 10*time.Second, "forwarded again after forget", func() bool { return p.result(t, "forwarded") == 2 })
	if n := h.app.Effects()["replay-1"]; n != 2 {
		t.Fatalf("replay-1 effected %d times, want 2 (once, then once after the forget)", n)
	}
	code, body = adminDo(t, p, "DELETE", "/v1/keys/never-seen", "Bearer tok")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"key":"never-seen","space":"orders","forgotten":false}` {
		t.Fatalf("DELETE absent = %d %s", code, body)
	}
	if code, _ := adminDo(t, p, "GET", "/v1/keys/"+strings.Repeat("x", 513), "Bearer tok"); code != http.StatusBadRequest {
		t.Errorf("over-long key = %d, want 400", code)
	}
	if code, _ := adminDo(t, p, "GET", "/v1/keys/", "Bearer tok"); code != http.StatusBadRequest {
		t.Errorf("empty key = %d, want 400", code)
	}
	if v, _ := testutil.Series(t, p.d.Registry(), "dedupe_proxy_seenset_duration_seconds", map[string]string{"op": "forget"}); v != 2 {
		t.Errorf("forget ops observed = %v, want 2", v)
	}
}

// healthServer answers /healthz 200 or 503.
func healthServer(t *testing.T) (*httptest.Server, *atomic.Bool) {
	var up atomic.Bool
	up.Store(true)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(s.Close)
	return s, &up
}

func withHealth(url string) func(*config.Config) {
	return func(c *config.Config) {
		withAdmin(c)
		c.App.HealthURL = url + "/healthz"
		c.App.HealthInterval = 100 * time.Millisecond
	}
}

// While the app's health URL fails, nothing is forwarded, acked or retried;
// when it passes again, everything is delivered once.
func TestHealthGatingPausesAndResumes(t *testing.T) {
	// Registered first, so it runs after every other cleanup: the prober
	// is stopped by Run, not leaked.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	hs, up := healthServer(t)
	h := newHarness(t, withHealth(hs.URL))
	p := h.start()
	reg := p.d.Registry()
	if code, body := adminDo(t, p, "GET", "/readyz", ""); code != http.StatusOK || !strings.Contains(body, "app: ok\n") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if v, _ := testutil.Series(t, reg, "dedupe_proxy_app_up", map[string]string{}); v != 1 {
		t.Fatalf("app_up = %v", v)
	}

	up.Store(false)
	testutil.Eventually(t, 5*time.Second, "app_up 0", func() bool {
		v, _ := testutil.Series(t, reg, "dedupe_proxy_app_up", map[string]string{})
		return v == 0
	})
	const n = 20
	for i := range n {
		publishJSON(h, envelope(fmt.Sprintf("gate-%d", i), ""))
	}
	// Every worker (8) holds one at the gate; the rest wait in the prefetch.
	testutil.Eventually(t, 10*time.Second, "workers held at the gate", func() bool { return p.event(t, "app_wait") >= 8 })
	time.Sleep(time.Second)
	if c := h.app.Count(); c != 0 {
		t.Fatalf("app called %d times while its health check failed", c)
	}
	if s := p.settled(t); s != 0 {
		t.Fatalf("%v deliveries settled while the app was down", s)
	}
	if r := p.event(t, "retry"); r != 0 {
		t.Fatalf("%v retries burned while the app was down", r)
	}
	code, body := adminDo(t, p, "GET", "/readyz?deps=1", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "app: ") || strings.Contains(body, "app: ok") ||
		!strings.Contains(body, "source orders: ok\n") {
		t.Fatalf("/readyz?deps=1 with the app down = %d %q", code, body)
	}
	// The app's own readiness probe speaks for the app.
	if code, _ := adminDo(t, p, "GET", "/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz with the app down = %d, want 200", code)
	}

	up.Store(true)
	testutil.Eventually(t, 30*time.Second, "all forwarded once the app is up", func() bool { return p.result(t, "forwarded") == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
	if len(h.app.Effects()) != n || p.event(t, "retry") != 0 {
		t.Errorf("effects %d retries %v", len(h.app.Effects()), p.event(t, "retry"))
	}
	p.stop(t)
	if r := h.rabbit.Ready(h.queue); r != 0 {
		t.Fatalf("queue holds %d messages", r)
	}
}

// Stopping while messages wait at the gate requeues them, untouched.
func TestHealthGatingShutdownRequeues(t *testing.T) {
	hs, up := healthServer(t)
	h := newHarness(t, withHealth(hs.URL))
	dlq := h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	p := h.start()
	up.Store(false)
	testutil.Eventually(t, 5*time.Second, "gate closed", func() bool {
		v, _ := testutil.Series(t, p.d.Registry(), "dedupe_proxy_app_up", map[string]string{})
		return v == 0
	})
	const n = 5
	for i := range n {
		publishJSON(h, envelope(fmt.Sprintf("gstop-%d", i), ""))
	}
	testutil.Eventually(t, 10*time.Second, "all held at the gate", func() bool { return p.event(t, "app_wait") == n })
	p.stop(t)
	// At least n: Drain and the source's "stop fetching" race on the same
	// signal, so a requeued message can come back once more before the
	// consumer is cancelled, and is requeued again.
	if r, d := p.result(t, "requeued"), p.result(t, "dead_lettered"); r < n || d != 0 {
		t.Fatalf("requeued %v dead-lettered %v, want >= %d and 0", r, d, n)
	}
	if c := h.app.Count(); c != 0 {
		t.Fatalf("app called %d times", c)
	}
	if r := h.rabbit.Ready(h.queue); r != n {
		t.Fatalf("queue holds %d, want the %d requeued messages", r, n)
	}
	for i := range n {
		if s := h.status(fmt.Sprintf("gstop-%d", i)); s.State.String() != "absent" {
			t.Fatalf("gstop-%d is %s: nothing may be claimed before the gate", i, s.State)
		}
	}
}

// One JSON line per failed attempt, with key, source, attempt and reason;
// the body only with log.bodies: true.
func TestFailureLogLineAndBodies(t *testing.T) {
	const secret = "CARD-4111111111111111"
	for _, bodies := range []bool{false, true} {
		t.Run(fmt.Sprintf("bodies=%v", bodies), func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) { c.Log.Bodies = bodies })
			var buf testutil.LogBuffer
			h.logger = newLogger(config.Log{Level: "info", Format: "json"}, &buf)
			h.app.SetRespond(func(_ *testutil.Request, n int) int {
				if n == 0 {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			p := h.start()
			publishJSON(h, envelope("log-1", secret))
			testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
			p.stop(t)

			var failures []map[string]any
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("log line is not JSON: %q", line)
				}
				if m["key"] == "log-1" {
					failures = append(failures, m)
				}
			}
			if len(failures) != 1 {
				t.Fatalf("%d lines about log-1, want 1 (the failed first attempt):\n%s", len(failures), buf.String())
			}
			f := failures[0]
			if f["source"] != "orders" || f["attempt"] != 1.0 || f["reason"] != "status 503" || f["level"] == nil || f["msg"] == nil {
				t.Errorf("failure line lacks source/attempt/reason: %v", f)
			}
			if got := strings.Contains(buf.String(), secret); got != bodies {
				t.Errorf("body in the log = %v with log.bodies %v:\n%s", got, bodies, buf.String())
			}
			if bodies {
				if b, _ := f["body"].(string); !strings.Contains(b, secret) {
					t.Errorf("failure line has no body field: %v", f)
				}
			}
		})
	}
}

// seenset.ttl shorter than a source's max_redelivery_delay: a warning at
// start naming the field.
func TestWarnsWhenTTLShorterThanRedeliveryHorizon(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.SeenSet.TTL = time.Hour
		c.Sources[0].MaxRedeliveryDelay = 2 * time.Hour
	})
	var buf testutil.LogBuffer
	d, err := New(&h.cfg, Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d.fwd.Close()
	_ = d.closeStore()
	var m map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_ = json.Unmarshal([]byte(line), &m)
		if m["field"] == "sources[0].max_redelivery_delay" {
			break
		}
		m = nil
	}
	if m == nil || m["level"] != "WARN" || !strings.Contains(m["msg"].(string), "forwarded again") {
		t.Fatalf("no warning about the TTL in:\n%s", buf.String())
	}
}

// pprof is served only with admin.pprof.
func TestPprofBehindFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Pprof = on })
		p := h.start()
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			if code, _ := adminDo(t, p, "GET", path, ""); code != want {
				t.Errorf("pprof %v: %s = %d, want %d", on, path, code, want)
			}
		}
		p.stop(t)
	}
}

// traceparent and tracestate travel from the AMQP headers to the app.
func TestTraceContextPassesThroughRabbitMQ(t *testing.T) {
	h := newHarness(t, nil)
	p := h.start()
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const ts = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	h.rabbit.Publish(h.queue, amqp.Publishing{Body: envelope("trace-1", ""), Headers: amqp.Table{"traceparent": tp, "tracestate": ts}})
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 1 })
	r := h.app.Requests()[0]
	if r.Header.Get("Traceparent") != tp || r.Header.Get("Tracestate") != ts {
		t.Fatalf("traceparent %q tracestate %q", r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
	}
}
