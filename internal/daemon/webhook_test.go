package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

var whRawSecret = []byte("daemon-webhook-test-secret")

const whSecretEnv = "DEDUPE_TEST_WEBHOOK_SECRET"

// webhookSource is a standard-webhooks source on a free loopback port
// whose secret comes from the environment.
func webhookSource(t *testing.T) config.Source {
	t.Setenv(whSecretEnv, "whsec_"+base64.StdEncoding.EncodeToString(whRawSecret))
	s := config.DefaultSource()
	s.Name, s.Type = "hooks", "webhook"
	s.Webhook.Listen = "127.0.0.1:0"
	s.Webhook.Secrets = []string{"env:" + whSecretEnv}
	return s
}

// postEvent sends a Standard Webhooks event signed as a sender does and
// returns the status.
func postEvent(t testing.TB, addr, id string, body []byte) int {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, whRawSecret)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// sendUntilStored retries like a sender until a 2xx.
func sendUntilStored(t testing.TB, addr, id string, body []byte) int {
	for range 100 {
		if c := postEvent(t, addr, id, body); c/100 == 2 {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("event %s never stored", id)
	return 0
}

// deliverWithRedeliveries sends each event once, then again, and a third
// time from 5 goroutines at once; every delivery ends in a 2xx.
func deliverWithRedeliveries(t *testing.T, addr string, n int) {
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("evt_%d", i)
		body := envelope(id, "from a webhook")
		if c := sendUntilStored(t, addr, id, body); c != http.StatusOK {
			t.Fatalf("event %s: %d", id, c)
		}
		if c := sendUntilStored(t, addr, id, body); c != http.StatusOK {
			t.Fatalf("redelivery of %s: %d", id, c)
		}
		for range 5 {
			wg.Add(1)
			go func() { defer wg.Done(); sendUntilStored(t, addr, id, body) }()
		}
	}
	wg.Wait()
}

func checkOneEffectEach(t *testing.T, app *testutil.App, n int) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, "every event at the app", func() bool { return len(app.Effects()) == n })
	time.Sleep(300 * time.Millisecond) // a late duplicate would arrive now
	for key, c := range app.Effects() {
		if c != 1 {
			t.Errorf("event %s had %d effects, want 1", key, c)
		}
	}
	if app.Count() != n {
		t.Errorf("app got %d requests, want %d", app.Count(), n)
	}
}

// Webhook → RabbitMQ → the proxy's rabbitmq source → app: every event
// once at the app, whatever the redeliveries; the webhook source is in
// /readyz.
func TestWebhookToRabbitMQToApp(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Sources[0].Key = []string{"property:message_id"}
		wh := webhookSource(t)
		wh.Webhook.Target.RabbitMQ.RoutingKey = c.Sources[0].RabbitMQ.Queue
		c.Sources = append(c.Sources, wh)
	})
	p := h.start()
	addr := p.d.WebhookAddr("hooks")
	if addr == "" {
		t.Fatal("webhook listener not bound")
	}
	var names []string
	for _, c := range p.d.checks(context.Background()) {
		names = append(names, c.name)
	}
	if !strings.Contains(strings.Join(names, ","), "source hooks") {
		t.Errorf("readiness checks %v lack the webhook source", names)
	}
	deliverWithRedeliveries(t, addr, 10)
	checkOneEffectEach(t, h.app, 10)
	if got := testutil.Counter(t, p.d.Registry(), "dedupe_proxy_webhook_accepted_total", map[string]string{"source": "hooks", "how": "enqueued"}); got != 10 {
		t.Errorf("enqueued = %v, want 10", got)
	}
}

// Webhook → Kafka (kfake) → the proxy's kafka source → app.
func TestWebhookToKafkaToApp(t *testing.T) {
	h := newKafkaHarness(t, 1, func(c *config.Config) {
		wh := webhookSource(t)
		wh.Webhook.Target.Broker = "kafka"
		wh.Webhook.Target.Kafka.Brokers = c.Sources[0].Kafka.Brokers
		wh.Webhook.Target.Kafka.Topic = kTopic
		c.Sources = append(c.Sources, wh)
	})
	p := h.start()
	deliverWithRedeliveries(t, p.d.WebhookAddr("hooks"), 10)
	checkOneEffectEach(t, h.app, 10)
	if recs := h.kc.Read(t, kTopic, 0, 11, 2*time.Second); len(recs) != 10 {
		t.Errorf("topic holds %d records, want 10 (one per event)", len(recs))
	}
}

// Mode forward: the app is called once per event, and the sender's 2xx
// means the app answered 2xx.
func TestWebhookForwardMode(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		wh := webhookSource(t)
		wh.Webhook.Mode = "forward"
		wh.Path = "/hooks"
		c.Sources = append(c.Sources, wh)
	})
	p := h.start()
	deliverWithRedeliveries(t, p.d.WebhookAddr("hooks"), 5)
	checkOneEffectEach(t, h.app, 5)
	if r := h.app.Requests()[0]; r.Path != "/hooks" || r.Header.Get("X-Dedupe-Source") != "hooks" {
		t.Errorf("forwarded to %s with %v", r.Path, r.Header)
	}
}

// A webhook source whose target broker is unreachable makes the proxy
// unready, under its name.
func TestWebhookReadinessFollowsTarget(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		wh := webhookSource(t)
		wh.Webhook.Target.RabbitMQ.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", testutil.FreePort(t))
		wh.Webhook.Target.RabbitMQ.RoutingKey = "nowhere"
		c.Sources = append(c.Sources, wh)
	})
	d, err := New(&h.cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testutil.Eventually(t, 10*time.Second, "listener bound", func() bool { return d.WebhookAddr("hooks") != "" })
	testutil.Eventually(t, 10*time.Second, "rabbitmq source ready", func() bool {
		err := d.Ready(context.Background())
		return err != nil && !strings.Contains(err.Error(), "source orders")
	})
	if err := d.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "source hooks") {
		t.Fatalf("Ready = %v, want the webhook source named", err)
	}
	if c := postEvent(t, d.WebhookAddr("hooks"), "evt_down", []byte(`{}`)); c != http.StatusServiceUnavailable {
		t.Fatalf("with the target down: %d, want 503", c)
	}
}

// Two deployments with the same consumer and source names: one receives
// webhooks as source "orders" and enqueues them to a queue, the other
// consumes that queue as its broker source "orders". Their keys used to
// be one ("<consumer>:orders:<id>"), so the webhook's done mark made the
// consumer ack every event as a duplicate and the app never saw it. A
// webhook's keys live in a namespace no broker source reaches: the app
// gets every event, once.
func TestWebhookAndItsConsumerNeverShareKeys(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Sources[0].Key = []string{"property:message_id"} })
	h.start()

	cfg := h.cfg
	wh := webhookSource(t)
	wh.Name = "orders" // the consumer's source name, in another deployment
	wh.Webhook.Target.RabbitMQ.RoutingKey = h.queue
	cfg.Sources = []config.Source{wh}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := New(&cfg, Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook deployment: %v", err)
		}
	}()
	testutil.Eventually(t, 10*time.Second, "webhook deployment ready", func() bool { return d.Ready(context.Background()) == nil })
	addr := d.WebhookAddr("orders")
	for i := range 3 {
		id := fmt.Sprintf("evt_shared_%d", i)
		if c := sendUntilStored(t, addr, id, envelope(id, "enqueued by a webhook")); c != http.StatusOK {
			t.Fatalf("event %s: %d", id, c)
		}
	}
	checkOneEffectEach(t, h.app, 3)
	// The webhook's done mark is where the key API looks for it, under
	// the space webhook/orders; the consumer's own is under orders.
	for space, want := range map[string]seenset.State{"webhook/orders": seenset.Done, "orders": seenset.Done} {
		k := &admin.Keys{Store: d.Store(), Consumer: cfg.Consumer, Spaces: []string{"orders", "webhook/orders"}}
		st, err := k.Status(context.Background(), space, "evt_shared_0")
		if err != nil || st.State != want.String() {
			t.Errorf("key evt_shared_0 in space %s: %+v (%v), want %s", space, st, err, want)
		}
	}
	if got := cfg.KeySpaces(); len(got) != 1 || got[0] != "webhook/orders" {
		t.Errorf("the webhook deployment's key spaces are %v, want [webhook/orders]", got)
	}
}

// A signed event whose id was stored with another body: 422 and nothing
// stored under key_reuse: dead_letter; the usual 2xx duplicate (and the
// counter) under warn; under forward, the app gets it marked, once.
func TestWebhookKeyReuse(t *testing.T) {
	first := []byte(`{"type":"order.paid","data":{"amount":10}}`)
	other := []byte(`{"type":"order.paid","data":{"amount":99}}`)
	for _, tc := range []struct {
		action      string
		status      int
		app         int
		duplicates  float64
		rejected422 float64
	}{
		{"dead_letter", http.StatusUnprocessableEntity, 1, 1, 1},
		{"warn", http.StatusOK, 1, 2, 0},
		{"forward", http.StatusOK, 2, 2, 0},
	} {
		t.Run(tc.action, func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) {
				wh := webhookSource(t)
				wh.Webhook.Mode = "forward"
				wh.KeyReuse = tc.action
				c.Sources = append(c.Sources, wh)
			})
			p := h.start()
			addr := p.d.WebhookAddr("hooks")
			if got := testutil.Counter(t, p.d.Registry(), "dedupe_proxy_key_reuse_total", map[string]string{"source": "hooks"}); got != 0 {
				t.Fatalf("key_reuse_total{source=hooks} = %v before any event, want a series at 0", got)
			}
			if c := postEvent(t, addr, "evt_1", first); c != http.StatusOK {
				t.Fatalf("first: %d", c)
			}
			if c := postEvent(t, addr, "evt_1", other); c != tc.status {
				t.Fatalf("other body: %d, want %d", c, tc.status)
			}
			if c := postEvent(t, addr, "evt_1", first); c != http.StatusOK {
				t.Fatalf("first again: %d, want the 2xx of a duplicate", c)
			}
			if tc.action == "forward" {
				if c := postEvent(t, addr, "evt_1", other); c != http.StatusOK {
					t.Fatalf("other body again: %d", c)
				}
			}
			rs := h.app.Requests()
			if len(rs) != tc.app {
				t.Fatalf("app got %d requests, want %d", len(rs), tc.app)
			}
			if tc.action == "forward" && (string(rs[1].Body) != string(other) || rs[1].Header.Get("X-Dedupe-Key-Reused") != "true") {
				t.Fatalf("the reused body reached the app as %q with %v", rs[1].Body, rs[1].Header)
			}
			reg := p.d.Registry()
			want := 1.0
			if tc.action == "forward" {
				want = 2 // the second copy of the other body is caught at the key again
			}
			if got := testutil.Counter(t, reg, "dedupe_proxy_key_reuse_total", map[string]string{"source": "hooks"}); got != want {
				t.Fatalf("key_reuse_total = %v, want %v", got, want)
			}
			if got := testutil.Counter(t, reg, "dedupe_proxy_webhook_duplicates_total", map[string]string{"source": "hooks"}); got != tc.duplicates {
				t.Fatalf("webhook duplicates = %v, want %v", got, tc.duplicates)
			}
			if got := testutil.Counter(t, reg, "dedupe_proxy_webhook_rejected_total", map[string]string{"source": "hooks", "reason": "key_reused"}); got != tc.rejected422 {
				t.Fatalf("rejected key_reused = %v, want %v", got, tc.rejected422)
			}
			st, err := p.d.Store().Status(context.Background(), "test:webhook/hooks:evt_1")
			if err != nil || st.State != seenset.Done || seenset.TokenDigest(st.Token) != seenset.SumDigest(first).String() {
				t.Fatalf("evt_1: %v %v; want done with the first body's digest", st, err)
			}
		})
	}
}
