package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// runKafkaSink runs s as the listener does until the test ends.
func runKafkaSink(t *testing.T, s *KafkaSink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
}

// kafkaDown takes the broker away as a network outage would: open
// connections cut, new ones refused, on the same address.
func kafkaDown(kc *kafkatest.Cluster) {
	kc.SetDown(true)
	kc.Cut()
}

// The Kafka target gone for several probes, then back: one warning when
// it is lost, the probes in between at debug, and one line when it is
// back, with down_for. Ready says why while it is down, and after Close.
func TestKafkaTargetDownAndUpLoggedOnce(t *testing.T) {
	kc := kafkatest.Start(t, 1, []string{"hooks"})
	var logs tu.LogBuffer
	s, err := NewKafkaSink(kafka.ProducerOptions{Brokers: kc.Addrs, Topic: "hooks", NetworkTimeout: 300 * time.Millisecond, Logger: logs.JSONLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "not connected yet") {
		t.Fatalf("Ready before Run: %v", err)
	}
	runKafkaSink(t, s)
	tu.Eventually(t, 10*time.Second, "reachable", func() bool { return s.Ready() == nil })

	kafkaDown(kc)
	tu.Eventually(t, 20*time.Second, "several probes failing", func() bool {
		return len(logs.With(t, "DEBUG", "webhook target kafka unreachable, retrying")) >= 3
	})
	if err := s.Ready(); err == nil || !strings.HasPrefix(err.Error(), "kafka: ") {
		t.Fatalf("Ready with the target gone: %v", err)
	}
	if err := s.Publish(context.Background(), Event{Key: "k", Source: "hooks", Body: []byte("{}")}); err == nil {
		t.Fatal("Publish with the target gone: no error")
	}
	kc.SetDown(false)
	tu.Eventually(t, 15*time.Second, "reachable again", func() bool { return s.Ready() == nil })

	warns := logs.With(t, "WARN", "")
	if len(warns) != 1 || warns[0]["msg"] != "webhook target kafka unreachable; webhooks are answered 503 until it is back" || warns[0]["err"] == "" {
		t.Fatalf("warnings: %v, want the one lost line with its error:\n%s", warns, logs.String())
	}
	up := logs.With(t, "INFO", "webhook target kafka reachable")
	if len(up) != 2 || up[0]["down_for"] != nil || up[1]["down_for"] == nil || up[1]["topic"] != "hooks" {
		t.Fatalf("reachable lines: %v, want the first and one with down_for", up)
	}

	_ = s.Close()
	if err := s.Ready(); err == nil || err.Error() != "kafka: closed" {
		t.Fatalf("Ready after Close: %v", err)
	}
	if n := len(logs.With(t, "WARN", "")); n != 1 {
		t.Fatalf("Close logged an outage:\n%s", logs.String())
	}
}

// Ready reads the probes' answer: a /readyz polled hard opens no
// connection to the brokers.
func TestKafkaTargetReadyDoesNotDial(t *testing.T) {
	kc := kafkatest.Start(t, 1, []string{"hooks"})
	s := kafkaSink(t, kc.Addrs, "hooks", testLogger())
	if err := s.Publish(context.Background(), Event{Key: "k", Source: "hooks", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	before := kc.Accepted()
	for range 200 {
		if err := s.Ready(); err != nil {
			t.Fatalf("Ready: %v", err)
		}
	}
	if n := kc.Accepted() - before; n != 0 {
		t.Fatalf("200 Ready calls opened %d connections to the broker, want 0", n)
	}
}

// A webhook sent while the Kafka target is down is answered 503 with a
// Retry-After and its key left free, so the sender's retry, once the
// target is back, is stored: once, nothing lost.
func TestKafkaTargetDownPublishRetried(t *testing.T) {
	kc := kafkatest.Start(t, 1, []string{"hooks"})
	var logs tu.LogBuffer
	sink, err := NewKafkaSink(kafka.ProducerOptions{Brokers: kc.Addrs, Topic: "hooks", NetworkTimeout: 300 * time.Millisecond, Logger: logs.JSONLogger()})
	if err != nil {
		t.Fatal(err)
	}
	runKafkaSink(t, sink)
	tu.Eventually(t, 10*time.Second, "reachable", func() bool { return sink.Ready() == nil })
	r := newRig(t, newStore(t, tu.RedisAddr()), sink, func(o *Options) { o.Logger = logs.JSONLogger() })
	if code, _ := send(t, signed(t, r.url, "msg_before", []byte(`{"n":1}`), time.Now())); code != http.StatusOK {
		t.Fatalf("before the outage: %d", code)
	}

	kafkaDown(kc)
	tu.Eventually(t, 15*time.Second, "the target seen down", func() bool { return sink.Ready() != nil })
	body := []byte(`{"n":2}`)
	for range 3 {
		code, hd := send(t, signed(t, r.url, "msg_during", body, time.Now()))
		if code != http.StatusServiceUnavailable || hd.Get("Retry-After") == "" {
			t.Fatalf("with the target down: %d (Retry-After %q), want 503 with a Retry-After", code, hd.Get("Retry-After"))
		}
	}
	if st, err := r.store.Status(context.Background(), "test:hooks:msg_during"); err != nil || st.State != seenset.Absent {
		t.Fatalf("key after the refused sends: %v %v, want absent", st.State, err)
	}
	if n := len(logs.With(t, "WARN", "webhook not stored")); n != 0 {
		t.Errorf("%d per-request warnings while the target was known down:\n%s", n, logs.String())
	}

	kc.SetDown(false)
	tu.Eventually(t, 15*time.Second, "the retry stored", func() bool {
		code, _ := send(t, signed(t, r.url, "msg_during", body, time.Now()))
		return code == http.StatusOK
	})
	if code, _ := send(t, signed(t, r.url, "msg_during", body, time.Now())); code != http.StatusOK {
		t.Fatalf("a later retry: %d", code)
	}
	recs := kc.Read(t, "hooks", 0, 3, 2*time.Second)
	var keys []string
	for _, rec := range recs {
		keys = append(keys, string(rec.Key))
	}
	if strings.Join(keys, ",") != "msg_before,msg_during" {
		t.Fatalf("topic holds %v, want msg_before then msg_during, once each", keys)
	}
}
