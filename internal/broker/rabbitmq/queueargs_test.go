package rabbitmq_test

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// ReadQueueArgs reads a queue's type, delivery limit and dead-letter
// exchange over AMQP alone, whatever other arguments and flags the queue
// has, and leaves the queue as it was.
func TestReadQueueArgs(t *testing.T) {
	r := testutil.NewRabbit(t)
	for _, tc := range []struct {
		name     string
		durable  bool
		args     amqp.Table
		want     rabbitmq.QueueArgs
		risk     bool
		finding  string
		version3 string
	}{
		{name: "quorum limit no dlx", durable: true,
			args: amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(10)},
			want: rabbitmq.QueueArgs{Type: "quorum", HasDeliveryLimit: true, DeliveryLimit: 10}, risk: true,
			finding: "x-delivery-limit 10, and no x-dead-letter-exchange argument: RabbitMQ drops a message past its delivery limit"},
		{name: "quorum limit dlx and others", durable: true,
			args: amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(5), "x-dead-letter-exchange": "dlx.it's",
				"x-max-length": int32(1000), "x-dead-letter-routing-key": "rk", "x-overflow": "reject-publish"},
			want:    rabbitmq.QueueArgs{Type: "quorum", HasDeliveryLimit: true, DeliveryLimit: 5, HasDeadLetterExchange: true, DeadLetterExchange: "dlx.it's"},
			finding: `dead-letter exchange "dlx.it's": a message past the limit is dead-lettered there`},
		{name: "quorum no limit", durable: true,
			args:    amqp.Table{"x-queue-type": "quorum"},
			want:    rabbitmq.QueueArgs{Type: "quorum"},
			finding: "no x-delivery-limit argument (RabbitMQ 3.10.8 sets none by default; 4.x sets 20)"},
		{name: "classic transient", durable: false,
			args:    amqp.Table{"x-message-ttl": int64(60000), "x-dead-letter-exchange": ""},
			want:    rabbitmq.QueueArgs{HasDeadLetterExchange: true},
			finding: "queue type classic (no x-queue-type argument): no delivery limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := testutil.UniqueName("dptest.qargs.")
			if _, err := r.Ch.QueueDeclare(name, tc.durable, false, false, false, tc.args); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if ch, err := r.Conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(name, false, false, false)
					_ = ch.Close()
				}
			})
			got, err := rabbitmq.ReadQueueArgs(r.Conn, name)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ReadQueueArgs = %+v, want %+v", got, tc.want)
			}
			risk, finding := got.DeliveryLimitRisk("3.10.8")
			if risk != tc.risk || !strings.Contains(finding, tc.finding) {
				t.Errorf("DeliveryLimitRisk = %v %q, want %v and %q", risk, finding, tc.risk, tc.finding)
			}
			// The queue still takes a declare with its own arguments: nothing changed.
			if _, err := r.Ch.QueueDeclare(name, tc.durable, false, false, false, tc.args); err != nil {
				t.Errorf("the queue changed: %v", err)
			}
		})
	}
}

// A queue that does not exist is not created by reading its arguments.
func TestReadQueueArgsNeverCreates(t *testing.T) {
	r := testutil.NewRabbit(t)
	name := testutil.UniqueName("dptest.qargs.none.")
	if _, err := rabbitmq.ReadQueueArgs(r.Conn, name); err == nil {
		t.Error("no error for a missing queue")
	}
	ch, err := r.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err == nil {
		_, _ = ch.QueueDelete(name, false, false, false)
		t.Fatal("ReadQueueArgs created the queue")
	}
}

// RabbitMQ 4.x gives a quorum queue without x-delivery-limit a limit of
// 20; a negative limit there means none.
func TestDeliveryLimitRiskOnRabbitMQ4(t *testing.T) {
	risk, finding := rabbitmq.QueueArgs{Type: "quorum"}.DeliveryLimitRisk("4.1.0")
	if !risk || !strings.Contains(finding, "default limit of 20") {
		t.Errorf("4.x, no limit argument: %v %q", risk, finding)
	}
	if risk, finding := (rabbitmq.QueueArgs{Type: "quorum", HasDeliveryLimit: true, DeliveryLimit: -1}).DeliveryLimitRisk("4.1.0"); risk {
		t.Errorf("4.x, limit -1: %v %q", risk, finding)
	}
}
