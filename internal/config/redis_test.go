package config

import (
	"strings"
	"testing"
	"time"
)

// A redis source: the defaults, the env override of a field of its
// block, and the block refused on a source of another type.
func TestRedisSourceLoads(t *testing.T) {
	src := "  - name: jobs\n    type: redis\n    redis: {queue: orders, dead_letter: \"{orders}:dead\"}\n"
	cfg, err := loadKafka(t, src, []string{"DEDUPE_PROXY_SOURCES_0_REDIS_HEARTBEAT_TTL=9s"})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Sources[0].Redis
	if r.Mode != "list" || r.Queue != "orders" || r.HeartbeatTTL != 9*time.Second || r.Workers != 16 || strings.Join(r.Addrs, ",") != "127.0.0.1:6379" {
		t.Fatalf("redis block %+v", r)
	}
	_, err = loadKafka(t, "  - name: q\n    rabbitmq: {queue: q}\n    redis: {queue: q}\n", nil)
	if err == nil || !strings.Contains(err.Error(), `sources[0].redis: set, but the source's type is "rabbitmq"`) {
		t.Fatalf("error %v, want the redis block refused on a rabbitmq source", err)
	}
	// No type written: the error says the type defaulted, and what to add.
	_, err = loadKafka(t, "  - name: q\n    redis: {queue: q}\n", nil)
	if err == nil || !strings.Contains(err.Error(), `sources[0].redis: set, but sources[0].type is not, and it defaults to "rabbitmq": add type: redis`) ||
		strings.Contains(err.Error(), "rabbitmq.queue") {
		t.Fatalf("error %v, want it to name the missing type, and nothing of the rabbitmq block never written", err)
	}
}

// Each broken field of a valid redis source is reported with its path.
func TestRedisSourceValidation(t *testing.T) {
	valid := func(mode string) Config {
		c := Default()
		c.Consumer = "c"
		s := DefaultSource()
		s.Name, s.Type = "jobs", "redis"
		if mode == "list" {
			s.Redis.Queue = "orders"
		} else {
			s.Redis.Mode, s.Redis.Stream = "stream", "orders"
		}
		c.Sources = []Source{s}
		return c
	}
	for _, mode := range []string{"list", "stream"} {
		c := valid(mode)
		if err := c.Validate(); err != nil {
			t.Fatalf("valid %s source: %v", mode, err)
		}
	}
	for _, tc := range []struct {
		mode   string
		mutate func(*Source)
		want   string
	}{
		{"list", func(s *Source) { s.Redis.Queue = "" }, "sources[0].redis.queue: must be set"},
		{"list", func(s *Source) { s.Redis.Mode = "pubsub" }, `sources[0].redis.mode: must be one of`},
		{"list", func(s *Source) { s.Redis.Addrs = nil }, "sources[0].redis.addrs: must list at least one host:port (or set url)"},
		{"list", func(s *Source) { s.Redis.Addrs = []string{"nohost"} }, `sources[0].redis.addrs[0]: must be host:port, got "nohost"`},
		{"list", func(s *Source) { s.Redis.URL = "http://x" }, `sources[0].redis.url: must be a redis:// or rediss:// URL`},
		{"list", func(s *Source) { s.Redis.HeartbeatTTL = time.Second }, "sources[0].redis.heartbeat_ttl: must be at least 3s, got 1s"},
		{"list", func(s *Source) { s.Redis.HeartbeatTTL = 0 }, "sources[0].redis.heartbeat_ttl: must be at least 3s, got 0s"},
		{"list", func(s *Source) { s.Redis.Workers = 0 }, "sources[0].redis.workers: must be at least 1"},
		{"list", func(s *Source) { s.Redis.DeadLetter = "orders.dead" },
			`sources[0].redis.dead_letter: must carry the queue's hash tag so it shares its Cluster slot, e.g. "{orders}:dead", got "orders.dead"`},
		{"list", func(s *Source) { s.OnMissingKey = "dead_letter" }, "sources[0].on_missing_key: dead_letter needs sources[0].redis.dead_letter"},
		{"list", func(s *Source) { s.KeyReuse = "dead_letter" }, "sources[0].key_reuse: dead_letter needs sources[0].redis.dead_letter"},
		{"list", func(s *Source) { s.Redis.Stream = "s" }, "sources[0].redis.stream: is for mode stream"},
		{"stream", func(s *Source) { s.Redis.Stream = "" }, "sources[0].redis.stream: must be set"},
		{"stream", func(s *Source) { s.Redis.ClaimIdle = 0 }, "sources[0].redis.claim_idle: must be at least 3s, got 0s"},
		{"stream", func(s *Source) { s.Redis.MaxDeliveries = 0 }, "sources[0].redis.max_deliveries: must be at least 1"},
		{"stream", func(s *Source) { s.Redis.BodyField = "" }, "sources[0].redis.body_field: must name the entry field"},
		{"stream", func(s *Source) { s.Redis.TakeBabelQueueProcessing = true }, "sources[0].redis.take_babelqueue_processing: is for mode list"},
		{"stream", func(s *Source) { s.Redis.DeadLetter = "orders" }, `sources[0].redis.dead_letter: must not be the consumed stream, got "orders"`},
	} {
		c := valid(tc.mode)
		tc.mutate(&c.Sources[0])
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v\nwant %q", tc.mode, err, tc.want)
		}
	}
}

// The printed configuration of a redis source shows its block only, with
// its password and the URL's password redacted.
func TestRedisSourcePrintRedacts(t *testing.T) {
	src := "  - name: jobs\n    type: redis\n    redis: {url: \"redis://u:hunter2@r:6379/0\", password: s3cret, queue: orders}\n"
	cfg, err := loadKafka(t, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := cfg.Print(&b, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "hunter2") || strings.Contains(out, "s3cret") {
		t.Fatalf("a password printed:\n%s", out)
	}
	if !strings.Contains(out, "queue: orders") || strings.Contains(out, "rabbitmq:") || strings.Contains(out, "prefetch") {
		t.Fatalf("want the redis block alone:\n%s", out)
	}
}
