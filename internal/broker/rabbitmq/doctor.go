package rabbitmq

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
)

// Check is doctor's check of a RabbitMQ source: the connection, its
// queue (a passive declare, which also gives the consumer count), what
// RabbitMQ does with a message past the queue's delivery limit, and where
// its dead letters go. It changes nothing.
func Check(c *probe.Checker, r Options) {
	conn := dialCheck(c, r.Name, r.URL)
	if conn == nil {
		return
	}
	defer conn.Close()
	check := fmt.Sprintf("rabbitmq queue %s (source %s)", r.Queue, r.Name)
	q, exists := passiveQueue(c, conn, check, r.Queue)
	if exists {
		c.Add(probe.OK, check, "exists: %d messages ready, %d consumers", q.Messages, q.Consumers)
	}
	var args QueueArgs
	argsErr := errors.New("the queue does not exist")
	if exists {
		args, argsErr = ReadQueueArgs(conn, r.Queue)
		check = fmt.Sprintf("rabbitmq delivery limit (source %s)", r.Name)
		if argsErr != nil {
			c.Add(probe.Warn, check, "not checked: cannot read queue %s's arguments (%v); a quorum queue drops a message past its delivery limit (RabbitMQ 4.x: 20 by default) unless it has a dead-letter exchange: check with `rabbitmqctl list_queues name arguments policy effective_policy_definition`", r.Queue, argsErr)
		} else if risk, finding := args.DeliveryLimitRisk(serverVersion(conn)); risk {
			c.Add(probe.Warn, check, "%s", finding)
		} else {
			c.Add(probe.OK, check, "%s", finding)
		}
	}
	dl := r.DeadLetter
	check = fmt.Sprintf("rabbitmq dead letters (source %s)", r.Name)
	switch dl.Mode {
	case DeadLetterNone:
		c.Add(probe.OK, check, "mode none: a message that fails for good is requeued, not dead-lettered")
	case DeadLetterDLX:
		switch {
		case argsErr == nil && args.HasDeadLetterExchange:
			c.Add(probe.OK, check, "mode dlx: queue %s has x-dead-letter-exchange %q (whether it routes anywhere is not checked)", r.Queue, args.DeadLetterExchange)
		case argsErr == nil:
			c.Add(probe.Warn, check, "mode dlx: queue %s has no x-dead-letter-exchange argument; unless a policy sets one (AMQP cannot read policies), rejected messages are dropped by RabbitMQ — check with `rabbitmqctl list_queues name arguments policy`", r.Queue)
		default:
			c.Add(probe.Warn, check, "mode dlx: cannot check that queue %s has a dead-letter exchange (x-dead-letter-exchange argument or policy); without one, rejected messages are dropped by RabbitMQ — check with `rabbitmqctl list_queues name arguments policy`", r.Queue)
		}
	case DeadLetterPublish:
		publishTarget(c, conn, check, dl.Exchange, dl.RoutingKey)
	}
}

func serverVersion(conn *amqp.Connection) string {
	v, _ := conn.Properties["version"].(string)
	return v
}

// publishTarget checks where a publish with exchange and routing key
// goes: the exchange exists, or with the default exchange, the queue
// named by the routing key.
func publishTarget(c *probe.Checker, conn *amqp.Connection, check, exchange, routingKey string) {
	if exchange == "" {
		if q, ok := passiveQueue(c, conn, check, routingKey); ok {
			c.Add(probe.OK, check, "default exchange, queue %s exists (%d messages ready)", routingKey, q.Messages)
		}
		return
	}
	ch, err := conn.Channel()
	if err != nil {
		c.Add(probe.Fail, check, "cannot open a channel: %v", err)
		return
	}
	// A failed passive declare closes the channel: one channel per check.
	defer ch.Close()
	if err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		c.Add(probe.Fail, check, "exchange %s: %s", exchange, amqpFinding(err, "rabbitmqadmin declare exchange name="+exchange+" type=direct durable=true"))
		return
	}
	c.Add(probe.OK, check, "exchange %s exists (whether a queue is bound for routing key %q is not checked)", exchange, routingKey)
}

func dialCheck(c *probe.Checker, source, rawURL string) *amqp.Connection {
	check := fmt.Sprintf("rabbitmq %s (source %s)", probe.RedactURL(rawURL), source)
	conn, err := Dial(rawURL, "doctor", c.Timeout)
	if err != nil {
		c.Add(probe.Fail, check, "cannot connect: %v", err)
		return nil
	}
	c.Add(probe.OK, check, "connected (RabbitMQ %s)", serverVersion(conn))
	return conn
}

// passiveQueue looks the queue up without creating it, on a channel of
// its own: a missing queue closes the channel.
func passiveQueue(c *probe.Checker, conn *amqp.Connection, check, name string) (amqp.Queue, bool) {
	ch, err := conn.Channel()
	if err != nil {
		c.Add(probe.Fail, check, "cannot open a channel: %v", err)
		return amqp.Queue{}, false
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		c.Add(probe.Fail, check, "queue %s: %s", name, amqpFinding(err, "amqp-declare-queue --url \"$AMQP_URL\" --durable -q "+name+" (package amqp-tools, over AMQP; with the management plugin: rabbitmqadmin declare queue name="+name+" durable=true)"))
		return amqp.Queue{}, false
	}
	return q, true
}

// amqpFinding says what err means; for a missing queue or exchange, also
// the command that creates it (create names it, with the settings the
// proxy expects).
func amqpFinding(err error, create string) string {
	var e *amqp.Error
	if errors.As(err, &e) {
		switch e.Code {
		case amqp.NotFound:
			return "does not exist (the proxy does not create it); create it, e.g. " + create
		case amqp.AccessRefused:
			return "access refused: " + e.Reason
		}
		return e.Reason
	}
	return err.Error()
}

// CheckTarget is doctor's check of a webhook source's RabbitMQ target:
// the connection, and where a publish with exchange and routing key goes.
func CheckTarget(c *probe.Checker, source, rawURL, exchange, routingKey string) {
	conn := dialCheck(c, source, rawURL)
	if conn == nil {
		return
	}
	defer conn.Close()
	publishTarget(c, conn, fmt.Sprintf("webhook target (source %s)", source), exchange, routingKey)
}
