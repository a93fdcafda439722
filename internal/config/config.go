// Package config loads dedupe-proxy's one YAML file. Every field has a
// default, every field can be overridden by an environment variable named
// after its path (DEDUPE_PROXY_APP_TIMEOUT, DEDUPE_PROXY_SOURCES_0_RABBITMQ_URL),
// unknown keys are errors, and Validate reports every problem at once, each
// with its field path, so an operator fixes a file in one round.
package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/rabbitmq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// Config is the whole file.
type Config struct {
	// Consumer names this consumer; every stored key is
	// "<prefix><consumer>:<key space>:<key>" (prefix: seenset.redis.prefix)
	// so several consumers can share one Redis without seeing each other's
	// keys.
	Consumer        string        `mapstructure:"consumer"`
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// HeapFloor is the Go heap size below which no collection starts
	// (internal/gcfloor); 0 leaves GOGC alone.
	HeapFloor ByteSize `mapstructure:"heap_floor"`
	Log       Log      `mapstructure:"log"`
	Admin     Admin    `mapstructure:"admin"`
	App       App      `mapstructure:"app"`
	SeenSet   SeenSet  `mapstructure:"seenset"`
	Delivery  Delivery `mapstructure:"delivery"`
	Sources   []Source `mapstructure:"-"`
}

// Log configures slog.
type Log struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
	// Bodies: log message bodies in failure lines. Off by default: bodies
	// carry payment data.
	Bodies bool `mapstructure:"bodies"`
}

// Admin is the health, metrics and key-inspection listener.
type Admin struct {
	Listen    string `mapstructure:"listen"`
	Token     string `mapstructure:"token"`
	TokenFile string `mapstructure:"token_file"`
	Pprof     bool   `mapstructure:"pprof"`
}

// App is the unchanged consumer the proxy forwards to.
type App struct {
	URL    string `mapstructure:"url"`
	Socket string `mapstructure:"socket"`
	// Timeout is how long the app may take before a request counts as
	// slow; MaxRequestTime how long a slow request is still waited for,
	// with its key held, before it is given up (and a second request for
	// the key may overlap it).
	Timeout          time.Duration `mapstructure:"timeout"`
	MaxRequestTime   time.Duration `mapstructure:"max_request_time"`
	MaxConns         int           `mapstructure:"max_conns"`
	MaxResponseBytes ByteSize      `mapstructure:"max_response_bytes"`
	RetryStatuses    []string      `mapstructure:"retry_statuses"`
	HeaderAllowlist  []string      `mapstructure:"header_allowlist"`
	HealthURL        string        `mapstructure:"health_url"`
	HealthInterval   time.Duration `mapstructure:"health_interval"`
	// DaprStatus honours Dapr's {"status": "RETRY" | "DROP"} in a 2xx
	// answer; false makes every 2xx a success whatever its body.
	DaprStatus bool `mapstructure:"dapr_status"`
}

// Forward is the app block as the forwarder takes it: the one mapping,
// for the proxy's forwards and every probe of the app's health (which
// narrow it to their own timeout and one connection).
func (a App) Forward() forward.Config {
	return forward.Config{
		URL:              a.URL,
		Socket:           a.Socket,
		Timeout:          a.Timeout,
		MaxRequestTime:   a.MaxRequestTime,
		IgnoreAppStatus:  !a.DaprStatus,
		MaxConns:         a.MaxConns,
		MaxResponseBytes: int64(a.MaxResponseBytes),
		RetryStatuses:    a.RetryStatuses,
		HeaderAllowlist:  a.HeaderAllowlist,
	}
}

// SeenSet is the shared store of processed keys.
type SeenSet struct {
	Backend      string        `mapstructure:"backend"`
	TTL          time.Duration `mapstructure:"ttl"`
	Lease        time.Duration `mapstructure:"lease"`
	OnStoreError string        `mapstructure:"on_store_error"`
	Redis        Redis         `mapstructure:"redis"`
}

// Redis is the seen-set's Redis: one server, a Sentinel set
// (MasterName) or a Cluster (several Addrs), as go-redis'
// UniversalClient decides. The store's own options are the block.
type Redis = seenset.RedisOptions

// Delivery is the retry policy shared by all sources.
type Delivery struct {
	MaxAttempts    int           `mapstructure:"max_attempts"`
	BackoffInitial time.Duration `mapstructure:"backoff_initial"`
	BackoffMax     time.Duration `mapstructure:"backoff_max"`
	Jitter         float64       `mapstructure:"jitter"`
	BusyDelay      time.Duration `mapstructure:"busy_delay"`
	CommitAttempts int           `mapstructure:"commit_attempts"`
	MaxBodyBytes   ByteSize      `mapstructure:"max_body_bytes"`
}

// Source is one queue or topic set with its key rules and app path.
type Source struct {
	Name         string   `mapstructure:"name"`
	Type         string   `mapstructure:"type"`
	Path         string   `mapstructure:"path"`
	Key          []string `mapstructure:"key"`
	OnMissingKey string   `mapstructure:"on_missing_key"`
	// KeyReuse is what becomes of a message whose key is done for another
	// body: warn (ack as a duplicate, log and count), dead_letter, or
	// forward (to the app, marked X-Dedupe-Key-Reused: true).
	KeyReuse string `mapstructure:"key_reuse"`
	// KeyReuseFields are the JSON paths (key rules' syntax) the body
	// digest covers; empty: the whole body.
	KeyReuseFields []string `mapstructure:"key_reuse_fields"`
	// KeySpace scopes this source's stored keys:
	// "<prefix><consumer>:<key_space>:<key>"
	// ("<prefix><consumer>:webhook/<key_space>:<key>" for a webhook source).
	// Empty means the source's own name, so the same id on two sources of
	// one consumer (two jobs) is two keys. Sources that must share one key
	// space (one stream consumed from two queues) set the same value; a
	// webhook source and a broker source never share one.
	KeySpace string `mapstructure:"key_space"`
	// MaxRedeliveryDelay is the longest time after which this source may
	// deliver a message again (a delayed retry loop, a producer's retry
	// window, Kafka retention). 0 means unknown. When it exceeds
	// seenset.ttl the proxy warns at start: such a duplicate is forwarded
	// again.
	MaxRedeliveryDelay time.Duration `mapstructure:"max_redelivery_delay"`
	// ContentType is the Content-Type the app gets for every message of
	// the source, whatever the message says; empty: the message's own,
	// else application/json for a JSON body, else application/octet-stream.
	ContentType string `mapstructure:"content_type"`
	// One block per kind (Kinds), named as the kind; only the block of
	// the source's type is read. Each is its kind's own options type.
	RabbitMQ RabbitMQ    `mapstructure:"rabbitmq"`
	Kafka    Kafka       `mapstructure:"kafka"`
	Redis    RedisSource `mapstructure:"redis"`
	Webhook  Webhook     `mapstructure:"webhook"`
}

// The source kinds' blocks are their packages' options, as they are.
type (
	RabbitMQ         = rabbitmq.Options
	RabbitDeadLetter = rabbitmq.DeadLetter
	Kafka            = kafka.Options
	KafkaSASL        = kafka.SASL
	KafkaTLS         = kafka.TLS
	RedisSource      = redissource.Options
)

// Webhook is an HTTP listener for signed webhooks (type webhook): each
// request is verified, its event key claimed in the seen-set, then
// published to Target (mode enqueue) or forwarded to the app at the
// source's path (mode forward).
type Webhook struct {
	Listen  string `mapstructure:"listen"`
	Path    string `mapstructure:"path"`
	Profile string `mapstructure:"profile"`
	// Secrets are "env:<VARIABLE>" or "file:<path>", never the secret
	// itself: the config file is a ConfigMap. Any of them verifies a
	// request (rotation).
	Secrets   []string      `mapstructure:"secrets"`
	Tolerance time.Duration `mapstructure:"tolerance"`
	// KeyFrom: "profile" takes the sender's event id (generic-hmac and
	// none have none and use the key rules), "rules" the source's key.
	KeyFrom      string        `mapstructure:"key_from"`
	Mode         string        `mapstructure:"mode"`
	Target       WebhookTarget `mapstructure:"target"`
	MaxBodyBytes ByteSize      `mapstructure:"max_body_bytes"`
	// MaxConcurrent bounds the verified requests being stored at once;
	// MaxUnverified, on its own, the requests still being read and
	// verified, each for at most ReadTimeout.
	MaxConcurrent int           `mapstructure:"max_concurrent"`
	MaxUnverified int           `mapstructure:"max_unverified"`
	ReadTimeout   time.Duration `mapstructure:"read_timeout"`
	// AllowUnsignedOn acknowledges profile none on a listener that is not
	// loopback; it must equal listen, so moving the listener asks again.
	AllowUnsignedOn string         `mapstructure:"allow_unsigned_on"`
	Generic         WebhookGeneric `mapstructure:"generic"`
}

// WebhookTarget is where mode enqueue publishes: Broker names the block.
type WebhookTarget struct {
	Broker   string          `mapstructure:"broker"`
	RabbitMQ WebhookRabbitMQ `mapstructure:"rabbitmq"`
	Kafka    WebhookKafka    `mapstructure:"kafka"`
}

// WebhookRabbitMQ publishes to Exchange with RoutingKey (the default
// exchange "" routes to the queue named by the routing key).
type WebhookRabbitMQ struct {
	URL        string `mapstructure:"url"`
	Exchange   string `mapstructure:"exchange"`
	RoutingKey string `mapstructure:"routing_key"`
}

// WebhookKafka produces to Topic, with the same TLS and SASL settings
// as a Kafka source: the producer's own options.
type WebhookKafka = kafka.ProducerOptions

// WebhookGeneric describes a generic-hmac sender.
type WebhookGeneric struct {
	Header          string `mapstructure:"header"`
	Prefix          string `mapstructure:"prefix"`
	Encoding        string `mapstructure:"encoding"`
	Algorithm       string `mapstructure:"algorithm"`
	TimestampHeader string `mapstructure:"timestamp_header"`
}

// Default is the configuration with every default filled in; Load starts
// from it.
func Default() Config {
	return Config{
		Consumer:        "",
		ShutdownTimeout: 30 * time.Second,
		HeapFloor:       16 << 20,
		Log:             Log{Level: "info", Format: "json"},
		Admin:           Admin{Listen: "127.0.0.1:9090"},
		App: App{
			URL:              "http://127.0.0.1:8080",
			Timeout:          10 * time.Second,
			MaxRequestTime:   5 * time.Minute,
			MaxConns:         64,
			MaxResponseBytes: 64 << 10,
			RetryStatuses:    []string{"5xx", "408", "429"},
			HeaderAllowlist:  []string{},
			HealthInterval:   2 * time.Second,
			DaprStatus:       true,
		},
		SeenSet: SeenSet{
			Backend:      "redis",
			TTL:          24 * time.Hour,
			Lease:        30 * time.Second,
			OnStoreError: "fail_closed",
			Redis: Redis{
				Addrs:        []string{"127.0.0.1:6379"},
				Prefix:       "dedupe:",
				DialTimeout:  2 * time.Second,
				ReadTimeout:  2 * time.Second,
				WriteTimeout: 2 * time.Second,
				PoolSize:     64,
				WaitTimeout:  500 * time.Millisecond,
			},
		},
		Delivery: Delivery{
			MaxAttempts:    5,
			BackoffInitial: 200 * time.Millisecond,
			BackoffMax:     30 * time.Second,
			Jitter:         0.2,
			BusyDelay:      time.Second,
			CommitAttempts: 5,
			MaxBodyBytes:   1 << 20,
		},
	}
}

// DefaultSource is what every entry of sources starts from.
func DefaultSource() Source {
	return Source{
		Type:         "rabbitmq",
		Path:         "/",
		Key:          []string{"json:meta.id"},
		OnMissingKey: "forward",
		KeyReuse:     "warn",
		RabbitMQ:     rabbitmq.DefaultOptions(),
		Kafka:        kafka.DefaultOptions(),
		Redis:        redissource.DefaultOptions(),
		Webhook: Webhook{
			Listen:    "127.0.0.1:8088",
			Path:      "/webhook",
			Profile:   "standard-webhooks",
			Tolerance: 5 * time.Minute,
			KeyFrom:   "profile",
			Mode:      "enqueue",
			Target: WebhookTarget{
				Broker:   "rabbitmq",
				RabbitMQ: WebhookRabbitMQ{URL: "amqp://guest:guest@127.0.0.1:5672/"},
				Kafka:    WebhookKafka{Brokers: []string{"127.0.0.1:9092"}},
			},
			MaxBodyBytes:  1 << 20,
			MaxConcurrent: 256,
			MaxUnverified: webhook.DefaultMaxUnverified,
			ReadTimeout:   10 * time.Second,
			Generic:       WebhookGeneric{Encoding: "hex", Algorithm: "sha256"},
		},
	}
}

// KeySpaceName is the source's key space: key_space, or its name.
func (s Source) KeySpaceName() string {
	if s.KeySpace != "" {
		return s.KeySpace
	}
	return s.Name
}

// StoredKeySpace is the key-space segment of the source's stored keys,
// "<prefix><consumer>:<segment>:<key>": its key space, or for a webhook source
// "webhook/<key space>", which no broker source's key space can spell.
func (s Source) StoredKeySpace() string {
	if s.Type == "webhook" {
		return webhook.KeySpaceSegment(s.KeySpaceName())
	}
	return s.KeySpaceName()
}

// KeySpaces lists the consumer's stored key spaces (StoredKeySpace) once
// each, in source order: what the key API's space names.
func (c *Config) KeySpaces() []string {
	var out []string
	for _, s := range c.Sources {
		if n := s.StoredKeySpace(); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (s Source) String() string { return fmt.Sprintf("%s (%s)", s.Name, s.Type) }
