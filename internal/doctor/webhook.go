package doctor

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// webhookSource checks a webhook listener's address and, in mode
// enqueue, the broker it publishes to.
func (c *checker) webhookSource(s config.Source) {
	w := s.Webhook
	c.listen(fmt.Sprintf("webhook listener (source %s)", s.Name), w.Listen)
	if w.Mode != "enqueue" {
		return
	}
	t := w.Target
	switch t.Broker {
	case "rabbitmq":
		conn := c.rabbitDial(s.Name, t.RabbitMQ.URL)
		if conn == nil {
			return
		}
		defer conn.Close()
		c.publishTarget(conn, fmt.Sprintf("webhook target (source %s)", s.Name), t.RabbitMQ.Exchange, t.RabbitMQ.RoutingKey)
	case "kafka":
		check := fmt.Sprintf("kafka %s (webhook source %s)", strings.Join(t.Kafka.Brokers, ","), s.Name)
		cl, err := kgo.NewClient(kgo.SeedBrokers(t.Kafka.Brokers...), kgo.DialTimeout(c.timeout), kgo.ClientID("dedupe-proxy-doctor"))
		if err != nil {
			c.add(Fail, check, "%v", err)
			return
		}
		defer cl.Close()
		c.kafkaTopics(cl, check, s.Name, []string{t.Kafka.Topic}, "")
	}
}
