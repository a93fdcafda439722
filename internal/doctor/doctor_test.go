package doctor_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/doctor"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

type env struct {
	rabbit *testutil.Rabbit
	kafka  *kafkatest.Cluster
	app    *httptest.Server
	queue  string
	dlq    string
	ex     string
}

func newEnv(t *testing.T) *env {
	e := &env{rabbit: testutil.NewRabbit(t)}
	e.queue = e.rabbit.Queue("doctor-q-", nil)
	e.dlq = e.rabbit.Queue("doctor-dlq-", nil)
	e.ex = testutil.UniqueName("doctor-ex-")
	if err := e.rabbit.Ch.ExchangeDeclare(e.ex, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.kafka = kafkatest.Start(t, 3, []string{"events", "events-dlq"})
	e.app = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(e.app.Close)
	return e
}

// config: a RabbitMQ source publishing dead letters to an exchange, one
// using the default exchange, a Kafka source with a dead-letter topic and
// a webhook listener publishing to the queue.
func (e *env) config(t *testing.T) *config.Config {
	c := config.Default()
	c.Consumer = "doctor"
	c.SeenSet.Redis.Addrs = []string{testutil.RedisAddr()}
	c.App.URL = e.app.URL
	c.App.HealthURL = "/healthz"
	c.Admin.Listen = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))

	r := config.DefaultSource()
	r.Name, r.RabbitMQ.URL, r.RabbitMQ.Queue = "orders", testutil.RabbitURL(), e.queue
	r.RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", Exchange: e.ex, RoutingKey: "dead"}
	r2 := config.DefaultSource()
	r2.Name, r2.RabbitMQ.URL, r2.RabbitMQ.Queue = "refunds", testutil.RabbitURL(), e.queue
	r2.RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: e.dlq}

	k := config.DefaultSource()
	k.Name, k.Type = "events", "kafka"
	k.Kafka.Brokers, k.Kafka.Topics, k.Kafka.Group = e.kafka.Addrs, []string{"events"}, testutil.UniqueName("doctor-g-")
	k.Kafka.DeadLetterTopic = "events-dlq"

	w := config.DefaultSource()
	w.Name, w.Type = "hooks", "webhook"
	w.Webhook.Listen = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	w.Webhook.Profile, w.Webhook.AllowUnsignedOn = "none", w.Webhook.Listen
	w.Key = []string{"json:id"}
	w.Webhook.Target.RabbitMQ = config.WebhookRabbitMQ{URL: testutil.RabbitURL(), RoutingKey: e.queue}

	c.Sources = []config.Source{r, r2, k, w}
	if err := c.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	return &c
}

func run(t *testing.T, c *config.Config) (doctor.Report, string) {
	t.Helper()
	r := doctor.Run(context.Background(), c, doctor.Options{Timeout: 3 * time.Second})
	var b bytes.Buffer
	r.Print(&b)
	t.Logf("doctor:\n%s", b.String())
	return r, b.String()
}

// has asserts a line with level, check (prefix) and finding (substring).
func has(t *testing.T, r doctor.Report, level doctor.Level, check, finding string) {
	t.Helper()
	for _, x := range r {
		if x.Level == level && strings.HasPrefix(x.Check, check) && strings.Contains(x.Finding, finding) {
			return
		}
	}
	t.Errorf("no %s line for %q finding %q", level, check, finding)
}

func TestAllGood(t *testing.T) {
	e := newEnv(t)
	c := e.config(t)
	r, out := run(t, c)
	if r.Failed() {
		t.Fatalf("failed against working services:\n%s", out)
	}
	has(t, r, doctor.OK, "redis "+testutil.RedisAddr(), "reachable")
	has(t, r, doctor.OK, "redis "+testutil.RedisAddr(), "version ")
	has(t, r, doctor.OK, "redis ", "maxmemory-policy")
	has(t, r, doctor.OK, "redis "+testutil.RedisAddr(), "deployment: standalone, 1 master, ")
	has(t, r, doctor.OK, "rabbitmq queue "+e.queue+" (source orders)", "exists: 0 messages ready, 0 consumers")
	has(t, r, doctor.OK, "rabbitmq dead letters (source orders)", "exchange "+e.ex+" exists")
	has(t, r, doctor.OK, "rabbitmq dead letters (source refunds)", "queue "+e.dlq+" exists")
	has(t, r, doctor.OK, "rabbitmq delivery limit (source orders)", "queue type classic (no x-queue-type argument): no delivery limit")
	has(t, r, doctor.OK, "kafka topic events (source events)", "exists: 3 partitions")
	has(t, r, doctor.OK, "kafka dead-letter topic events-dlq (source events)", "exists")
	has(t, r, doctor.OK, "kafka group ", "no member yet")
	has(t, r, doctor.OK, "webhook listener (source hooks)", "address is free")
	has(t, r, doctor.OK, "webhook target (source hooks)", "queue "+e.queue+" exists")
	has(t, r, doctor.OK, "app health /healthz", "answers 2xx")
	has(t, r, doctor.OK, "admin listener", "address is free")

	// The consumer count is the queue's: a consumer is seen.
	ch, err := e.rabbit.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.Consume(e.queue, "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r, _ = run(t, c)
	has(t, r, doctor.OK, "rabbitmq queue "+e.queue+" (source orders)", "1 consumers")
}

// Each broken thing fails its own line, and the others still run.
func TestFailures(t *testing.T) {
	e := newEnv(t)
	c := e.config(t)
	closed := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // nothing listens
	c.SeenSet.Redis.Addrs = []string{closed}
	c.Sources[0].RabbitMQ.Queue = testutil.UniqueName("doctor-missing-")
	c.Sources[0].RabbitMQ.DeadLetter.Exchange = testutil.UniqueName("doctor-missing-ex-")
	c.Sources[1].RabbitMQ.DeadLetter.RoutingKey = testutil.UniqueName("doctor-missing-dlq-")
	c.Sources[2].Kafka.Topics = []string{"nope"}
	e.app.Close() // app down
	held, err := net.Listen("tcp", c.Admin.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	r, _ := run(t, c)
	if !r.Failed() {
		t.Fatal("not failed")
	}
	has(t, r, doctor.Fail, "redis "+closed, "not reachable")
	has(t, r, doctor.Fail, "rabbitmq queue "+c.Sources[0].RabbitMQ.Queue, "does not exist")
	has(t, r, doctor.Fail, "rabbitmq queue "+c.Sources[0].RabbitMQ.Queue, "create it, e.g. amqp-declare-queue --url \"$AMQP_URL\" --durable -q "+c.Sources[0].RabbitMQ.Queue+" (package amqp-tools")
	has(t, r, doctor.Fail, "rabbitmq dead letters (source orders)", "exchange "+c.Sources[0].RabbitMQ.DeadLetter.Exchange+": does not exist")
	has(t, r, doctor.Fail, "rabbitmq dead letters (source refunds)", "does not exist")
	has(t, r, doctor.OK, "rabbitmq queue "+e.queue+" (source refunds)", "exists")
	has(t, r, doctor.Fail, "kafka topic nope (source events)", "does not exist")
	has(t, r, doctor.Fail, "kafka topic nope (source events)", "kafka-topics.sh --bootstrap-server BROKER --create --topic nope")
	has(t, r, doctor.Fail, "app health /healthz", "connection refused")
	has(t, r, doctor.Fail, "admin listener", "cannot listen")

	// Broker down altogether.
	c.Sources = c.Sources[:1]
	c.Sources[0].RabbitMQ.URL = "amqp://guest:secret@" + closed + "/"
	r, out := run(t, c)
	has(t, r, doctor.Fail, "rabbitmq amqp://"+closed+" (source orders)", "cannot connect")
	if strings.Contains(out, "secret") {
		t.Errorf("password printed:\n%s", out)
	}
}

// Without a health URL the app's address is dialled; warnings do not
// fail the run.
func TestAppWithoutHealthURLAndWarnings(t *testing.T) {
	srv := testutil.StartRedisWith(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	app := httptest.NewServer(http.NotFoundHandler())
	defer app.Close()
	c := config.Default()
	c.Consumer = "doctor"
	c.SeenSet.Redis.Addrs = []string{srv.Addr()}
	c.App.URL = app.URL
	c.Admin.Listen = ""
	r, out := run(t, &c)
	if r.Failed() {
		t.Fatalf("warnings failed the run:\n%s", out)
	}
	has(t, r, doctor.Warn, "redis "+srv.Addr(), "maxmemory-policy volatile-lru")
	has(t, r, doctor.Warn, "redis "+srv.Addr(), "persistence: neither AOF nor RDB")
	has(t, r, doctor.OK, "app "+app.URL, "accepts connections")
	app.Close()
	r, _ = run(t, &c)
	has(t, r, doctor.Fail, "app "+app.URL, "not reachable")
}

// The deployment line names the mode and the masters with their
// replicas, and the topology's warnings are doctor warnings: on the
// shared standalone Redis (which has no replica) and on a Cluster, a
// replica wait no master can meet.
func TestRedisDeployment(t *testing.T) {
	c := config.Default()
	c.Consumer, c.Admin.Listen, c.App.URL = "doctor", "", "http://127.0.0.1:1"
	c.SeenSet.Redis.Addrs = []string{testutil.RedisAddr()}
	c.SeenSet.Redis.WaitReplicas, c.SeenSet.Redis.WaitTimeout = 3, 100*time.Millisecond
	r, _ := run(t, &c)
	check := "redis " + testutil.RedisAddr()
	has(t, r, doctor.OK, check, "deployment: standalone, 1 master, ")
	has(t, r, doctor.Warn, check, "but seenset.redis.wait_replicas is 3")

	cl := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	c.SeenSet.Redis.Addrs = cl.Addrs()
	r, _ = run(t, &c)
	check = "redis " + strings.Join(cl.Addrs(), ",")
	has(t, r, doctor.OK, check, "deployment: cluster, 3 masters, 1 replica each")
	for _, m := range cl.Masters {
		has(t, r, doctor.Warn, check, "redis "+m.Addr()+" has 1 connected replicas but seenset.redis.wait_replicas is 3")
	}
	c.SeenSet.Redis.WaitReplicas = 1
	_, out := run(t, &c)
	if strings.Contains(out, "wait_replicas") {
		t.Errorf("a replica wait every master meets warned:\n%s", out)
	}

	// One address of a Cluster node: the client runs standalone and
	// keys of the other nodes' slots fail.
	c.SeenSet.Redis.Addrs = cl.Addrs()[:1]
	r, _ = run(t, &c)
	has(t, r, doctor.Warn, "redis "+cl.Addrs()[0], "is a Cluster node but seenset.redis.addrs lists one address")
}

// Sentinels that require a password: doctor connects with
// sentinel_password and reports the Sentinel deployment; without it the
// Redis line fails naming the setting.
func TestRedisSentinelAuth(t *testing.T) {
	sn := testutil.StartRedisSentinel(t, testutil.RedisSentinelOptions{Replicas: 1, SentinelPassword: "sentinel-s3cret"})
	c := config.Default()
	c.Consumer, c.Admin.Listen, c.App.URL = "doctor", "", "http://127.0.0.1:1"
	c.SeenSet.Redis.Addrs, c.SeenSet.Redis.MasterName = sn.SentinelAddrs(), sn.MasterName
	c.SeenSet.Redis.SentinelPassword = "sentinel-s3cret"
	check := "redis sentinel master " + sn.MasterName
	r, _ := run(t, &c)
	has(t, r, doctor.OK, check, "reachable")
	has(t, r, doctor.OK, check, "deployment: sentinel, 1 master, 1 replica")

	c.SeenSet.Redis.SentinelPassword = ""
	r, out := run(t, &c)
	has(t, r, doctor.Fail, check, "the sentinels refused the credentials: set seenset.redis.sentinel_password")
	if strings.Contains(out, "sentinel-s3cret") {
		t.Errorf("password printed:\n%s", out)
	}
}

// A group with a live member is described with its state and members.
func TestKafkaGroupWithMember(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"events"})
	group := testutil.UniqueName("doctor-live-")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	cfg := config.Default()
	cfg.Consumer, cfg.SeenSet.Backend, cfg.Admin.Listen = "doctor", "memory", ""
	k := config.DefaultSource()
	k.Name, k.Type = "events", "kafka"
	k.Kafka.Brokers, k.Kafka.Topics, k.Kafka.Group = c.Addrs, []string{"events"}, group
	cfg.Sources = []config.Source{k}
	testutil.Eventually(t, 15*time.Second, "the member joined", func() bool {
		r := doctor.Run(context.Background(), &cfg, doctor.Options{Timeout: 3 * time.Second})
		for _, x := range r {
			if strings.HasPrefix(x.Check, "kafka group "+group) && x.Finding == "state Stable, 1 members" {
				return true
			}
		}
		return false
	})
}

// A quorum queue with x-delivery-limit and no dead-letter exchange drops
// a message past the limit: doctor reads the queue's arguments over AMQP
// (no management plugin) and warns, naming the limit and what it could
// not read (policies). With a dead-letter exchange it is fine, and dead
// letters in mode dlx are found there.
func TestQuorumDeliveryLimitWithoutDeadLetterExchange(t *testing.T) {
	e := newEnv(t)
	limited := e.rabbit.Queue("doctor-quorum-", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(10)})
	dlxd := e.rabbit.Queue("doctor-quorum-dlx-", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(10), "x-dead-letter-exchange": e.ex})
	c := e.config(t)
	c.Sources[0].RabbitMQ.Queue = limited
	c.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "dlx"}
	c.Sources[1].RabbitMQ.Queue = dlxd
	c.Sources[1].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "dlx"}
	r, _ := run(t, c)
	has(t, r, doctor.Warn, "rabbitmq delivery limit (source orders)", "quorum queue, x-delivery-limit 10, and no x-dead-letter-exchange argument: RabbitMQ drops a message past its delivery limit")
	has(t, r, doctor.Warn, "rabbitmq delivery limit (source orders)", "AMQP cannot read")
	has(t, r, doctor.Warn, "rabbitmq dead letters (source orders)", "has no x-dead-letter-exchange argument")
	has(t, r, doctor.OK, "rabbitmq delivery limit (source refunds)", fmt.Sprintf("dead-letter exchange %q", e.ex))
	has(t, r, doctor.OK, "rabbitmq dead letters (source refunds)", fmt.Sprintf("has x-dead-letter-exchange %q", e.ex))
}

// A webhook source's Kafka target behind SASL: doctor connects with the
// target's own SASL settings, so the right credentials pass and wrong
// ones (or none) fail, naming the setting to fix.
func TestWebhookKafkaTargetSASL(t *testing.T) {
	kc := kafkatest.Start(t, 1, []string{"hooks"}, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "alice", "alice-s3cret"), kfake.Superuser("SCRAM-SHA-256", "bob", "bob-s3cret"))
	cfg := config.Default()
	cfg.Consumer, cfg.SeenSet.Backend, cfg.Admin.Listen = "doctor", "memory", ""
	w := config.DefaultSource()
	w.Name, w.Type = "hooks", "webhook"
	w.Webhook.Listen = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	w.Webhook.Profile, w.Webhook.AllowUnsignedOn = "none", w.Webhook.Listen
	w.Key = []string{"json:id"}
	w.Webhook.Target.Broker = "kafka"
	w.Webhook.Target.Kafka.Brokers, w.Webhook.Target.Kafka.Topic = kc.Addrs, "hooks"
	cfg.Sources = []config.Source{w}
	check := "kafka " + strings.Join(kc.Addrs, ",") + " (webhook source hooks)"
	for _, tc := range []struct {
		name    string
		sasl    kafka.SASL
		level   doctor.Level
		finding string
	}{
		{"plain", kafka.SASL{Mechanism: "plain", Username: "alice", Password: "alice-s3cret"}, doctor.OK, "reachable (1 brokers)"},
		{"scram", kafka.SASL{Mechanism: "scram-sha-256", Username: "bob", Password: "bob-s3cret"}, doctor.OK, "reachable (1 brokers)"},
		{"wrong password", kafka.SASL{Mechanism: "plain", Username: "alice", Password: "wrong"},
			doctor.Fail, `refused the SASL credentials of user "alice" (mechanism plain; the broker ended the connection during authentication: EOF): check webhook.target.kafka.sasl.username, webhook.target.kafka.sasl.password and webhook.target.kafka.sasl.mechanism`},
		{"wrong mechanism", kafka.SASL{Mechanism: "scram-sha-512", Username: "bob", Password: "bob-s3cret"},
			doctor.Fail, "check webhook.target.kafka.sasl.username, webhook.target.kafka.sasl.password and webhook.target.kafka.sasl.mechanism"},
		{"none", kafka.SASL{}, doctor.Fail, "as brokers that require SASL do: set webhook.target.kafka.sasl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Sources = []config.Source{w}
			c.Sources[0].Webhook.Target.Kafka.SASL = tc.sasl
			if err := c.Validate(); err != nil {
				t.Fatalf("test config invalid: %v", err)
			}
			r := doctor.Run(context.Background(), &c, doctor.Options{Timeout: 2 * time.Second})
			has(t, r, tc.level, check, tc.finding)
			if tc.level == doctor.OK {
				has(t, r, doctor.OK, "kafka topic hooks (source hooks)", "exists: 1 partitions")
			}
			var b bytes.Buffer
			r.Print(&b)
			if tc.sasl.Password != "" && strings.Contains(b.String(), tc.sasl.Password) {
				t.Errorf("password printed:\n%s", b.String())
			}
			if t.Failed() {
				t.Logf("doctor:\n%s", b.String())
			}
		})
	}
}
