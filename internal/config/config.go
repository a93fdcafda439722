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

	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// Config is the whole file.
type Config struct {
	// Consumer names this consumer; every stored key is
	// "<consumer>:<key space>:<key>" so several consumers can share one
	// Redis without seeing each other's keys.
	Consumer        string        `mapstructure:"consumer"`
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	Log             Log           `mapstructure:"log"`
	Admin           Admin         `mapstructure:"admin"`
	App             App           `mapstructure:"app"`
	SeenSet         SeenSet       `mapstructure:"seenset"`
	Delivery        Delivery      `mapstructure:"delivery"`
	Sources         []Source      `mapstructure:"-"`
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

// SeenSet is the shared store of processed keys.
type SeenSet struct {
	Backend      string        `mapstructure:"backend"`
	TTL          time.Duration `mapstructure:"ttl"`
	Lease        time.Duration `mapstructure:"lease"`
	OnStoreError string        `mapstructure:"on_store_error"`
	Redis        Redis         `mapstructure:"redis"`
}

// Redis addresses one server, a Sentinel set (MasterName) or a Cluster
// (several Addrs), as go-redis' UniversalClient decides.
type Redis struct {
	Addrs        []string      `mapstructure:"addrs"`
	MasterName   string        `mapstructure:"master_name"`
	Username     string        `mapstructure:"username"`
	Password     string        `mapstructure:"password"`
	DB           int           `mapstructure:"db"`
	TLS          bool          `mapstructure:"tls"`
	Prefix       string        `mapstructure:"prefix"`
	DialTimeout  time.Duration `mapstructure:"dial_timeout"`
	ReadTimeout  time.Duration `mapstructure:"read_timeout"`
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	PoolSize     int           `mapstructure:"pool_size"`
	// WaitReplicas > 0: every claim and commit waits until that many
	// replicas of its master acknowledged it (Redis WAIT), so a failover
	// cannot lose it; fewer within WaitTimeout is a store error.
	WaitReplicas int           `mapstructure:"wait_replicas"`
	WaitTimeout  time.Duration `mapstructure:"wait_timeout"`
	// HashKeysOver > 0 stores keys longer than that many bytes as their
	// SHA-256; every replica of a consumer must agree on it.
	HashKeysOver int `mapstructure:"hash_keys_over"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (their requirepass or ACL user), which are separate from
	// the data servers' Username and Password: with master_name only.
	SentinelUsername string `mapstructure:"sentinel_username"`
	SentinelPassword string `mapstructure:"sentinel_password"`
}

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
	// KeySpace scopes this source's stored keys: "<consumer>:<key_space>:<key>"
	// ("<consumer>:webhook/<key_space>:<key>" for a webhook source).
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
	ContentType string      `mapstructure:"content_type"`
	RabbitMQ    RabbitMQ    `mapstructure:"rabbitmq"`
	Kafka       Kafka       `mapstructure:"kafka"`
	Redis       RedisSource `mapstructure:"redis"`
	Webhook     Webhook     `mapstructure:"webhook"`
}

// RedisSource consumes a Redis list (mode list, BabelQueue's reliable
// queue) or a stream through a consumer group (mode stream).
type RedisSource struct {
	// Addrs are one server's host:port or several Cluster nodes'; URL
	// (redis:// or rediss://) is the alternative for one server.
	Addrs    []string `mapstructure:"addrs"`
	URL      string   `mapstructure:"url"`
	Username string   `mapstructure:"username"`
	Password string   `mapstructure:"password"`
	DB       int      `mapstructure:"db"`
	TLS      bool     `mapstructure:"tls"`
	Mode     string   `mapstructure:"mode"`
	// Queue is the list producers RPUSH to (mode list); Stream the
	// stream they XADD to (mode stream).
	Queue   string `mapstructure:"queue"`
	Stream  string `mapstructure:"stream"`
	Workers int    `mapstructure:"workers"`
	// HeartbeatTTL (mode list): a replica whose heartbeat is older has
	// its processing list given back to the queue by a live one.
	HeartbeatTTL time.Duration `mapstructure:"heartbeat_ttl"`
	// TakeBabelQueueProcessing (mode list) gives BabelQueue's shared
	// "<queue>:processing" list back to the queue at connect: only once
	// BabelQueue's own workers of that queue are stopped.
	TakeBabelQueueProcessing bool `mapstructure:"take_babelqueue_processing"`
	// ClaimIdle (mode stream): an entry pending that long with a consumer
	// that stopped renewing it is taken over with XAUTOCLAIM.
	ClaimIdle time.Duration `mapstructure:"claim_idle"`
	// MaxDeliveries (mode stream): an entry whose delivery count exceeds
	// it is dead-lettered instead of handed out again; without
	// dead_letter it keeps being delivered, never dropped.
	MaxDeliveries int `mapstructure:"max_deliveries"`
	// BodyField (mode stream) is the entry field forwarded as the body;
	// the other fields become headers (bq-message-id among them).
	BodyField string `mapstructure:"body_field"`
	// DeadLetter is a list (mode list; it must carry the queue's hash
	// tag, e.g. "{orders}:dead") or a stream (mode stream); "" for none.
	DeadLetter       string        `mapstructure:"dead_letter"`
	ReconnectInitial time.Duration `mapstructure:"reconnect_initial"`
	ReconnectMax     time.Duration `mapstructure:"reconnect_max"`
}

// RabbitMQ is an AMQP 0-9-1 queue consumer.
type RabbitMQ struct {
	URL              string           `mapstructure:"url"`
	Queue            string           `mapstructure:"queue"`
	Prefetch         int              `mapstructure:"prefetch"`
	Workers          int              `mapstructure:"workers"`
	ConsumerTag      string           `mapstructure:"consumer_tag"`
	ReconnectInitial time.Duration    `mapstructure:"reconnect_initial"`
	ReconnectMax     time.Duration    `mapstructure:"reconnect_max"`
	DeadLetter       RabbitDeadLetter `mapstructure:"dead_letter"`
}

// RabbitDeadLetter: "none" requeues failed messages, "dlx" rejects them to
// the queue's own dead-letter exchange, "publish" publishes them with
// reason headers to Exchange (publisher confirms) before acking.
type RabbitDeadLetter struct {
	Mode       string `mapstructure:"mode"`
	Exchange   string `mapstructure:"exchange"`
	RoutingKey string `mapstructure:"routing_key"`
	// Queue is the queue the dead letters end up in, which `redrive`
	// reads: AMQP cannot tell which queue a dead-letter exchange routes
	// to. Empty in mode publish through the default exchange means the
	// queue routing_key names.
	Queue string `mapstructure:"queue"`
}

// Kafka is a consumer-group member.
type Kafka struct {
	Brokers []string `mapstructure:"brokers"`
	Topics  []string `mapstructure:"topics"`
	Group   string   `mapstructure:"group"`
	// GroupInstanceID makes the member static (KIP-345): restarted with
	// the same id within session_timeout, it gets its partitions back
	// without a rebalance. Empty takes the POD_NAME environment variable
	// (the Helm chart and inject set it from the pod's name), and is a
	// dynamic member outside Kubernetes.
	GroupInstanceID string `mapstructure:"group_instance_id"`
	// Balancers are the group protocols the member speaks, preferred
	// first.
	Balancers         []string      `mapstructure:"balancers"`
	StartOffset       string        `mapstructure:"start_offset"`
	IsolationLevel    string        `mapstructure:"isolation_level"`
	Ordering          string        `mapstructure:"ordering"`
	MaxInFlight       int           `mapstructure:"max_in_flight"`
	ReadAhead         int           `mapstructure:"read_ahead"`
	BatchSize         int           `mapstructure:"batch_size"`
	CommitInterval    time.Duration `mapstructure:"commit_interval"`
	CommitEvery       int           `mapstructure:"commit_every"`
	SessionTimeout    time.Duration `mapstructure:"session_timeout"`
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval"`
	RebalanceTimeout  time.Duration `mapstructure:"rebalance_timeout"`
	DeadLetterTopic   string        `mapstructure:"dead_letter_topic"`
	SASL              KafkaSASL     `mapstructure:"sasl"`
	TLS               KafkaTLS      `mapstructure:"tls"`
}

// KafkaSASL: Mechanism "" (off), "plain", "scram-sha-256" or "scram-sha-512".
type KafkaSASL struct {
	Mechanism string `mapstructure:"mechanism"`
	Username  string `mapstructure:"username"`
	Password  string `mapstructure:"password"`
}

// KafkaTLS enables TLS to the brokers.
type KafkaTLS struct {
	Enabled            bool   `mapstructure:"enabled"`
	CAFile             string `mapstructure:"ca_file"`
	CertFile           string `mapstructure:"cert_file"`
	KeyFile            string `mapstructure:"key_file"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

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
// as a Kafka source.
type WebhookKafka struct {
	Brokers []string  `mapstructure:"brokers"`
	Topic   string    `mapstructure:"topic"`
	SASL    KafkaSASL `mapstructure:"sasl"`
	TLS     KafkaTLS  `mapstructure:"tls"`
}

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
		RabbitMQ: RabbitMQ{
			URL:              "amqp://guest:guest@127.0.0.1:5672/",
			Prefetch:         64,
			Workers:          16,
			ReconnectInitial: 500 * time.Millisecond,
			ReconnectMax:     30 * time.Second,
			DeadLetter:       RabbitDeadLetter{Mode: "none"},
		},
		Kafka: Kafka{
			Balancers:         []string{"cooperative-sticky", "range"},
			StartOffset:       "earliest",
			IsolationLevel:    "read_committed",
			Ordering:          "partition",
			MaxInFlight:       64,
			ReadAhead:         1024,
			BatchSize:         32,
			CommitInterval:    time.Second,
			CommitEvery:       500,
			SessionTimeout:    10 * time.Second,
			HeartbeatInterval: time.Second,
			RebalanceTimeout:  30 * time.Second,
		},
		Redis: RedisSource{
			Addrs:            []string{"127.0.0.1:6379"},
			Mode:             "list",
			Workers:          16,
			HeartbeatTTL:     15 * time.Second,
			ClaimIdle:        time.Minute,
			MaxDeliveries:    5,
			BodyField:        "body",
			ReconnectInitial: 500 * time.Millisecond,
			ReconnectMax:     30 * time.Second,
		},
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
// "<consumer>:<segment>:<key>": its key space, or for a webhook source
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
