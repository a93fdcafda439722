//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

type rabbitEnv struct {
	rabbit *testutil.Rabbit
	relay  *testutil.Relay
	queue  string
}

func (e *rabbitEnv) name() string { return "RabbitMQ" }

func (e *rabbitEnv) sourceYAML() string {
	u := strings.Replace(testutil.RabbitURL(), "127.0.0.1:5672", e.relay.Addr(), 1)
	return fmt.Sprintf(`sources:
  - name: payments
    type: rabbitmq
    path: /payments
    rabbitmq:
      url: %s
      queue: %s
      prefetch: 64
      workers: 16
      reconnect_initial: 100ms
      reconnect_max: 2s
`, u, e.queue)
}

func (e *rabbitEnv) killEvery() time.Duration { return 2500 * time.Millisecond }

func (e *rabbitEnv) publisher(t *testing.T, _ bool) func([][]byte) {
	conn, err := amqp.Dial(testutil.RabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return func(bodies [][]byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var pending []*amqp.DeferredConfirmation
		for _, b := range bodies {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", e.queue, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: b})
			if err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			pending = append(pending, dc)
		}
		for _, dc := range pending {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Errorf("publish not confirmed: %v", err)
			}
		}
	}
}

func (e *rabbitEnv) cut() { e.relay.Cut() }

func (e *rabbitEnv) pending(t *testing.T) int { return e.rabbit.Ready(e.queue) }

func TestChaosRabbitMQ(t *testing.T) {
	r := testutil.NewRabbit(t)
	env := &rabbitEnv{rabbit: r, relay: testutil.NewRelay(t, "127.0.0.1:5672"), queue: r.Queue("dptest.chaos.", nil)}
	runChaos(t, env)
}
