package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A basic-auth password in app.url and app.health_url reaches neither the
// log (the start line, health and forward failures) nor a dead letter's
// x-dedupe-last-error.
func TestAppURLPasswordStaysOutOfLogsAndDeadLetters(t *testing.T) {
	const secret = "pa55-S3CRET"
	var probes atomic.Int32
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if probes.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable) // one failed health check, logged
			}
			return
		}
		// No answer at all: the forward fails with a transport error,
		// whose text is what reaches the dead letter.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(app.Close)
	withSecret := strings.Replace(app.URL, "http://", "http://svc:"+secret+"@", 1)

	h := newHarness(t, func(c *config.Config) {
		c.App.URL = withSecret
		c.App.HealthURL = withSecret + "/healthz"
		c.App.HealthInterval = 100 * time.Millisecond
		c.Delivery.MaxAttempts = 2
	})
	dlq := h.rabbit.Queue("dptest.dlq.", nil)
	h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
	var buf testutil.LogBuffer
	h.logger = newLogger(config.Log{Level: "debug", Format: "json"}, &buf)
	p := h.start()
	h.rabbit.Publish(h.queue, amqp.Publishing{Body: envelope("secret-1", ""), MessageId: "secret-1"})
	testutil.Eventually(t, 15*time.Second, "dead-lettered", func() bool { return p.result(t, "dead_lettered") == 1 })
	p.stop(t)

	m, ok := h.rabbit.Get(dlq)
	if !ok {
		t.Fatal("dead-letter queue is empty")
	}
	lastErr := fmt.Sprint(m.Headers["x-dedupe-last-error"])
	if !strings.Contains(lastErr, strings.TrimPrefix(app.URL, "http://")) || strings.Contains(lastErr, secret) {
		t.Errorf("x-dedupe-last-error = %q: want the forward's error, without the password", lastErr)
	}
	log := buf.String()
	if strings.Contains(log, secret) {
		t.Errorf("the log holds the password:\n%s", log)
	}
	var start map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "dedupe-proxy starting" {
			start = l
		}
	}
	if want := strings.Replace(app.URL, "http://", "http://svc:xxxxx@", 1); start == nil || start["app"] != want {
		t.Errorf("start line %v, want app %q", start, want)
	}
	if !strings.Contains(log, "app not up yet") {
		t.Errorf("no failed health check in the log:\n%s", log)
	}
}
