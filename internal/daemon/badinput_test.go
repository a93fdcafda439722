package daemon

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A 10 MiB body with a 1 MiB limit: dead-lettered with the reason, not
// forwarded, not lost.
func TestBodyTooLargeDeadLettered(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Delivery.MaxBodyBytes = 1 << 20 })
	dlq := h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	p := h.start()
	big := envelope("big-1", strings.Repeat("x", 10<<20))
	publishJSON(h, big)
	testutil.Eventually(t, 20*time.Second, "dead-lettered", func() bool { return p.result(t, "dead_lettered") == 1 })
	if h.app.Count() != 0 {
		t.Fatal("oversized message forwarded")
	}
	m, ok := h.rabbit.Get(dlq)
	if !ok || m.Headers["x-dedupe-reason"] != "body too large" || len(m.Body) != len(big) {
		t.Fatalf("dead letter: ok=%v headers=%v body %d bytes", ok, m.Headers, len(m.Body))
	}
	if p.event(t, "body_too_large") != 1 {
		t.Fatalf("body_too_large = %v", p.event(t, "body_too_large"))
	}
}

// Keys that are not identities — invalid UTF-8, 10 KiB long, non-JSON
// bodies under a json: rule — mean "no key": forwarded (fail-open) and
// counted, every time they arrive.
func TestUnusableKeysFailOpen(t *testing.T) {
	h := newHarness(t, nil)
	p := h.start()
	bodies := [][]byte{
		[]byte("{\"meta\":{\"id\":\"bad-\xff\xfe\"}}"),
		[]byte(`{"meta":{"id":"` + strings.Repeat("k", 10<<10) + `"}}`),
		[]byte("<order id=\"1\"/>"),
		[]byte(`{"meta":{"id":{"nested":true}}}`),
	}
	for range 2 {
		for _, b := range bodies {
			publishJSON(h, b)
		}
	}
	n := float64(2 * len(bodies))
	testutil.Eventually(t, 10*time.Second, "all forwarded", func() bool { return p.result(t, "forwarded") == n })
	if p.event(t, "no_key") != n || p.result(t, "duplicate") != 0 {
		t.Fatalf("no_key = %v duplicate = %v, want %v and 0", p.event(t, "no_key"), p.result(t, "duplicate"), n)
	}
	for _, r := range h.app.Requests() {
		if r.Key != "" {
			t.Fatalf("Idempotency-Key %q sent for an unusable key", r.Key)
		}
	}
}

// on_missing_key: dead_letter sends unidentifiable messages to the dead
// letter instead, with the reason.
func TestMissingKeyDeadLetter(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Sources[0].OnMissingKey = "dead_letter"
		c.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: "placeholder"}
	})
	dlq := h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter.RoutingKey = dlq
	p := h.start()
	publishJSON(h, []byte(`{"data":1}`))
	testutil.Eventually(t, 10*time.Second, "dead-lettered", func() bool { return p.result(t, "dead_lettered") == 1 })
	m, ok := h.rabbit.Get(dlq)
	if !ok || m.Headers["x-dedupe-reason"] != "no key: absent" || h.app.Count() != 0 {
		t.Fatalf("ok=%v headers=%v app=%d", ok, m.Headers, h.app.Count())
	}
}

// An app that answers 2xx with a 50 MiB body: the proxy reads no more than
// app.max_response_bytes, acks, and its heap does not grow by the body.
func TestHugeAppResponse(t *testing.T) {
	h := newHarness(t, nil)
	chunk := make([]byte, 1<<20)
	h.app.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for range 50 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	p := h.start()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 5 {
		publishJSON(h, envelope("huge-"+string(rune('a'+i)), ""))
	}
	testutil.Eventually(t, 20*time.Second, "all acked", func() bool { return p.result(t, "forwarded") == 5 })
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.TotalAlloc - before.TotalAlloc); grown > 40<<20 {
		t.Fatalf("allocated %d MiB for five 50 MiB answers; the response must not be read past the limit", grown>>20)
	}
}
