package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// redriveStore is a seen-set under a key prefix of the test's own on the
// shared Redis, removed when the test ends.
func redriveStore(t *testing.T) (*seenset.Redis, string) {
	t.Helper()
	prefix := testutil.UniqueName("dptest:redrive:") + ":"
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{testutil.RedisAddr()}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	t.Cleanup(func() { delKeys(t, prefix+"*") })
	return st, prefix
}

func delKeys(t *testing.T, pattern string) {
	c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	defer c.Close()
	ctx := context.Background()
	for it := c.Scan(ctx, 0, pattern, 100).Iterator(); it.Next(ctx); {
		c.Del(ctx, it.Val())
	}
}

// markDone records key as processed, as the pipeline does after a 2xx.
func markDone(t *testing.T, st seenset.Store, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Claim(ctx, key, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, key, "tok", time.Hour); err != nil {
		t.Fatal(err)
	}
}

func keyState(t *testing.T, st seenset.Store, key string) seenset.State {
	t.Helper()
	s, err := st.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

func envelope(id string) []byte { return []byte(`{"meta":{"id":"` + id + `"},"amount":12.50}`) }

func lines(out, prefix string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// RabbitMQ, mode publish, end to end: the proxy dead-letters three
// messages while the app answers 400; after the fix a dry run moves
// nothing, --limit 1 moves one, and a plain redrive the rest. The key
// that was already done (its message had succeeded before) is acked as
// a duplicate and never reaches the app again; the others reach it once.
func TestRedriveRabbitMQKeepsKeysEndToEnd(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	q := rabbit.Queue("redrive-q-", nil)
	dlq := rabbit.Queue("redrive-dlq-", nil)
	st, prefix := redriveStore(t)
	app := testutil.NewApp(t)
	var fixed atomic.Bool
	app.SetRespond(func(*testutil.Request, int) int {
		if fixed.Load() {
			return 200
		}
		return 400
	})
	cfgPath := writeConfig(t, fmt.Sprintf(`consumer: redrive-test
admin: {listen: "127.0.0.1:%d"}
app: {url: %q}
seenset: {redis: {addrs: [%q], prefix: %q}}
delivery: {max_attempts: 1}
sources:
  - name: orders
    rabbitmq:
      url: %q
      queue: %s
      dead_letter: {mode: publish, routing_key: %s}
`, testutil.FreePort(t), app.URL, testutil.RedisAddr(), prefix, testutil.RabbitURL(), q, dlq))
	cfg, err := config.Load(cfgPath, []string{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		rabbit.Publish(q, amqp.Publishing{ContentType: "application/json", Body: envelope(id)})
	}
	testutil.Eventually(t, 20*time.Second, "three dead letters", func() bool { return rabbit.Ready(dlq) == 3 })
	// o-3 did succeed before (a copy of it was processed): its key is done.
	markDone(t, st, "redrive-test:orders:o-3")
	fixed.Store(true)

	code, out, errOut := cli("redrive", "--config", cfgPath, "--source", "orders", "--dry-run")
	if code != 0 || lines(out, `would move "o-`) != 3 || !strings.Contains(out, "queue "+dlq+" → queue "+q) ||
		!strings.Contains(out, "redrive orders (dry run): would move 3 dead letter(s); nothing changed") {
		t.Fatalf("dry run: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	testutil.Eventually(t, 10*time.Second, "the dry run's dead letters back", func() bool { return rabbit.Ready(dlq) == 3 })

	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "orders", "--limit", "1")
	if code != 0 || lines(out, "moved ") != 1 || !strings.Contains(out, "moved 1 dead letter(s); --limit 1 reached, more remain") {
		t.Fatalf("--limit 1: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	testutil.Eventually(t, 10*time.Second, "two dead letters left", func() bool { return rabbit.Ready(dlq) == 2 })

	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "orders")
	if code != 0 || lines(out, "moved ") != 2 || !strings.Contains(out, "redrive orders: moved 2 dead letter(s)\n") {
		t.Fatalf("redrive: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	reg := d.Registry()
	testutil.Eventually(t, 20*time.Second, "o-1 and o-2 forwarded, o-3 a duplicate", func() bool {
		return testutil.Counter(t, reg, "dedupe_proxy_messages_total", map[string]string{"source": "orders", "result": "duplicate"}) == 1 &&
			testutil.Counter(t, reg, "dedupe_proxy_messages_total", map[string]string{"source": "orders", "result": "forwarded"}) == 2
	})
	ok := map[string]int{}
	for _, r := range app.Requests() {
		if r.Status == 200 {
			ok[r.Key]++
			if string(r.Body) != string(envelope(r.Key)) {
				t.Errorf("%s reached the app as %q", r.Key, r.Body)
			}
		}
	}
	if ok["o-1"] != 1 || ok["o-2"] != 1 || ok["o-3"] != 0 || len(ok) != 2 {
		t.Errorf("the app succeeded for %v; want o-1 and o-2 once, o-3 (done before) never", ok)
	}
	if n := rabbit.Ready(dlq); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
	if s := keyState(t, st, "redrive-test:orders:o-3"); s != seenset.Done {
		t.Errorf("o-3 is %s, want done", s)
	}
}

// RabbitMQ, mode dlx: RabbitMQ dead-letters through the queue's own
// exchange into a queue shared with another source's queue. Without
// dead_letter.queue the error names the field; with it, --forget-keys
// forgets the done key, moves this source's dead letter back without
// RabbitMQ's x-death headers, body byte for byte, and leaves the other
// source's dead letter where it was.
func TestRedriveRabbitMQDLXForgetKeys(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	dlq := rabbit.Queue("redrive-dlx-dlq-", nil)
	dlx := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	q := rabbit.Queue("redrive-dlx-q-", dlx)
	other := rabbit.Queue("redrive-dlx-other-", dlx)
	st, prefix := redriveStore(t)
	body := []byte(`{"meta":{"id":"k-1"},"note":"b\u00e9yte for byte"}` + "\n")
	rabbit.Publish(q, amqp.Publishing{ContentType: "application/json", MessageId: "mid-1", Headers: amqp.Table{"x-app": "keep-me"}, Body: body})
	rabbit.Publish(other, amqp.Publishing{Body: envelope("k-other")})
	for _, name := range []string{q, other} {
		ch, err := rabbit.Conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		d, ok, err := ch.Get(name, false)
		if err != nil || !ok {
			t.Fatalf("get %s: %v %v", name, ok, err)
		}
		if err := d.Nack(false, false); err != nil {
			t.Fatal(err)
		}
		_ = ch.Close()
	}
	testutil.Eventually(t, 10*time.Second, "two dead letters", func() bool { return rabbit.Ready(dlq) == 2 })
	markDone(t, st, "redrive-dlx:orders:k-1")

	base := fmt.Sprintf(`consumer: redrive-dlx
seenset: {redis: {addrs: [%q], prefix: %q}}
sources:
  - name: orders
    rabbitmq:
      url: %q
      queue: %s
      dead_letter: {mode: dlx%%s}
`, testutil.RedisAddr(), prefix, testutil.RabbitURL(), q)
	noQueue := writeConfig(t, fmt.Sprintf(base, ""))
	code, out, errOut := cli("redrive", "--config", noQueue, "--source", "orders")
	if code != 1 || !strings.Contains(errOut, "redrive: source orders: sources[0].rabbitmq.dead_letter.queue is not set") {
		t.Fatalf("dlx without a queue: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	cfgPath := writeConfig(t, fmt.Sprintf(base, ", queue: "+dlq))
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "orders", "--forget-keys")
	want := `moved "k-1"  queue ` + dlq + ` → queue ` + q + `  (key forgotten)`
	if code != 0 || !strings.Contains(out, want) ||
		!strings.Contains(out, "redrive orders: moved 1 dead letter(s), 1 key(s) forgotten; 1 of other sources left in place") {
		t.Fatalf("redrive --forget-keys: exit %d, stdout:\n%s\nstderr: %s\nwant the line %q", code, out, errOut, want)
	}
	if s := keyState(t, st, "redrive-dlx:orders:k-1"); s != seenset.Absent {
		t.Errorf("k-1 is %s after --forget-keys, want absent", s)
	}
	d, ok := rabbit.Get(q)
	if !ok {
		t.Fatal("nothing in the source queue")
	}
	if string(d.Body) != string(body) || d.ContentType != "application/json" || d.MessageId != "mid-1" || d.Headers["x-app"] != "keep-me" {
		t.Errorf("redriven message: body %q, content type %q, message id %q, headers %v", d.Body, d.ContentType, d.MessageId, d.Headers)
	}
	for k := range d.Headers {
		if strings.HasPrefix(k, "x-death") || strings.HasPrefix(k, "x-first-death") || strings.HasPrefix(k, "x-last-death") {
			t.Errorf("redriven message still has %s", k)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the other source's dead letter left", func() bool { return rabbit.Ready(dlq) == 1 })
	if d, ok := rabbit.Get(dlq); !ok || string(d.Body) != string(envelope("k-other")) {
		t.Errorf("the dead-letter queue holds %q, want the other source's", d.Body)
	}
}

// Kafka: dead letters in two partitions of the dead-letter topic, one of
// another source. A dry run produces and commits nothing; --limit 2 and
// then a plain run move the three back to their original partitions,
// key and value unchanged, reason headers gone; a third run finds
// nothing left, since the redrive group committed past them.
func TestRedriveKafka(t *testing.T) {
	c := kafkatest.Start(t, 2, []string{"orders", "orders.dlq"})
	dl := func(source string, part int, id string) kafkatest.Record {
		return kafkatest.Record{Key: []byte("rk-" + id), Value: envelope(id), Headers: []kgo.RecordHeader{
			{Key: "x-app", Value: []byte("keep-me")},
			{Key: broker.HeaderReason, Value: []byte("status 400")},
			{Key: broker.HeaderSource, Value: []byte(source)},
			{Key: broker.HeaderOriginalTopic, Value: []byte("orders")},
			{Key: broker.HeaderOriginalPart, Value: []byte(fmt.Sprint(part))},
			{Key: broker.HeaderOriginalOffset, Value: []byte("7")},
		}}
	}
	r0, r1, r2, r3 := dl("events", 1, "e-1"), dl("events", 0, "e-2"), dl("billing", 0, "b-1"), dl("events", 1, "e-3")
	r0.Partition, r1.Partition, r2.Partition, r3.Partition = 0, 0, 1, 1
	c.Produce(t, "orders.dlq", r0, r1, r2, r3)
	cfgPath := writeConfig(t, fmt.Sprintf(`consumer: redrive-kafka
sources:
  - name: events
    type: kafka
    key: [record_key]
    kafka:
      brokers: [%q]
      topics: [orders]
      group: events
      dead_letter_topic: orders.dlq
`, c.Addrs[0]))
	code, out, errOut := cli("redrive", "--config", cfgPath, "--source", "events", "--dry-run")
	if code != 0 || lines(out, `would move "rk-e-`) != 3 || !strings.Contains(out, "would move 3 dead letter(s); nothing changed; 1 of other sources left in place") ||
		!strings.Contains(out, `would move "rk-e-1"  topic orders.dlq[0]@0 → topic orders[1]`) {
		t.Fatalf("dry run: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if ends := c.EndOffsets(t, "orders", 2); ends[0] != 0 || ends[1] != 0 {
		t.Fatalf("the dry run produced: %v", ends)
	}
	// Nor did it commit: the two runs below still find all three.
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "events", "--limit", "2")
	if code != 0 || lines(out, "moved ") != 2 || !strings.Contains(out, "--limit 2 reached, more remain") {
		t.Fatalf("--limit 2: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "events")
	if code != 0 || lines(out, "moved ") != 1 {
		t.Fatalf("redrive: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if off := c.Committed(t, "events.redrive", "orders.dlq", 2); off[0] != 2 || off[1] != 2 {
		t.Errorf("redrive group committed %v, want 2 and 2", off)
	}
	got := map[string]int32{}
	for p := range 2 {
		for _, r := range c.Read(t, "orders", p, 3, 2*time.Second) {
			id := strings.TrimPrefix(string(r.Key), "rk-")
			got[id] = r.Partition
			if string(r.Value) != string(envelope(id)) {
				t.Errorf("%s: value %q", id, r.Value)
			}
			if len(r.Headers) != 1 || r.Headers[0].Key != "x-app" || string(r.Headers[0].Value) != "keep-me" {
				t.Errorf("%s: headers %v, want only x-app", id, r.Headers)
			}
		}
	}
	if len(got) != 3 || got["e-1"] != 1 || got["e-2"] != 0 || got["e-3"] != 1 {
		t.Errorf("records back in orders by partition: %v, want e-1:1 e-2:0 e-3:1", got)
	}
	code, out, _ = cli("redrive", "--config", cfgPath, "--source", "events")
	if code != 0 || lines(out, "moved ") != 0 || !strings.Contains(out, "moved 0 dead letter(s)") {
		t.Errorf("third run: exit %d, stdout:\n%s", code, out)
	}
}

func digestOf(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // the element digest the Redis source uses, not a security boundary
	return hex.EncodeToString(sum[:])
}

// Redis list: the dead letters go back to the tail of the queue, oldest
// first, each with its reason record dropped; a dry run and --limit
// behave; --forget-keys forgets a done key.
func TestRedriveRedisList(t *testing.T) {
	st, prefix := redriveStore(t)
	queue := testutil.UniqueName("dptest:redrive:list:")
	dead := "{" + queue + "}:dead"
	rdb := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() { rdb.Del(context.Background(), queue, dead, dead+":reasons"); _ = rdb.Close() })
	ctx := context.Background()
	elems := []string{string(envelope("l-1")), string(envelope("l-2")), string(envelope("l-3"))}
	rdb.RPush(ctx, dead, elems[0], elems[1], elems[2])
	rdb.RPush(ctx, queue, "waiting")
	for _, e := range elems {
		rdb.HSet(ctx, dead+":reasons", digestOf(e), `{"x-dedupe-reason":"status 400"}`)
	}
	markDone(t, st, "redrive-list:jobs:l-3")
	cfgPath := writeConfig(t, fmt.Sprintf(`consumer: redrive-list
seenset: {redis: {addrs: [%q], prefix: %q}}
sources:
  - name: jobs
    type: redis
    redis:
      addrs: [%q]
      queue: %q
      dead_letter: %q
`, testutil.RedisAddr(), prefix, testutil.RedisAddr(), queue, dead))
	code, out, errOut := cli("redrive", "--config", cfgPath, "--source", "jobs", "--dry-run", "--limit", "2")
	if code != 0 || lines(out, "would move ") != 2 || !strings.Contains(out, `would move "l-1"  list `+dead+` → list `+queue) {
		t.Fatalf("dry run: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	// -o json: an object per dead letter and one for the summary; -q:
	// the summary only.
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "jobs", "--dry-run", "-o", "json")
	if js := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(js) != 4 ||
		js[0] != `{"action":"would_move","key":"l-1","from":"list `+dead+`","to":"list `+queue+`"}` ||
		!strings.HasPrefix(js[3], `{"source":"jobs","dry_run":true,"moved":3,"forgotten":0,"skipped":0,"more":false,"seconds":`) {
		t.Fatalf("-o json: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "jobs", "--dry-run", "-q")
	if code != 0 || out != "redrive jobs (dry run): would move 3 dead letter(s); nothing changed\n" {
		t.Fatalf("-q: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if rdb.LLen(ctx, dead).Val() != 3 || rdb.LLen(ctx, queue).Val() != 1 || rdb.HLen(ctx, dead+":reasons").Val() != 3 {
		t.Fatal("the dry run changed something")
	}
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "jobs", "--limit", "2")
	if code != 0 || lines(out, "moved ") != 2 {
		t.Fatalf("--limit 2: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if got := rdb.LRange(ctx, queue, 0, -1).Val(); len(got) != 3 || got[1] != elems[0] || got[2] != elems[1] {
		t.Errorf("queue after --limit 2: %q", got)
	}
	if got := rdb.HKeys(ctx, dead+":reasons").Val(); len(got) != 1 || got[0] != digestOf(elems[2]) {
		t.Errorf("reason records left: %v, want only l-3's", got)
	}
	code, out, errOut = cli("redrive", "--config", cfgPath, "--source", "jobs", "--forget-keys")
	if code != 0 || !strings.Contains(out, `moved "l-3"  list `+dead+` → list `+queue+`  (key forgotten)`) {
		t.Fatalf("--forget-keys: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if s := keyState(t, st, "redrive-list:jobs:l-3"); s != seenset.Absent {
		t.Errorf("l-3 is %s, want absent", s)
	}
	if rdb.Exists(ctx, dead, dead+":reasons").Val() != 0 || rdb.LLen(ctx, queue).Val() != 4 {
		t.Errorf("dead %d, queue %d", rdb.LLen(ctx, dead).Val(), rdb.LLen(ctx, queue).Val())
	}
}

// Redis stream: the dead letters go back as new entries without the
// x-dedupe-* fields; another source's entry stays.
func TestRedriveRedisStream(t *testing.T) {
	stream := testutil.UniqueName("dptest:redrive:stream:")
	dead := stream + ":dead"
	rdb := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() { rdb.Del(context.Background(), stream, dead); _ = rdb.Close() })
	ctx := context.Background()
	add := func(source, id string) {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: dead, Values: map[string]any{
			"body": string(envelope(id)), "bq-message-id": "m-" + id, broker.HeaderReason: "max deliveries",
			broker.HeaderSource: source, "x-dedupe-original-id": "1-1",
		}})
	}
	add("payments", "s-1")
	add("refunds", "r-1")
	add("payments", "s-2")
	cfgPath := writeConfig(t, fmt.Sprintf(`consumer: redrive-stream
sources:
  - name: payments
    type: redis
    redis:
      addrs: [%q]
      mode: stream
      stream: %q
      dead_letter: %q
`, testutil.RedisAddr(), stream, dead))
	code, out, errOut := cli("redrive", "--config", cfgPath, "--source", "payments")
	if code != 0 || lines(out, "moved ") != 2 || !strings.Contains(out, "moved 2 dead letter(s); 1 of other sources left in place") {
		t.Fatalf("redrive: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	got := rdb.XRange(ctx, stream, "-", "+").Val()
	if len(got) != 2 {
		t.Fatalf("stream holds %d entries", len(got))
	}
	for i, id := range []string{"s-1", "s-2"} {
		v := got[i].Values
		if len(v) != 2 || v["body"] != string(envelope(id)) || v["bq-message-id"] != "m-"+id {
			t.Errorf("entry %d: %v", i, v)
		}
	}
	if left := rdb.XRange(ctx, dead, "-", "+").Val(); len(left) != 1 || left[0].Values[broker.HeaderSource] != "refunds" {
		t.Errorf("dead-letter stream holds %v, want the refunds entry", left)
	}
}

// What cannot be redriven says which field or input is at fault, exits
// 1 and moves nothing; a broker or seen-set that does not answer loses
// nothing.
func TestRedriveErrors(t *testing.T) {
	rabbitDown := testutil.NewRelay(t, "127.0.0.1:5672")
	rabbitDown.SetDown(true)
	queue := testutil.UniqueName("dptest:redrive:err:")
	dead := "{" + queue + "}:dead"
	rdb := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
	t.Cleanup(func() { rdb.Del(context.Background(), queue, dead); _ = rdb.Close() })
	ctx := context.Background()
	rdb.RPush(ctx, dead, string(envelope("x-1")))
	cfgPath := writeConfig(t, fmt.Sprintf(`consumer: redrive-err
seenset: {redis: {addrs: ["127.0.0.1:1"], dial_timeout: 200ms}}
sources:
  - name: plain
    rabbitmq: {queue: plain}
  - name: events
    type: kafka
    kafka: {brokers: ["127.0.0.1:1"], topics: [events], group: g}
  - name: jobs
    type: redis
    redis: {queue: jobs}
  - name: hooks
    type: webhook
    webhook: {profile: none, secrets: [], mode: forward}
  - name: down
    rabbitmq:
      url: amqp://guest:guest@%s/
      queue: down
      dead_letter: {mode: publish, routing_key: down.dead}
  - name: redisdown
    type: redis
    redis: {addrs: ["127.0.0.1:1"], queue: q, dead_letter: "{q}:dead"}
  - name: storedown
    type: redis
    redis: {addrs: [%q], queue: %q, dead_letter: %q}
  - name: kafkadown
    type: kafka
    kafka: {brokers: ["127.0.0.1:1"], topics: [events], group: g, dead_letter_topic: events.dead}
`, rabbitDown.Addr(), testutil.RedisAddr(), queue, dead))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--source", "nope"}, `redrive: no source named "nope" (the config has plain, events, jobs, hooks, down, redisdown, storedown, kafkadown)`},
		{[]string{"--source", "plain"}, "redrive: source plain has no dead letters to redrive: sources[0].rabbitmq.dead_letter.mode is none"},
		{[]string{"--source", "events"}, "redrive: source events has no dead letters to redrive: sources[1].kafka.dead_letter_topic is not set"},
		{[]string{"--source", "jobs"}, "redrive: source jobs has no dead letters to redrive: sources[2].redis.dead_letter is not set"},
		{[]string{"--source", "hooks"}, "redrive: source hooks is a webhook source"},
		{[]string{"--source", "down"}, "redrive: connect to RabbitMQ: "},
		{[]string{"--source", "redisdown"}, "redrive: redis: dial tcp 127.0.0.1:1: connect: connection refused"},
		{[]string{"--source", "storedown", "--forget-keys"}, `redrive: seen-set: key "x-1": `},
		{[]string{"--source", "kafkadown"}, "redrive: kafka brokers 127.0.0.1:1: not reachable: "},
		{[]string{"--source", "kafkadown", "--dry-run"}, "redrive: kafka brokers 127.0.0.1:1: not reachable: "},
	} {
		code, out, errOut := cli(append([]string{"redrive", "--config", cfgPath}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || lines(out, "moved ") != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
		}
		// A summary after a failure must not read as "nothing to move".
		if strings.Contains(out, "dead letter(s)") && !strings.Contains(out, "stopped on an error") {
			t.Errorf("%v: summary %q does not say the run stopped on an error", c.args, out)
		}
	}
	if got := rdb.LRange(ctx, dead, 0, -1).Val(); len(got) != 1 || rdb.LLen(ctx, queue).Val() != 0 {
		t.Errorf("after the seen-set failed: dead %q, queue %d; want the dead letter where it was", got, rdb.LLen(ctx, queue).Val())
	}
}
