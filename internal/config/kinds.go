package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// Kind is one type of source: everything the loader, the daemon, doctor,
// redrive and init choose by a source's type. Its settings are the block
// of Source named as the kind, which is the kind package's own options
// type (declared, defaulted and validated there). Adding a kind is its
// package, its block in Source and one row of Kinds.
type Kind struct {
	Name string
	// Enums are the block's settings with a fixed set of values, by
	// their path in it: the loader checks them and the schema lists them.
	Enums map[string][]string
	// Validate reports every invalid setting of the block; at is the
	// source's path, "sources[0]".
	Validate func(s *Source, at string, p *problems.List)
	// NewSource builds the source the pipeline consumes; nil for a kind
	// that is no broker (a webhook source is the daemon's own listener).
	NewSource func(s Source, env SourceEnv) (broker.Source, error)
	// NewRedriver builds the redriver of the source's dead letters; at
	// is the source's path. Its errors say which setting is at fault.
	NewRedriver func(s Source, consumer, at string) (broker.Redriver, error)
	// Check is doctor's check of the source. It changes nothing.
	Check func(c *probe.Checker, s Source, consumer string)
	// Init is the block init writes for a source of the kind, where
	// {name} and {consumer} stand for the source's and the consumer's
	// names as YAML scalars.
	Init string
	// Target is set when a webhook source can enqueue to the kind.
	Target *Target
}

// Target is a kind a webhook source in mode enqueue publishes to: its
// block under webhook.target, named as the kind.
type Target struct {
	// Validate reports every invalid setting of the block; at is the
	// target's path, "sources[0].webhook.target".
	Validate func(t WebhookTarget, at string, p *problems.List)
	NewSink  func(t WebhookTarget, log *slog.Logger) (webhook.Sink, error)
	Check    func(c *probe.Checker, t WebhookTarget, source string)
}

// SourceEnv is what a source takes from the proxy rather than from its
// block.
type SourceEnv struct {
	Consumer string
	Logger   *slog.Logger
	Metrics  *metrics.SourceMetrics
	// Key is a message's dedupe key, "" when it has none.
	Key func(*broker.Message) string
}

// Kinds are the source kinds, in the order help lists them.
var Kinds = []Kind{
	{
		Name:  "rabbitmq",
		Enums: rabbitmq.Enums,
		Validate: func(s *Source, at string, p *problems.List) {
			s.RabbitMQ.Validate(p, at, s.deadLetterBy())
		},
		NewSource: func(s Source, env SourceEnv) (broker.Source, error) {
			o := s.rabbitMQ()
			o.Logger, o.Metrics = env.Logger, env.Metrics
			return rabbitmq.New(o), nil
		},
		NewRedriver: func(s Source, _, at string) (broker.Redriver, error) {
			r, err := rabbitmq.NewRedriver(s.rabbitMQ())
			switch {
			case errors.Is(err, broker.ErrNoDeadLetter):
				return nil, fmt.Errorf("source %s has no dead letters to redrive: %s.rabbitmq.dead_letter.mode is %s", s.Name, at, s.RabbitMQ.DeadLetter.Mode)
			case errors.Is(err, rabbitmq.ErrNoDeadLetterQueue):
				return nil, fmt.Errorf("source %s: %s.rabbitmq.dead_letter.queue is not set: name the queue its dead letters end up in (mode %s routes them through an exchange, and AMQP cannot tell which queue that exchange feeds)", s.Name, at, s.RabbitMQ.DeadLetter.Mode)
			}
			return redriver(s, r, err)
		},
		Check: func(c *probe.Checker, s Source, _ string) { rabbitmq.Check(c, s.rabbitMQ()) },
		Init: `    rabbitmq:
      url: amqp://guest:guest@127.0.0.1:5672/
      # The queue must exist (the proxy does not declare it).
      queue: {name}
`,
		Target: &Target{
			Validate: func(t WebhookTarget, at string, p *problems.List) {
				if u, err := url.Parse(t.RabbitMQ.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
					p.Add(at+".rabbitmq.url", "%s", rabbitmq.URLProblem(t.RabbitMQ.URL))
				}
				if t.RabbitMQ.Exchange == "" && t.RabbitMQ.RoutingKey == "" {
					p.Add(at+".rabbitmq", "needs an exchange or a routing_key (the default exchange routes by queue name)")
				}
			},
			NewSink: func(t WebhookTarget, log *slog.Logger) (webhook.Sink, error) {
				return webhook.NewRabbitSink(t.RabbitMQ.URL, t.RabbitMQ.Exchange, t.RabbitMQ.RoutingKey, log), nil
			},
			Check: func(c *probe.Checker, t WebhookTarget, source string) {
				rabbitmq.CheckTarget(c, source, t.RabbitMQ.URL, t.RabbitMQ.Exchange, t.RabbitMQ.RoutingKey)
			},
		},
	},
	{
		Name:  "kafka",
		Enums: kafka.Enums,
		Validate: func(s *Source, at string, p *problems.List) {
			s.Kafka.Validate(p, at, s.deadLetterBy())
		},
		NewSource: func(s Source, env SourceEnv) (broker.Source, error) {
			o := s.kafka()
			o.Logger, o.Metrics = env.Logger, env.Metrics
			// Key order: a record without a record key waits only for
			// earlier messages with its dedupe key.
			o.OrderKey = env.Key
			return kafka.New(o)
		},
		NewRedriver: func(s Source, _, at string) (broker.Redriver, error) {
			r, err := kafka.NewRedriver(s.kafka())
			if errors.Is(err, broker.ErrNoDeadLetter) {
				return nil, fmt.Errorf("source %s has no dead letters to redrive: %s.kafka.dead_letter_topic is not set", s.Name, at)
			}
			return redriver(s, r, err)
		},
		Check: func(c *probe.Checker, s Source, _ string) { kafka.Check(c, s.kafka()) },
		Init: `    kafka:
      brokers: ["127.0.0.1:9092"]
      topics: [{name}]
      # Every replica of this consumer uses the same group.
      group: {consumer}
`,
		Target: &Target{
			Validate: func(t WebhookTarget, at string, p *problems.List) {
				k := t.Kafka
				if len(k.Brokers) == 0 {
					p.Add(at+".kafka.brokers", "must list at least one host:port")
				}
				kafka.ValidateBrokers(p, at+".kafka.brokers", k.Brokers)
				if k.Topic == "" {
					p.Add(at+".kafka.topic", "must be set")
				}
				kafka.ValidateSecurity(p, at+".kafka", k.SASL, k.TLS)
			},
			NewSink: func(t WebhookTarget, log *slog.Logger) (webhook.Sink, error) {
				o := t.Kafka
				o.Logger, o.ConfigPath = log, "webhook.target.kafka"
				return webhook.NewKafkaSink(o)
			},
			Check: func(c *probe.Checker, t WebhookTarget, source string) {
				o := t.Kafka
				o.ConfigPath = "webhook.target.kafka"
				kafka.CheckTarget(c, source, o)
			},
		},
	},
	{
		Name:  "redis",
		Enums: redissource.Enums,
		Validate: func(s *Source, at string, p *problems.List) {
			s.Redis.Validate(p, at, s.deadLetterBy())
		},
		NewSource: func(s Source, env SourceEnv) (broker.Source, error) {
			o := s.redis(env.Consumer)
			o.Logger, o.Metrics = env.Logger, env.Metrics
			if o.Mode == redissource.ModeStream {
				return redissource.NewStream(o)
			}
			return redissource.New(o)
		},
		NewRedriver: func(s Source, consumer, at string) (broker.Redriver, error) {
			o := s.redis(consumer)
			var r broker.Redriver
			var err error
			if o.Mode == redissource.ModeStream {
				r, err = redissource.NewStreamRedriver(o)
			} else {
				r, err = redissource.NewListRedriver(o)
			}
			if errors.Is(err, broker.ErrNoDeadLetter) {
				return nil, fmt.Errorf("source %s has no dead letters to redrive: %s.redis.dead_letter is not set", s.Name, at)
			}
			return redriver(s, r, err)
		},
		Check: func(c *probe.Checker, s Source, consumer string) { redissource.Check(c, s.redis(consumer)) },
		Init: `    redis:
      addrs: ["127.0.0.1:6379"]
      # list: producers RPUSH to queue (BabelQueue); stream: they XADD to stream.
      mode: list
      queue: {name}
`,
	},
	{
		Name:     "webhook",
		Validate: func(s *Source, at string, p *problems.List) { s.validateWebhook(at, p) },
		NewRedriver: func(s Source, _, _ string) (broker.Redriver, error) {
			return nil, fmt.Errorf("source %s is a webhook source: it answers the sender and has no dead letters to redrive", s.Name)
		},
		Check: func(c *probe.Checker, s Source, _ string) {
			w := s.Webhook
			c.Listen(fmt.Sprintf("webhook listener (source %s)", s.Name), w.Listen)
			if w.Mode != "enqueue" {
				return
			}
			if t := targets[w.Target.Broker]; t != nil {
				t.Check(c, w.Target, s.Name)
			}
		},
		Init: `    webhook:
      # Senders POST here; each request is verified, its event id claimed,
      # then forwarded to app.url + path.
      listen: 127.0.0.1:8088
      path: /webhook
      profile: standard-webhooks
      # The signing secret is read from this variable: set it.
      secrets: ["env:` + InitSecretVar + `"]
      mode: forward
`,
	},
}

// InitSecretVar is the variable a webhook source written by init reads
// its signing secret from.
const InitSecretVar = "WEBHOOK_SECRET"

// targets are the Target of each kind that has one, by name. Built at
// init: a row of Kinds reaching Kinds itself would be an initialization
// cycle.
var targets map[string]*Target

func init() {
	targets = map[string]*Target{}
	for i := range Kinds {
		if Kinds[i].Target != nil {
			targets[Kinds[i].Name] = Kinds[i].Target
		}
	}
}

// KindOf is the kind named name, nil for none.
func KindOf(name string) *Kind {
	for i := range Kinds {
		if Kinds[i].Name == name {
			return &Kinds[i]
		}
	}
	return nil
}

// SourceTypes are the kinds of source, in the order help lists them.
func SourceTypes() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Name
	}
	return names
}

// TargetBrokers are the kinds a webhook source can enqueue to.
func TargetBrokers() []string {
	var names []string
	for _, k := range Kinds {
		if k.Target != nil {
			names = append(names, k.Name)
		}
	}
	return names
}

// redriver names the source in an error no row explained.
func redriver(s Source, r broker.Redriver, err error) (broker.Redriver, error) {
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	return r, nil
}

// deadLetterBy names the source's settings that dead-letter a message.
func (s *Source) deadLetterBy() []string {
	var by []string
	if s.OnMissingKey == "dead_letter" {
		by = append(by, "on_missing_key")
	}
	if s.KeyReuse == "dead_letter" {
		by = append(by, "key_reuse")
	}
	return by
}

// The blocks with what the source takes from the rest of the config.

func (s Source) rabbitMQ() rabbitmq.Options {
	o := s.RabbitMQ
	o.Name = s.Name
	return o
}

func (s Source) kafka() kafka.Options {
	o := s.Kafka
	o.Name = s.Name
	return o
}

// redis: the consumer names the stream's group (every replica of one
// consumer shares the entries, another consumer reads them all).
func (s Source) redis(consumer string) redissource.Options {
	o := s.Redis
	o.Name, o.Group = s.Name, consumer
	return o
}
