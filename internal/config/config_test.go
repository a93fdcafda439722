package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
)

func TestExampleConfigIsValid(t *testing.T) {
	cfg, err := Load(filepath.Join("..", "..", "config.example.yaml"), []string{})
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	// The example shows every default; loading it must give them back.
	def := Default()
	def.Consumer = cfg.Consumer
	cfg.Sources = nil
	if !reflect.DeepEqual(*cfg, def) {
		t.Errorf("config.example.yaml drifted from Default():\n got %+v\nwant %+v", *cfg, def)
	}
}

// Docs match the code: every field has a line in config.example.yaml.
func TestExampleDocumentsEveryField(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	paths := leafPaths(reflect.TypeOf(Config{}), "")
	paths = append(paths, leafPaths(reflect.TypeOf(Source{}), "sources")...)
	for _, p := range paths {
		segs := strings.Split(p, ".")
		if !strings.Contains(doc, segs[len(segs)-1]+":") {
			t.Errorf("config.example.yaml does not document %s", p)
		}
	}
}

func TestMinimalConfigTakesDefaults(t *testing.T) {
	cfg, err := Load("testdata/valid-minimal.yaml", []string{})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sources[0]
	if s.Type != "rabbitmq" || s.Path != "/" || s.RabbitMQ.Prefetch != 64 || s.RabbitMQ.URL == "" || s.Key[0] != "json:meta.id" {
		t.Errorf("source defaults not applied: %+v", s)
	}
	if cfg.SeenSet.TTL != 24*time.Hour || cfg.App.MaxResponseBytes != 64<<10 {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

// Each invalid-*.yaml lists every problem it holds, with the exact text,
// one per line, in one error.
func TestInvalidFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, err := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".err")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Load(f, []string{})
			if err == nil {
				t.Fatal("Load accepted an invalid file")
			}
			if got := err.Error(); got != strings.TrimSpace(string(want)) {
				t.Errorf("error:\n%s\n\nwant:\n%s", got, want)
			}
		})
	}
}

func TestEnvOverridesEveryKindOfField(t *testing.T) {
	env := []string{
		"DEDUPE_PROXY_APP_TIMEOUT=3s",
		"DEDUPE_PROXY_APP_MAX_CONNS=7",
		"DEDUPE_PROXY_LOG_BODIES=true",
		"DEDUPE_PROXY_DELIVERY_MAX_BODY_BYTES=2MiB",
		"DEDUPE_PROXY_DELIVERY_JITTER=0.5",
		"DEDUPE_PROXY_SEENSET_REDIS_ADDRS=10.0.0.1:6379,10.0.0.2:6379",
		"DEDUPE_PROXY_SEENSET_REDIS_PASSWORD=s3cret",
		"DEDUPE_PROXY_SOURCES_0_RABBITMQ_URL=amqp://u:p@rabbit:5672/",
		"DEDUPE_PROXY_SOURCES_0_RABBITMQ_DEAD_LETTER_MODE=dlx",
		"DEDUPE_PROXY_SOURCES_0_KEY=header:x-id,json:meta.id",
		"DEDUPE_PROXY_SOURCES_0_CONTENT_TYPE=application/json; charset=utf-8",
		"DEDUPE_PROXY_CONFIG=ignored-here",
		// Kubernetes service links for a Service named dedupe-proxy.
		"DEDUPE_PROXY_SERVICE_HOST=10.0.0.9",
		"DEDUPE_PROXY_SERVICE_PORT=9090",
		"DEDUPE_PROXY_SERVICE_PORT_ADMIN=9090",
		"DEDUPE_PROXY_PORT=tcp://10.0.0.9:9090",
		"DEDUPE_PROXY_PORT_9090_TCP=tcp://10.0.0.9:9090",
		"DEDUPE_PROXY_PORT_9090_TCP_ADDR=10.0.0.9",
		"OTHER_VAR=1",
	}
	cfg, err := Load("testdata/valid-minimal.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sources[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"app.timeout", cfg.App.Timeout, 3 * time.Second},
		{"app.max_conns", cfg.App.MaxConns, 7},
		{"log.bodies", cfg.Log.Bodies, true},
		{"delivery.max_body_bytes", cfg.Delivery.MaxBodyBytes, ByteSize(2 << 20)},
		{"delivery.jitter", cfg.Delivery.Jitter, 0.5},
		{"seenset.redis.addrs", cfg.SeenSet.Redis.Addrs, []string{"10.0.0.1:6379", "10.0.0.2:6379"}},
		{"seenset.redis.password", cfg.SeenSet.Redis.Password, "s3cret"},
		{"sources[0].rabbitmq.url", s.RabbitMQ.URL, "amqp://u:p@rabbit:5672/"},
		{"sources[0].rabbitmq.dead_letter.mode", s.RabbitMQ.DeadLetter.Mode, "dlx"},
		{"sources[0].rabbitmq.queue (from the file)", s.RabbitMQ.Queue, "orders"},
		{"sources[0].key", s.Key, []string{"header:x-id", "json:meta.id"}},
		{"sources[0].content_type", s.ContentType, "application/json; charset=utf-8"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestEnvErrors(t *testing.T) {
	_, err := Load("testdata/valid-minimal.yaml", []string{
		"DEDUPE_PROXY_APP_TIMOUT=3s",
		"DEDUPE_PROXY_SOURCES_1_RABBITMQ_QUEUE=x",
		"DEDUPE_PROXY_APP_TIMEOUT=never",
	})
	// The error about a value from the environment names the variable:
	// the file shows another value, or none.
	want := "app.timeout (from DEDUPE_PROXY_APP_TIMEOUT): invalid duration \"never\" (use 500ms, 30s, 5m, 24h)\n" +
		"DEDUPE_PROXY_APP_TIMOUT: environment variable matches no setting (did you mean DEDUPE_PROXY_APP_TIMEOUT?)\n" +
		"DEDUPE_PROXY_SOURCES_1_RABBITMQ_QUEUE: environment variable matches no setting (did you mean DEDUPE_PROXY_SOURCES_0_RABBITMQ_QUEUE?)"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}

// One field of a valid config changed at a time names exactly that field.
func TestValidateOneFieldAtATime(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Consumer = "c"
		s := DefaultSource()
		s.Name = "orders"
		s.RabbitMQ.Queue = "orders"
		k := DefaultSource()
		k.Name = "events"
		k.Type = "kafka"
		k.Kafka.Topics = []string{"events"}
		k.Kafka.Group = "g"
		k.Kafka.Brokers = []string{"127.0.0.1:9092"}
		c.Sources = []Source{s, k}
		return c
	}
	base := valid()
	if err := base.Validate(); err != nil {
		t.Fatalf("base config invalid: %v", err)
	}
	cases := []struct {
		path   string
		mutate func(*Config)
	}{
		{"admin.listen", func(c *Config) { c.Admin.Listen = "9090" }},
		{"admin.token_file", func(c *Config) { c.Admin.Token, c.Admin.TokenFile = "a", "b" }},
		{"app.health_url", func(c *Config) { c.App.HealthURL = "tcp://x" }},
		{"seenset.redis.addrs", func(c *Config) { c.SeenSet.Redis.Addrs = nil }},
		{"seenset.redis.addrs[0]", func(c *Config) { c.SeenSet.Redis.Addrs = []string{"nohost"} }},
		{"seenset.redis.wait_replicas", func(c *Config) { c.SeenSet.Redis.WaitReplicas = -1 }},
		{"seenset.redis.hash_keys_over", func(c *Config) { c.SeenSet.Redis.HashKeysOver = 43 }},
		{"seenset.redis.sentinel_password", func(c *Config) { c.SeenSet.Redis.SentinelPassword = "x" }},
		{"seenset.redis.sentinel_username", func(c *Config) { c.SeenSet.Redis.SentinelUsername = "x" }},
		{"seenset.redis.wait_timeout", func(c *Config) { c.SeenSet.Redis.WaitReplicas, c.SeenSet.Redis.WaitTimeout = 1, 0 }},
		{"seenset.redis.wait_timeout", func(c *Config) {
			c.SeenSet.Redis.WaitReplicas, c.SeenSet.Redis.WaitTimeout = 1, c.SeenSet.Redis.ReadTimeout
		}},
		{"delivery.busy_delay", func(c *Config) { c.Delivery.BusyDelay = 0 }},
		{"delivery.commit_attempts", func(c *Config) { c.Delivery.CommitAttempts = 0 }},
		{"sources[1].name", func(c *Config) { c.Sources[1].Name = "orders" }},
		{"sources[0].rabbitmq.url", func(c *Config) { c.Sources[0].RabbitMQ.URL = "http://x" }},
		{"sources[0].rabbitmq.queue", func(c *Config) { c.Sources[0].RabbitMQ.Queue = "" }},
		{"sources[0].rabbitmq.workers", func(c *Config) { c.Sources[0].RabbitMQ.Workers = 0 }},
		{"sources[0].rabbitmq.dead_letter.mode", func(c *Config) { c.Sources[0].RabbitMQ.DeadLetter.Mode = "drop" }},
		{"sources[0].rabbitmq.dead_letter", func(c *Config) { c.Sources[0].RabbitMQ.DeadLetter.Mode = "publish" }},
		{"sources[0].on_missing_key", func(c *Config) { c.Sources[0].OnMissingKey = "dead_letter" }},
		{"sources[0].key_reuse", func(c *Config) { c.Sources[0].KeyReuse = "drop" }},
		{"sources[0].key_reuse", func(c *Config) { c.Sources[0].KeyReuse = "dead_letter" }},
		{"sources[0].key_reuse_fields", func(c *Config) { c.Sources[0].KeyReuseFields = []string{"payload", "meta..id"} }},
		{"sources[1].kafka.dead_letter_topic", func(c *Config) { c.Sources[1].KeyReuse = "dead_letter" }},
		{"sources[0].rabbitmq.dead_letter.queue", func(c *Config) { c.Sources[0].RabbitMQ.DeadLetter.Queue = "orders.dead" }},
		{"sources[0].rabbitmq.dead_letter.queue", func(c *Config) {
			c.Sources[0].RabbitMQ.DeadLetter = RabbitDeadLetter{Mode: "dlx", Queue: c.Sources[0].RabbitMQ.Queue}
		}},
		{"sources[0].rabbitmq.dead_letter.queue", func(c *Config) {
			c.Sources[0].RabbitMQ.DeadLetter = RabbitDeadLetter{Mode: "publish", RoutingKey: "orders.dead", Queue: "other.dead"}
		}},
		{"sources[0].max_redelivery_delay", func(c *Config) { c.Sources[0].MaxRedeliveryDelay = -time.Second }},
		{"sources[1].kafka.brokers", func(c *Config) { c.Sources[1].Kafka.Brokers = nil }},
		{"sources[1].kafka.group", func(c *Config) { c.Sources[1].Kafka.Group = "" }},
		{"sources[1].kafka.start_offset", func(c *Config) { c.Sources[1].Kafka.StartOffset = "middle" }},
		{"sources[1].kafka.ordering", func(c *Config) { c.Sources[1].Kafka.Ordering = "none" }},
		{"sources[1].kafka.isolation_level", func(c *Config) { c.Sources[1].Kafka.IsolationLevel = "read_some" }},
		{"sources[1].kafka.heartbeat_interval", func(c *Config) { c.Sources[1].Kafka.HeartbeatInterval = 5 * time.Second }},
		{"sources[1].kafka.sasl", func(c *Config) { c.Sources[1].Kafka.SASL.Mechanism = "plain" }},
		{"sources[1].kafka.sasl.mechanism", func(c *Config) { c.Sources[1].Kafka.SASL.Mechanism = "gssapi" }},
		{"sources[1].kafka.tls", func(c *Config) { c.Sources[1].Kafka.TLS.Enabled = true; c.Sources[1].Kafka.TLS.CertFile = "c.pem" }},
		{"sources[1].kafka.tls.enabled", func(c *Config) { c.Sources[1].Kafka.TLS.CAFile = "ca.pem" }},
		{"sources[1].kafka.brokers[0]", func(c *Config) { c.Sources[1].Kafka.Brokers = []string{"kafka"} }},
		{"sources[1].kafka.topics[0]", func(c *Config) { c.Sources[1].Kafka.Topics = []string{""} }},
		{"sources[1].kafka.dead_letter_topic", func(c *Config) { c.Sources[1].Kafka.DeadLetterTopic = c.Sources[1].Kafka.Topics[0] }},
		{"sources[1].kafka.dead_letter_topic", func(c *Config) { c.Sources[1].OnMissingKey = "dead_letter" }},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.path+": ") {
				t.Fatalf("error %q, want one line starting with %q", err, tc.path+": ")
			}
		})
	}
}

// A value that holds a password is quoted redacted when it is invalid:
// validate prints these errors and the daemon exits with them.
func TestValidateNeverEchoesAPassword(t *testing.T) {
	const secret = "S3CRET-pw"
	for _, tc := range []struct {
		path   string
		mutate func(*Config)
	}{
		{"app.url", func(c *Config) { c.App.URL = "ftp://svc:" + secret + "@app:21" }},
		{"app.url", func(c *Config) { c.App.URL = "http://svc:" + secret + "@app/%zz" }},
		{"app.health_url", func(c *Config) { c.App.HealthURL = "tcp://svc:" + secret + "@app/healthz" }},
		{"sources[0].rabbitmq.url", func(c *Config) { c.Sources[0].RabbitMQ.URL = "http://u:" + secret + "@rabbit:5672/" }},
		{"seenset.redis.addrs[0]", func(c *Config) { c.SeenSet.Redis.Addrs = []string{"redis://:" + secret + "@redis:6379"} }},
		{"seenset.redis.addrs[0]", func(c *Config) { c.SeenSet.Redis.Addrs = []string{"default:" + secret + "@redis:6379"} }},
		{"sources[0].kafka.brokers[0]", func(c *Config) {
			c.Sources[0].Type = "kafka"
			c.Sources[0].Kafka.Topics, c.Sources[0].Kafka.Group = []string{"t"}, "g"
			c.Sources[0].Kafka.Brokers = []string{"sasl://u:" + secret + "@kafka:9092"}
		}},
		{"sources[0].kafka.brokers[0]", func(c *Config) {
			c.Sources[0].Type = "kafka"
			c.Sources[0].Kafka.Topics, c.Sources[0].Kafka.Group = []string{"t"}, "g"
			c.Sources[0].Kafka.Brokers = []string{"u:" + secret + "@kafka:9092"}
		}},
	} {
		c := minimalConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.path+": ") {
			t.Errorf("%s: error %v, want one about it", tc.path, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error leaks the password: %v", tc.path, err)
		}
	}
	for in, want := range map[string]string{
		"redis:6379":                "redis:6379",
		"redis://:pw@redis:6379":    "redis://xxxxx@redis:6379",
		"u:p@ss@kafka:9092":         "xxxxx@kafka:9092",
		"sasl://u:p/w@kafka:9092/x": "sasl://xxxxx@kafka:9092/x",
	} {
		if got := redactAddr(in); got != want {
			t.Errorf("redactAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "1024": 1024, "64KiB": 64 << 10, "1MiB": 1 << 20, "10MB": 10_000_000, "2 GiB": 2 << 30, "5K": 5 << 10} {
		got, err := parseByteSize(in)
		if err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5MiB", "ten"} {
		if _, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) accepted", in)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml", []string{})
	if err == nil || !strings.Contains(err.Error(), "does-not-exist.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// validate (and doctor) refuse exactly the app.url values the forwarder
// would refuse when run starts, and the error names app.url: a config
// that validates must not fail at start on its URL.
func TestAppURLValidatedAsRunTakesIt(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" when valid, else a part of the error
	}{
		{"http://127.0.0.1:8080", ""},
		{"https://app.internal/base/", ""},
		{"http://[::1]:8080/x", ""},
		{"", "must be set"},
		{"localhost:8080", "has no scheme"},
		{"ftp://app", `scheme "ftp"`},
		{"http://", "has no host"},
		{"http://127.0.0.1:8080/base?x=1", "must not have a query"},
		{"http://127.0.0.1:8080/base?", "must not have a query"},
		{"http://127.0.0.1:8080/base#top", "must not have a fragment"},
		{"http://127.0.0.1:99999", "port 99999"},
		{"http://127.0.0.1:0/", "port 0"},
	} {
		c := minimalConfig()
		c.App.URL = tc.url
		err := c.Validate()
		_, runErr := forward.New(forward.Config{URL: tc.url})
		switch {
		case tc.want == "" && (err != nil || runErr != nil):
			t.Errorf("%q: validate %v, forward.New %v; want both to accept it", tc.url, err, runErr)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "app.url: ") || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: validate %v; want an app.url error with %q", tc.url, err, tc.want)
		case tc.want != "" && runErr == nil:
			t.Errorf("%q: validate refuses it but forward.New takes it", tc.url)
		}
	}
}
