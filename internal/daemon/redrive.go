package daemon

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	kafkasrc "github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redisq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// NewRedriver returns the Redriver of the source named name, built from
// the options the proxy consumes it with, and that source's config. The
// error names the source or the config field at fault.
func NewRedriver(cfg *config.Config, name string) (broker.Redriver, config.Source, error) {
	i := -1
	var names []string
	for j, sc := range cfg.Sources {
		names = append(names, sc.Name)
		if sc.Name == name {
			i = j
		}
	}
	if i < 0 {
		return nil, config.Source{}, fmt.Errorf("no source named %q (the config has %s)", name, strings.Join(names, ", "))
	}
	sc := cfg.Sources[i]
	at := fmt.Sprintf("sources[%d]", i)
	var r broker.Redriver
	var err error
	switch sc.Type {
	case "rabbitmq":
		r, err = rabbitmq.NewRedriver(sc.RabbitMQOptions())
		switch {
		case errors.Is(err, broker.ErrNoDeadLetter):
			return nil, sc, fmt.Errorf("source %s has no dead letters to redrive: %s.rabbitmq.dead_letter.mode is %s", name, at, sc.RabbitMQ.DeadLetter.Mode)
		case errors.Is(err, rabbitmq.ErrNoDeadLetterQueue):
			return nil, sc, fmt.Errorf("source %s: %s.rabbitmq.dead_letter.queue is not set: name the queue its dead letters end up in (mode %s routes them through an exchange, and AMQP cannot tell which queue that exchange feeds)", name, at, sc.RabbitMQ.DeadLetter.Mode)
		}
	case "kafka":
		r, err = kafkasrc.NewRedriver(sc.KafkaOptions())
		if errors.Is(err, broker.ErrNoDeadLetter) {
			return nil, sc, fmt.Errorf("source %s has no dead letters to redrive: %s.kafka.dead_letter_topic is not set", name, at)
		}
	case "redis":
		o := sc.RedisOptions(cfg.Consumer)
		if sc.Redis.Mode == "stream" {
			r, err = redisq.NewStreamRedriver(o)
		} else {
			r, err = redisq.NewListRedriver(o)
		}
		if errors.Is(err, broker.ErrNoDeadLetter) {
			return nil, sc, fmt.Errorf("source %s has no dead letters to redrive: %s.redis.dead_letter is not set", name, at)
		}
	case "webhook":
		return nil, sc, fmt.Errorf("source %s is a webhook source: it answers the sender and has no dead letters to redrive", name)
	default:
		return nil, sc, fmt.Errorf("source %s: unknown source type %q", name, sc.Type)
	}
	if err != nil {
		return nil, sc, fmt.Errorf("source %s: %w", name, err)
	}
	return r, sc, nil
}
