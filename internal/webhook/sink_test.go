package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The RabbitMQ target gone for several reconnect attempts, then back:
// one warning when the connection is lost, the attempts in between at
// debug, and one line when it is back, with down_for. Ready says why
// while it is down, and after Close.
func TestTargetDownAndUpLoggedOnce(t *testing.T) {
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	relay := tu.NewRelay(t, strings.TrimSuffix(strings.TrimPrefix(tu.RabbitURL(), "amqp://guest:guest@"), "/"))
	var logs tu.LogBuffer
	s := NewRabbitSink("amqp://guest:guest@"+relay.Addr()+"/", "", q, logs.JSONLogger())
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "not connected yet") {
		t.Fatalf("Ready before Run: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tu.Eventually(t, 10*time.Second, "connected", func() bool { return s.Ready() == nil })

	relay.SetDown(true)
	relay.Cut()
	tu.Eventually(t, 15*time.Second, "several reconnect attempts", func() bool {
		return len(logs.With(t, "DEBUG", "webhook target rabbitmq unreachable, retrying")) >= 3
	})
	if err := s.Ready(); err == nil || !strings.HasPrefix(err.Error(), "rabbitmq: ") {
		t.Fatalf("Ready with the target gone: %v", err)
	}
	if err := s.Publish(ctx, Event{Key: "k", Source: "hooks", Body: []byte("{}")}); err == nil {
		t.Fatal("Publish with the target gone: no error")
	}
	relay.SetDown(false)
	tu.Eventually(t, 15*time.Second, "connected again", func() bool { return s.Ready() == nil })

	warns := logs.With(t, "WARN", "")
	if len(warns) != 1 || warns[0]["msg"] != "webhook target rabbitmq connection lost; reconnecting" || warns[0]["err"] == "" {
		t.Fatalf("warnings: %v, want the one lost line with its error:\n%s", warns, logs.String())
	}
	up := logs.With(t, "INFO", "webhook target rabbitmq connected")
	if len(up) != 2 || up[0]["down_for"] != nil || up[1]["down_for"] == nil || up[1]["exchange"] != "" || up[1]["routing_key"] != q {
		t.Fatalf("connected lines: %v, want the first and one with down_for", up)
	}

	_ = s.Close()
	if err := s.Ready(); err == nil || err.Error() != "rabbitmq: closed" {
		t.Fatalf("Ready after Close: %v", err)
	}
}
