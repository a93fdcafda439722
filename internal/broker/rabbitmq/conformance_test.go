package rabbitmq_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, harness{})
}

// harness gives each case its own queue and dead-letter queue on the
// shared RabbitMQ, reached through a relay of its own so a cut drops only
// that case's connections.
type harness struct{}

func (harness) Kind() string { return "rabbitmq" }

func (harness) Features() brokertest.Features {
	// No revocation: a queue has no assignment to lose. Not ordered: a
	// requeued message goes back to the queue, behind what was prefetched.
	return brokertest.Features{Requeues: true, DeadLetter: true}
}

func (harness) NewDestination(t *testing.T) brokertest.Destination {
	r := testutil.NewRabbit(t)
	uri, err := amqp.ParseURI(testutil.RabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	relay := testutil.NewRelay(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	host, port, _ := net.SplitHostPort(relay.Addr())
	uri.Host = host
	uri.Port, _ = strconv.Atoi(port)
	return &destination{
		r:     r,
		relay: relay,
		url:   uri.String(),
		queue: r.Queue("dptest.conf.", nil),
		dlq:   r.Queue("dptest.conf.dlq.", nil),
	}
}

type destination struct {
	r          *testutil.Rabbit
	relay      *testutil.Relay
	url        string
	queue, dlq string
}

func (d *destination) Queue() string { return d.queue }
func (d *destination) Topic() string { return "" }

func (d *destination) NewSource(t *testing.T, o brokertest.SourceOptions) broker.Source {
	opts := rabbitmq.Options{
		Name:             o.Name,
		URL:              d.url,
		Queue:            d.queue,
		Prefetch:         10,
		Workers:          o.Workers,
		ReconnectInitial: 50 * time.Millisecond,
		ReconnectMax:     200 * time.Millisecond,
	}
	if o.DeadLetter {
		// Through the default exchange, straight to the dead-letter queue.
		opts.DeadLetter.Mode = rabbitmq.DeadLetterPublish
		opts.DeadLetter.RoutingKey = d.dlq
	}
	return rabbitmq.New(opts)
}

func (d *destination) Publish(t *testing.T, msgs ...brokertest.Message) {
	t.Helper()
	for _, m := range msgs {
		var h amqp.Table
		if len(m.Headers) > 0 {
			h = amqp.Table{}
			for k, v := range m.Headers {
				h[k] = v
			}
		}
		d.r.Publish(d.queue, amqp.Publishing{Body: m.Body, ContentType: m.ContentType, Headers: h, MessageId: m.Key})
	}
}

func (d *destination) Cut(*testing.T) { d.relay.Cut() }

func (d *destination) Revoke(t *testing.T) { t.Fatal("rabbitmq: a queue has no assignment to revoke") }

func (d *destination) DeadLetters(t *testing.T, n int, timeout time.Duration) []brokertest.DeadLetter {
	t.Helper()
	var out []brokertest.DeadLetter
	deadline := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(deadline) {
		m, ok := d.r.Get(d.dlq)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		dl := brokertest.DeadLetter{Body: m.Body, Key: m.MessageId, Headers: map[string][]string{}}
		for k, v := range m.Headers {
			dl.Headers[k] = []string{fmt.Sprint(v)}
		}
		out = append(out, dl)
	}
	return out
}
