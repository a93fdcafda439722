package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// rawSecret is the key of testSecret, the Standard Webhooks form used by
// every handler test.
var (
	rawSecret  = []byte("handler-test-secret-0123456789")
	testSecret = "whsec_" + base64.StdEncoding.EncodeToString(rawSecret)
)

// signed is a Standard Webhooks request for event id, as a sender makes it.
func signed(t testing.TB, url, id string, body []byte, at time.Time) *http.Request {
	t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, rawSecret)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	req.Header.Set("X-Event-Type", "invoice.paid")
	return req
}

func send(t testing.TB, req *http.Request) (int, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func testLogger() *slog.Logger {
	if os.Getenv("DEDUPE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// rig is one handler test's world: a Redis store under its own prefix (or
// a private redis-server), a sink, and the handler on an httptest server.
type rig struct {
	t     *testing.T
	store seenset.Store
	url   string
	m     *metrics.Metrics
	o     Options
}

func newStore(t *testing.T, addr string) seenset.Store {
	t.Helper()
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{addr}, Prefix: tu.UniqueName("whtest:") + ":",
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, PoolSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newRig(t *testing.T, store seenset.Store, sink Sink, mutate func(*Options)) *rig {
	t.Helper()
	v, err := NewVerifier(ProfileStandard, []string{testSecret}, 5*time.Minute, Generic{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	o := Options{Name: "hooks", Prefix: "test:hooks:", Profile: ProfileStandard, Verifier: v, Store: store,
		Lease: 3 * time.Second, TTL: time.Hour, BusyDelay: time.Second, Sink: sink, MaxBodyBytes: 1 << 10,
		MaxConcurrent: 64, CommitAttempts: 3, OpTimeout: 2 * time.Second, Logger: testLogger(), Metrics: m.ForWebhook("hooks"),
		StoreObservers: []seenset.Observer{m.Store()}}
	if mutate != nil {
		mutate(&o)
	}
	srv := httptest.NewServer(NewHandler(o))
	t.Cleanup(srv.Close)
	return &rig{t: t, store: store, url: srv.URL, m: m, o: o}
}

// rabbitSink starts a sink publishing to queue through the default
// exchange, via addr (a relay, or the broker itself).
func rabbitSink(t *testing.T, url, queue string) *RabbitSink {
	t.Helper()
	s := NewRabbitSink(url, "", queue, testLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
	tu.Eventually(t, 10*time.Second, "sink connected", func() bool { return s.Ready() == nil })
	return s
}

// kafkaSink starts a sink producing to topic, run as the listener runs
// it, and waits for its first probe to find the brokers.
func kafkaSink(t *testing.T, brokers []string, topic string, log *slog.Logger) *KafkaSink {
	t.Helper()
	s, err := NewKafkaSink(kafka.ProducerOptions{Brokers: brokers, Topic: topic, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
	tu.Eventually(t, 10*time.Second, "sink connected", func() bool { return s.Ready() == nil })
	return s
}

func (r *rig) rejected(reason string) float64 {
	return testutil.ToFloat64(r.m.Webhook.Rejected.WithLabelValues("hooks", reason))
}

// The same event twice: 2xx both times, one message in the queue, stored
// with message_id = key, persistent, with the headers the app needs.
func TestSameEventTwiceOnePublish(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	r := newRig(t, newStore(t, tu.RedisAddr()), rabbitSink(t, tu.RabbitURL(), q), nil)
	body := []byte(`{"type":"invoice.paid","amount":42}`)
	for i := range 2 {
		if code, _ := send(t, signed(t, r.url, "msg_twice", body, time.Now())); code != http.StatusOK {
			t.Fatalf("delivery %d answered %d, want 200", i, code)
		}
	}
	if n := rb.Ready(q); n != 1 {
		t.Fatalf("queue holds %d messages, want 1", n)
	}
	d, _ := rb.Get(q)
	if d.MessageId != "msg_twice" || d.DeliveryMode != 2 || !bytes.Equal(d.Body, body) || d.ContentType != "application/json" {
		t.Errorf("published %+v", d)
	}
	if d.Headers[HeaderMessageID] != "msg_twice" || d.Headers["x-event-type"] != "invoice.paid" || d.Headers["webhook-signature"] != nil {
		t.Errorf("headers %v: want bq-message-id and x-event-type, not the signature", d.Headers)
	}
	if got := testutil.ToFloat64(r.m.Webhook.Duplicates.WithLabelValues("hooks")); got != 1 {
		t.Errorf("duplicates = %v, want 1", got)
	}
}

// The webhook's seen-set calls are in the same store metrics as the
// pipeline's: one observed store, one way of counting.
func TestWebhookStoreCallsAreMeasured(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	r := newRig(t, newStore(t, tu.RedisAddr()), rabbitSink(t, tu.RabbitURL(), q), nil)
	if code, _ := send(t, signed(t, r.url, "msg_measured", []byte(`{"m":1}`), time.Now())); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	for _, op := range []string{"claim", "commit"} {
		h := &dto.Metric{}
		if err := r.m.StoreDuration.WithLabelValues(op).(prometheus.Histogram).Write(h); err != nil {
			t.Fatal(err)
		}
		if n := h.GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("seen-set %s calls measured = %d, want 1", op, n)
		}
	}
}

// 50 concurrent deliveries of one event: exactly one publish; the others
// are 409 (in flight) or 200 (done), and retrying the 409s gives 200.
func TestConcurrentDeliveriesOnePublish(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	r := newRig(t, newStore(t, tu.RedisAddr()), rabbitSink(t, tu.RabbitURL(), q), nil)
	body := []byte(`{"n":1}`)
	var wg sync.WaitGroup
	codes := make([]int, 50)
	start := make(chan struct{})
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := signed(t, r.url, "msg_herd", body, time.Now())
			<-start
			codes[i], _ = send(t, req)
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			code, _ := send(t, signed(t, r.url, "msg_herd", body, time.Now()))
			if code != http.StatusOK {
				t.Errorf("retry after 409 answered %d", code)
			}
		default:
			t.Errorf("answer %d", c)
		}
	}
	if ok == 0 {
		t.Error("no delivery answered 200")
	}
	if n := rb.Ready(q); n != 1 {
		t.Fatalf("queue holds %d messages, want exactly 1", n)
	}
}

// Refused requests store nothing: too large (413), unsigned and forged
// (401), stale (400), no event id (401: webhook-id is signed), wrong
// method (405).
func TestRefusedRequestsStoreNothing(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	st := newStore(t, tu.RedisAddr())
	r := newRig(t, st, rabbitSink(t, tu.RabbitURL(), q), nil)
	body := []byte(`{"ok":true}`)
	big := signed(t, r.url, "msg_big", bytes.Repeat([]byte("x"), 2<<10), time.Now())
	chunked := signed(t, r.url, "msg_big2", bytes.Repeat([]byte("x"), 2<<10), time.Now())
	chunked.ContentLength = -1 // no Content-Length: the cap stops the read
	chunked.Body = io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("x"), 2<<10)))
	unsignedReq := signed(t, r.url, "msg_u", body, time.Now())
	unsignedReq.Header.Del("webhook-signature")
	forged := signed(t, r.url, "msg_f", body, time.Now())
	forged.Body = io.NopCloser(strings.NewReader(`{"ok":false}`))
	forged.ContentLength = int64(len(`{"ok":false}`))
	get, _ := http.NewRequest(http.MethodGet, r.url, nil)
	for _, tc := range []struct {
		name   string
		req    *http.Request
		code   int
		reason string
	}{
		{"too large", big, http.StatusRequestEntityTooLarge, metrics.WebhookTooLarge},
		{"too large, chunked", chunked, http.StatusRequestEntityTooLarge, metrics.WebhookTooLarge},
		{"unsigned", unsignedReq, http.StatusUnauthorized, metrics.WebhookUnsigned},
		{"forged", forged, http.StatusUnauthorized, metrics.WebhookBadSignature},
		{"stale", signed(t, r.url, "msg_s", body, time.Now().Add(-6*time.Minute)), http.StatusBadRequest, metrics.WebhookStale},
		{"GET", get, http.StatusMethodNotAllowed, metrics.WebhookBadRequest},
	} {
		before := r.rejected(tc.reason)
		if code, _ := send(t, tc.req); code != tc.code {
			t.Errorf("%s: answered %d, want %d", tc.name, code, tc.code)
		}
		if r.rejected(tc.reason) != before+1 {
			t.Errorf("%s: rejected{%s} not counted", tc.name, tc.reason)
		}
	}
	for _, id := range []string{"msg_big", "msg_big2", "msg_u", "msg_f", "msg_s"} {
		if s, err := st.Status(context.Background(), "test:hooks:"+id); err != nil || s.State != seenset.Absent {
			t.Errorf("key %s is %v (%v), want absent", id, s.State, err)
		}
	}
	if n := rb.Ready(q); n != 0 {
		t.Fatalf("queue holds %d messages, want 0", n)
	}
}

// Redis killed: 503 with Retry-After and nothing published; once it is
// back the sender's retry is stored, once.
func TestRedisDownAnswers503ThenRecovers(t *testing.T) {
	rs := tu.StartRedis(t)
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	r := newRig(t, newStore(t, rs.Addr()), rabbitSink(t, tu.RabbitURL(), q), nil)
	body := []byte(`{"n":2}`)
	if code, _ := send(t, signed(t, r.url, "msg_before", body, time.Now())); code != http.StatusOK {
		t.Fatalf("before the kill: %d", code)
	}
	rs.Kill()
	code, h := send(t, signed(t, r.url, "msg_during", body, time.Now()))
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("with Redis down: %d Retry-After %q, want 503 with Retry-After", code, h.Get("Retry-After"))
	}
	if n := rb.Ready(q); n != 1 {
		t.Fatalf("queue holds %d messages, want 1 (nothing published while Redis is down)", n)
	}
	rs.Restart()
	tu.Eventually(t, 10*time.Second, "the retry stored", func() bool {
		code, _ := send(t, signed(t, r.url, "msg_during", body, time.Now()))
		return code == http.StatusOK
	})
	if code, _ := send(t, signed(t, r.url, "msg_during", body, time.Now())); code != http.StatusOK {
		t.Fatalf("duplicate after recovery: %d", code)
	}
	if n := rb.Ready(q); n != 2 {
		t.Fatalf("queue holds %d messages, want 2", n)
	}
	if r.rejected(metrics.WebhookStoreUnavailable) < 1 {
		t.Error("store_unavailable not counted")
	}
}

// The broker connection cut: 503 while it is down, the claim released, so
// the retry after the reconnect is published; the event is never lost.
func TestBrokerCutAnswers503NothingLost(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	relay := tu.NewRelay(t, strings.TrimSuffix(strings.TrimPrefix(tu.RabbitURL(), "amqp://guest:guest@"), "/"))
	st := newStore(t, tu.RedisAddr())
	sink := rabbitSink(t, "amqp://guest:guest@"+relay.Addr()+"/", q)
	r := newRig(t, st, sink, nil)
	body := []byte(`{"n":3}`)
	relay.SetDown(true)
	relay.Cut()
	tu.Eventually(t, 5*time.Second, "sink notices the cut", func() bool { return sink.Ready() != nil })
	code, h := send(t, signed(t, r.url, "msg_cut", body, time.Now()))
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("broker down: %d, want 503 with Retry-After", code)
	}
	if s, _ := st.Status(context.Background(), "test:hooks:msg_cut"); s.State != seenset.Absent {
		t.Fatalf("key is %v after a failed publish, want absent (released)", s.State)
	}
	relay.SetDown(false)
	tu.Eventually(t, 15*time.Second, "the retry stored", func() bool {
		code, _ := send(t, signed(t, r.url, "msg_cut", body, time.Now()))
		return code == http.StatusOK
	})
	if n := rb.Ready(q); n != 1 {
		t.Fatalf("queue holds %d messages, want 1", n)
	}
	if r.rejected(metrics.WebhookTargetUnavailable) < 1 {
		t.Error("target_unavailable not counted")
	}
}

// A publish no queue takes (mandatory, returned) is not stored: 503.
func TestUnroutableIs503(t *testing.T) {
	st := newStore(t, tu.RedisAddr())
	r := newRig(t, st, rabbitSink(t, tu.RabbitURL(), tu.UniqueName("whtest.nosuchqueue.")), nil)
	if code, _ := send(t, signed(t, r.url, "msg_unroutable", []byte(`{}`), time.Now())); code != http.StatusServiceUnavailable {
		t.Fatalf("unroutable publish answered %d, want 503", code)
	}
	if s, _ := st.Status(context.Background(), "test:hooks:msg_unroutable"); s.State != seenset.Absent {
		t.Fatalf("key is %v, want absent", s.State)
	}
}

// Kafka: the record carries the body, the key as record key and in
// bq-message-id, once for two deliveries.
func TestKafkaSinkOnePublish(t *testing.T) {
	kc := kafkatest.Start(t, 1, []string{"hooks"})
	r := newRig(t, newStore(t, tu.RedisAddr()), kafkaSink(t, kc.Addrs, "hooks", testLogger()), nil)
	body := []byte(`{"k":1}`)
	for range 2 {
		if code, _ := send(t, signed(t, r.url, "msg_k", body, time.Now())); code != http.StatusOK {
			t.Fatalf("answered %d", code)
		}
	}
	recs := kc.Read(t, "hooks", 0, 2, 2*time.Second)
	if len(recs) != 1 {
		t.Fatalf("topic holds %d records, want 1", len(recs))
	}
	hs := map[string]string{}
	for _, h := range recs[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	if string(recs[0].Key) != "msg_k" || hs[HeaderMessageID] != "msg_k" || !bytes.Equal(recs[0].Value, body) || hs["content-type"] != "application/json" {
		t.Errorf("record key %q headers %v value %q", recs[0].Key, hs, recs[0].Value)
	}
}

// Forward mode: the app gets the event once with its Idempotency-Key;
// an app failure answers non-2xx and releases, so the retry goes through.
func TestForwardModeOneEffect(t *testing.T) {
	app := tu.NewApp(t)
	app.SetRespond(func(_ *tu.Request, n int) int {
		if n == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 2 * time.Second, HeaderAllowlist: []string{"X-Event-Type"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	r := newRig(t, newStore(t, tu.RedisAddr()), nil, func(o *Options) { o.Sink, o.Forwarder, o.AppPath = nil, fwd, "/hooks" })
	body := []byte(`{"f":1}`)
	if code, _ := send(t, signed(t, r.url, "msg_fwd", body, time.Now())); code != http.StatusServiceUnavailable {
		t.Fatalf("app failing: answered %d, want 503", code)
	}
	for range 2 {
		if code, _ := send(t, signed(t, r.url, "msg_fwd", body, time.Now())); code != http.StatusOK {
			t.Fatalf("answered %d, want 200", code)
		}
	}
	if eff := app.Effects(); eff["msg_fwd"] != 1 || app.Count() != 2 {
		t.Fatalf("effects %v, requests %d; want one effect after one failure", eff, app.Count())
	}
	req := app.Requests()[1]
	if req.Path != "/hooks" || req.Header.Get("X-Event-Type") != "invoice.paid" || req.Header.Get("X-Dedupe-Source") != "hooks" {
		t.Errorf("forwarded %s with %v", req.Path, req.Header)
	}
	// Each request is forwarded once, so every forward is attempt 1, as
	// the first attempt of a broker delivery is; the sender's retry is a
	// delivery of its own.
	for i, req := range app.Requests() {
		if got := req.Header.Get("X-Dedupe-Attempt"); got != "1" {
			t.Errorf("request %d: X-Dedupe-Attempt %q, want 1", i, got)
		}
	}
}

// An app slower than app.timeout and the lease: the sender is answered
// 503 at app.timeout, but the request stays open at the app with the
// claim held. The sender's retries find the event busy (409) while it
// runs, and done (200, no second request) after its late 2xx. Before,
// the timeout released the claim and the retry reached the app while the
// first request still ran.
func TestForwardModeSlowAppNeverOverlapped(t *testing.T) {
	var running, maxRunning, calls atomic.Int32
	appSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		if n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		if calls.Add(1) == 1 {
			time.Sleep(2 * time.Second)
		}
	}))
	t.Cleanup(appSrv.Close)
	fwd, err := forward.New(forward.Config{URL: appSrv.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	r := newRig(t, newStore(t, tu.RedisAddr()), nil, func(o *Options) {
		o.Sink, o.Forwarder, o.Lease = nil, fwd, time.Second
	})
	body := []byte(`{"slow":1}`)
	code, _ := send(t, signed(t, r.url, "msg_slow", body, time.Now()))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("slow app: answered %d, want 503 at app.timeout", code)
	}
	busy := 0
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := send(t, signed(t, r.url, "msg_slow", body, time.Now()))
		if code == http.StatusOK {
			break
		}
		if code != http.StatusConflict {
			t.Fatalf("retry answered %d, want 409 while the first request runs, then 200", code)
		}
		busy++
		if time.Now().After(deadline) {
			t.Fatal("the event never became done")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := calls.Load(); n != 1 || maxRunning.Load() != 1 {
		t.Fatalf("the app got %d requests (at most %d at once), want 1: the late 2xx is taken", n, maxRunning.Load())
	}
	if busy == 0 {
		t.Error("no retry found the event busy while its request ran")
	}
	if got := r.rejected(metrics.WebhookAppSlow); got != 1 {
		t.Errorf("app_slow rejections = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.m.Webhook.Accepted.WithLabelValues("hooks", metrics.WebhookForwarded)); got != 1 {
		t.Errorf("forwarded = %v, want 1", got)
	}
}

// Slack's url_verification is answered with its challenge once the
// signature is valid, and stores nothing.
func TestSlackChallengeAnswered(t *testing.T) {
	st := newStore(t, tu.RedisAddr())
	v, err := NewVerifier(ProfileSlack, []string{"slack-secret"}, 5*time.Minute, Generic{})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, st, nil, func(o *Options) { o.Profile, o.Verifier = ProfileSlack, v })
	body := `{"token":"x","challenge":"ch4llenge","type":"url_verification"}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte("slack-secret"))
	m.Write([]byte("v0:" + ts + ":" + body))
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", "v0="+hexOf(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "ch4llenge" {
		t.Fatalf("answered %d %q, want 200 ch4llenge", resp.StatusCode, got)
	}
}

// Overloaded: with every slot taken, a request is answered 503 at once.
func TestMaxConcurrent(t *testing.T) {
	app := tu.NewApp(t)
	release := make(chan struct{})
	app.SetRespond(func(*tu.Request, int) int { <-release; return http.StatusOK })
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	r := newRig(t, newStore(t, tu.RedisAddr()), nil, func(o *Options) { o.Sink, o.Forwarder, o.MaxConcurrent = nil, fwd, 1 })
	done := make(chan int)
	go func() { c, _ := send(t, signed(t, r.url, "msg_slow", []byte(`{}`), time.Now())); done <- c }()
	tu.Eventually(t, 5*time.Second, "first request at the app", func() bool { return app.Count() == 0 && r.received() == 1 })
	time.Sleep(50 * time.Millisecond)
	code, h := send(t, signed(t, r.url, "msg_other", []byte(`{}`), time.Now()))
	close(release)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("second request answered %d, want 503 with Retry-After", code)
	}
	if c := <-done; c != http.StatusOK {
		t.Fatalf("first request answered %d", c)
	}
}

func (r *rig) received() float64 {
	return testutil.ToFloat64(r.m.Webhook.Received.WithLabelValues("hooks"))
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}
