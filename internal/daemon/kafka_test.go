package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

const (
	kTopic = "orders"
	kDLQ   = "orders.dlq"
)

// kafkaHarness is one Kafka test's world: its own in-process Kafka
// (kfake), a recording app, a key prefix of its own in the shared Redis,
// and proxies started in-process from a real Config.
type kafkaHarness struct {
	*harness
	kc    *kafkatest.Cluster
	parts int
}

func newKafkaHarness(t *testing.T, partitions int, mutate func(*config.Config)) *kafkaHarness {
	t.Helper()
	kc := kafkatest.Start(t, int32(partitions), []string{kTopic, kDLQ})
	h := &kafkaHarness{harness: &harness{t: t, app: testutil.NewApp(t)}, kc: kc, parts: partitions}
	cfg, src := testConfig(h.app.URL)
	src.Type = "kafka"
	// BabelQueue's Kafka binding puts meta.id in the bq-message-id header.
	src.Key = []string{"header:bq-message-id", "json:meta.id"}
	k := &src.Kafka
	k.Brokers = kc.Addrs
	k.Topics = []string{kTopic}
	k.Group = testutil.UniqueName("dptest-group-")
	k.CommitInterval = 100 * time.Millisecond
	k.SessionTimeout = 6 * time.Second // kfake's minimum
	k.HeartbeatInterval = time.Second
	k.RebalanceTimeout = 10 * time.Second
	h.finish(cfg, src, mutate)
	return h
}

// msg is one record to produce: an envelope with meta.id id (also in the
// bq-message-id header unless id is empty).
func kmsg(partition int, recordKey, id, note string) kafkatest.Record {
	r := kafkatest.Record{Partition: partition, Value: envelope(id, note),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}}}
	if recordKey != "" {
		r.Key = []byte(recordKey)
	}
	if id != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "bq-message-id", Value: []byte(id)})
	}
	return r
}

func (h *kafkaHarness) produce(recs ...kafkatest.Record) { h.kc.Produce(h.t, kTopic, recs...) }

func (h *kafkaHarness) committed() map[int]int64 {
	return h.kc.Committed(h.t, h.cfg.Sources[0].Kafka.Group, kTopic, h.parts)
}

func (h *kafkaHarness) committedTotal() int64 {
	var n int64
	for _, o := range h.committed() {
		n += max(o, 0)
	}
	return n
}

func (p *proxy) gauge(t testing.TB, name string) float64 {
	return testutil.Counter(t, p.d.Registry(), name, nil)
}

// Every idempotency sequence of BabelQueue's conformance suite over
// Kafka: each delivery produced as a record with the bq-message-id header
// (the Kafka binding) and the envelope, the handler's outcome played by
// the app's status (ok → 200, throw → 400: dead-lettered, id unmarked),
// effects = app invocations for "run".
func TestKafkaBabelQueueIdempotencySequences(t *testing.T) {
	cases := testutil.IdempotencySequences(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			h := newKafkaHarness(t, 1, func(c *config.Config) { c.Sources[0].Kafka.DeadLetterTopic = kDLQ })
			p := h.start()
			throws := h.replaySequence(p, c, 15*time.Second, func(i int, id string) {
				h.produce(kmsg(0, "", id, strconv.Itoa(i)))
			})
			n := int64(len(c.Deliveries))
			testutil.Eventually(t, 10*time.Second, "every delivery committed", func() bool { return h.committed()[0] == n })
			if got := p.result(t, "dead_lettered"); got != float64(throws) {
				t.Fatalf("dead-lettered %v, want %d (one per throw)", got, throws)
			}
			if dl := h.kc.Read(t, kDLQ, 0, throws+1, 2*time.Second); len(dl) != throws {
				t.Fatalf("dead-letter topic holds %d records, want %d", len(dl), throws)
			}
		})
	}
}

// The request carries topic, partition, offset, record key, the content
// type and allow-listed record headers.
func TestKafkaForwardedHeaders(t *testing.T) {
	h := newKafkaHarness(t, 2, func(c *config.Config) {
		c.App.HeaderAllowlist = []string{"x-tenant"}
		c.Sources[0].Path = "/hooks/orders"
	})
	p := h.start()
	r := kmsg(1, "cust-7", "hdr-1", "")
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x-tenant", Value: []byte("acme")}, kgo.RecordHeader{Key: "x-secret", Value: []byte("no")},
		kgo.RecordHeader{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	h.produce(kmsg(1, "cust-7", "hdr-0", ""), r)
	testutil.Eventually(t, 10*time.Second, "forwarded", func() bool { return p.result(t, "forwarded") == 2 })
	req := h.app.Requests()[1]
	checks := map[string]string{
		"Idempotency-Key":     "hdr-1",
		"Content-Type":        "application/json",
		"X-Dedupe-Source":     "orders",
		"X-Dedupe-Broker":     "kafka",
		"X-Dedupe-Topic":      kTopic,
		"X-Dedupe-Partition":  "1",
		"X-Dedupe-Offset":     "1",
		"X-Dedupe-Record-Key": "cust-7",
		"X-Tenant":            "acme",
		"X-Secret":            "",
		"Traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	for k, v := range checks {
		if got := req.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if req.Path != "/hooks/orders" || string(req.Body) != string(envelope("hdr-1", "")) {
		t.Errorf("path %q body %q", req.Path, req.Body)
	}
}

// Two proxies in one group; one is stopped mid-stream and the other takes
// its partitions over: every message effected exactly once, none skipped.
func TestKafkaTwoProxiesRebalance(t *testing.T) {
	h := newKafkaHarness(t, 6, nil)
	h.app.SetRespond(func(*testutil.Request, int) int { time.Sleep(time.Millisecond); return http.StatusOK })
	p1, p2 := h.start(), h.start()
	const n = 600
	var recs []kafkatest.Record
	for i := range n {
		recs = append(recs, kmsg(i%6, "c"+strconv.Itoa(i%17), fmt.Sprintf("rb-%d", i), ""))
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < n; i += 50 {
			h.produce(recs[i : i+50]...)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	testutil.Eventually(t, 30*time.Second, "a third handled", func() bool { return h.app.Count() > n/3 })
	p1.stop(t)
	<-produced
	testutil.Eventually(t, 60*time.Second, "every message effected", func() bool { return len(h.app.Effects()) == n })
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committedTotal() == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
	f1, f2 := p1.result(t, "forwarded"), p2.result(t, "forwarded")
	if f1 == 0 || f2 == 0 || f1+f2 != n {
		t.Errorf("forwarded %v + %v, want both > 0 and %d in total", f1, f2, n)
	}
}

// A restart resumes at the committed offset: nothing committed is
// delivered again. Messages delivered again past the commit (here: an
// operator rewinds the group, as a crash before the commit would leave
// it) are recognised as duplicates and not forwarded.
func TestKafkaRestartResumesAtCommit(t *testing.T) {
	// Registered first, so it runs after every other cleanup: the proxies,
	// kfake and the app must leave no goroutine behind.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	h := newKafkaHarness(t, 3, func(c *config.Config) {
		// No interval commits: only batches of 1000 and the final commit.
		c.Sources[0].Kafka.CommitInterval = time.Hour
		c.Sources[0].Kafka.CommitEvery = 1000
	})
	batch := func(from, to int) []kafkatest.Record {
		var r []kafkatest.Record
		for i := from; i < to; i++ {
			r = append(r, kmsg(i%3, "", fmt.Sprintf("rs-%d", i), ""))
		}
		return r
	}
	h.produce(batch(0, 30)...)
	p1 := h.start()
	testutil.Eventually(t, 15*time.Second, "first 30 forwarded", func() bool { return p1.result(t, "forwarded") == 30 })
	p1.stop(t)
	if got := h.committed(); got[0] != 10 || got[1] != 10 || got[2] != 10 {
		t.Fatalf("committed %v after a clean stop, want 10 each", got)
	}

	h.produce(batch(30, 45)...)
	p2 := h.start()
	testutil.Eventually(t, 15*time.Second, "next 15 forwarded", func() bool { return p2.result(t, "forwarded") == 15 })
	time.Sleep(300 * time.Millisecond)
	if d := p2.result(t, "duplicate"); d != 0 {
		t.Fatalf("%v committed messages delivered again after the restart", d)
	}
	p2.stop(t)
	if h.app.Count() != 45 {
		t.Fatalf("app requests = %d, want 45", h.app.Count())
	}

	h.kc.SetCommitted(t, h.cfg.Sources[0].Kafka.Group, kTopic, map[int]int64{0: 0, 1: 0, 2: 0})
	p3 := h.start()
	testutil.Eventually(t, 15*time.Second, "all 45 redelivered as duplicates", func() bool { return p3.result(t, "duplicate") == 45 })
	if f := p3.result(t, "forwarded"); f != 0 || h.app.Count() != 45 {
		t.Fatalf("forwarded %v again (app requests %d): redeliveries must be duplicates", f, h.app.Count())
	}
	p3.stop(t)
	if got := h.committed(); got[0] != 15 || got[1] != 15 || got[2] != 15 {
		t.Fatalf("committed %v, want 15 each", got)
	}
}

// A poison message (app answers 400) goes to the dead-letter topic with
// its reason and origin, and its partition carries on past it.
func TestKafkaPoisonToDeadLetterTopic(t *testing.T) {
	h := newKafkaHarness(t, 2, func(c *config.Config) { c.Sources[0].Kafka.DeadLetterTopic = kDLQ })
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		if r.Key == "poison" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	p := h.start()
	poison := kmsg(0, "rk-1", "poison", "")
	poison.Headers = append(poison.Headers, kgo.RecordHeader{Key: "x-tenant", Value: []byte("acme")})
	h.produce(kmsg(0, "", "ok-0", ""), poison, kmsg(0, "", "ok-1", ""), kmsg(0, "", "ok-2", ""), kmsg(1, "", "ok-3", ""), kmsg(1, "", "ok-4", ""))
	testutil.Eventually(t, 15*time.Second, "all settled", func() bool {
		return p.result(t, "forwarded") == 5 && p.result(t, "dead_lettered") == 1
	})
	testutil.Eventually(t, 10*time.Second, "committed past the poison", func() bool {
		c := h.committed()
		return c[0] == 4 && c[1] == 2
	})
	dl := h.kc.Read(t, kDLQ, 0, 1, 10*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead-letter topic holds %d records", len(dl))
	}
	hd := map[string]string{}
	for _, x := range dl[0].Headers {
		hd[x.Key] = string(x.Value)
	}
	want := map[string]string{
		broker.HeaderReason: "permanent: status 400", broker.HeaderLastStatus: "400", broker.HeaderAttempts: "1",
		broker.HeaderSource: "orders", broker.HeaderOriginalTopic: kTopic, broker.HeaderOriginalPart: "0",
		broker.HeaderOriginalOffset: "1", "x-tenant": "acme", "bq-message-id": "poison",
	}
	for k, v := range want {
		if hd[k] != v {
			t.Errorf("dead letter header %s = %q, want %q", k, hd[k], v)
		}
	}
	if string(dl[0].Key) != "rk-1" || string(dl[0].Value) != string(envelope("poison", "")) || hd[broker.HeaderDeadLetteredAt] == "" {
		t.Errorf("dead letter key %q value %q", dl[0].Key, dl[0].Value)
	}
	if s := h.status("poison"); s.State != seenset.Absent {
		t.Errorf("poison key is %s after the dead letter, want absent (a redrive is forwarded)", s.State)
	}
}

// Without a dead-letter topic a poison message holds its partition: later
// messages of that partition are not forwarded and the offset is not
// committed past it, while other partitions carry on. Once the app
// accepts it, the partition moves again.
func TestKafkaNoDeadLetterHoldsPartition(t *testing.T) {
	h := newKafkaHarness(t, 2, func(c *config.Config) { c.Delivery.MaxAttempts = 2 })
	var fixed atomic.Bool
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		if r.Key == "poison" && !fixed.Load() {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	p := h.start()
	recs := []kafkatest.Record{kmsg(0, "", "a-0", ""), kmsg(0, "", "poison", ""), kmsg(0, "", "a-2", ""), kmsg(0, "", "a-3", "")}
	for i := range 10 {
		recs = append(recs, kmsg(1, "", fmt.Sprintf("b-%d", i), ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 15*time.Second, "other partition done", func() bool { return h.committed()[1] == 10 })
	testutil.Eventually(t, 10*time.Second, "partition held", func() bool { return p.gauge(t, "dedupe_proxy_kafka_partitions_held") == 1 })
	testutil.Eventually(t, 10*time.Second, "poison retried", func() bool { return len(h.app.Requests()) >= 11+3 })
	for range 5 {
		if c := h.committed()[0]; c != 1 {
			t.Fatalf("partition 0 committed at %d while offset 1 is unfinished, want 1", c)
		}
		for _, r := range h.app.Requests() {
			if r.Key == "a-2" || r.Key == "a-3" {
				t.Fatalf("%s forwarded past the held message", r.Key)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p.result(t, "dead_lettered") != 0 {
		t.Fatal("dead-lettered without a dead-letter topic")
	}
	fixed.Store(true)
	testutil.Eventually(t, 15*time.Second, "partition 0 moves again", func() bool { return h.committed()[0] == 4 })
	if g := p.gauge(t, "dedupe_proxy_kafka_partitions_held"); g != 0 {
		t.Fatalf("held gauge = %v after the partition moved", g)
	}
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
	if n := len(h.app.Effects()); n != 14 {
		t.Fatalf("%d keys effected, want 14", n)
	}
}

// Default ordering: within a partition the app sees messages one at a
// time, in offset order.
func TestKafkaOrderWithinPartition(t *testing.T) {
	h := newKafkaHarness(t, 6, nil)
	var mu sync.Mutex
	busy := map[string]bool{}
	last := map[string]int{}
	var bad []string
	inflight, peak := 0, 0
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		part, off := r.Header.Get("X-Dedupe-Partition"), r.Header.Get("X-Dedupe-Offset")
		o, _ := strconv.Atoi(off)
		mu.Lock()
		if busy[part] {
			bad = append(bad, "partition "+part+": two at once")
		}
		if l, ok := last[part]; ok && o != l+1 {
			bad = append(bad, fmt.Sprintf("partition %s: offset %d after %d", part, o, l))
		}
		busy[part], last[part] = true, o
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		mu.Lock()
		busy[part] = false
		inflight--
		mu.Unlock()
		return http.StatusOK
	})
	p := h.start()
	var recs []kafkatest.Record
	for i := range 240 {
		recs = append(recs, kmsg(i%6, "k"+strconv.Itoa(i%7), fmt.Sprintf("ord-%d", i), ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 30*time.Second, "all forwarded", func() bool { return p.result(t, "forwarded") == 240 })
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("partition order broken: %v", bad)
	}
	if peak < 2 {
		t.Errorf("partitions never forwarded in parallel (peak %d)", peak)
	}
}

// ordering: key — within one partition, messages with different record
// keys are at the app together, one key's messages never are and arrive
// in offset order; keyless messages are ordered among themselves.
func TestKafkaKeyOrdering(t *testing.T) {
	h := newKafkaHarness(t, 1, func(c *config.Config) {
		c.Sources[0].Kafka.Ordering = "key"
		c.Sources[0].Kafka.MaxInFlight = 16
	})
	var mu sync.Mutex
	busy := map[string]bool{}
	last := map[string]int{}
	var bad []string
	inflight, peak := 0, 0
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		k := r.Header.Get("X-Dedupe-Record-Key")
		if k == "" {
			// A keyless record is ordered by its dedupe key.
			k = "dedupe key " + r.Key
		}
		o, _ := strconv.Atoi(r.Header.Get("X-Dedupe-Offset"))
		mu.Lock()
		if busy[k] {
			bad = append(bad, fmt.Sprintf("key %q: two at once", k))
		}
		if l, ok := last[k]; ok && o <= l {
			bad = append(bad, fmt.Sprintf("key %q: offset %d after %d", k, o, l))
		}
		busy[k], last[k] = true, o
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		time.Sleep(15 * time.Millisecond)
		mu.Lock()
		busy[k] = false
		inflight--
		mu.Unlock()
		return http.StatusOK
	})
	p := h.start()
	var recs []kafkatest.Record
	for i := range 60 {
		rk := ""
		if i%6 != 5 {
			rk = "cust-" + strconv.Itoa(i%6)
		}
		recs = append(recs, kmsg(0, rk, fmt.Sprintf("key-%d", i), ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 30*time.Second, "all forwarded", func() bool { return p.result(t, "forwarded") == 60 })
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committed()[0] == 60 })
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("key order broken: %v", bad)
	}
	if peak < 3 {
		t.Fatalf("different record keys did not overlap (peak concurrency %d)", peak)
	}
}

// ordering: key with keyless records: one request that hangs far past
// app.timeout holds only its dedupe key. The other messages of its
// partition reach the app, are acked and committed up to it meanwhile;
// the commit never passes it; a redelivery of its id behind it waits and
// is then found duplicate; once the app answers, everything is committed
// and every id took effect once.
func TestKafkaKeylessHangHoldsOnlyItsKey(t *testing.T) {
	const parts, per = 3, 20
	h := newKafkaHarness(t, parts, func(c *config.Config) {
		c.App.Timeout = 200 * time.Millisecond
		c.Sources[0].Kafka.Ordering = "key"
	})
	release := make(chan struct{})
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		if r.Key == "p0-3" {
			<-release
		}
		return http.StatusOK
	})
	p := h.start()
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the proxy stops, should the test fail
	var recs []kafkatest.Record
	for pt := range parts {
		for i := range per {
			id := fmt.Sprintf("p%d-%d", pt, i)
			if pt == 0 && i == 10 {
				id = "p0-3" // a redelivery of the one that hangs
			}
			recs = append(recs, kmsg(pt, "", id, ""))
		}
	}
	h.produce(recs...)
	testutil.Eventually(t, 30*time.Second, "every other message forwarded while one hangs",
		func() bool { return p.result(t, "forwarded") == parts*per-2 })
	testutil.Eventually(t, 10*time.Second, "the other partitions committed, partition 0 up to the hung message", func() bool {
		c := h.committed()
		return c[0] == 3 && c[1] == per && c[2] == per
	})
	time.Sleep(300 * time.Millisecond) // several commit intervals
	if c := h.committed()[0]; c != 3 {
		t.Fatalf("partition 0 committed at %d while offset 3 is unfinished", c)
	}
	let()
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committedTotal() == parts*per })
	if d := p.result(t, "duplicate"); d != 1 {
		t.Fatalf("%v duplicates, want 1 (the redelivered id)", d)
	}
	effects := h.app.Effects()
	if len(effects) != parts*per-1 {
		t.Fatalf("%d ids took effect, want %d", len(effects), parts*per-1)
	}
	for id, n := range effects {
		if n != 1 {
			t.Errorf("%s took effect %d times", id, n)
		}
	}
}

// App unreachable: nothing is committed past unfinished work, nothing is
// lost; everything is forwarded once the app is up.
func TestKafkaAppDown(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	h := newKafkaHarness(t, 2, func(c *config.Config) {
		c.App.URL = "http://" + addr
		c.Delivery.MaxAttempts = 3
	})
	p := h.start()
	const n = 20
	var recs []kafkatest.Record
	for i := range n {
		recs = append(recs, kmsg(i%2, "", fmt.Sprintf("down-%d", i), ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 10*time.Second, "attempts while the app is down", func() bool {
		return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_app_responses_total", map[string]string{"class": "error"}) >= 4
	})
	time.Sleep(time.Second)
	if s := p.settled(t); s != 0 {
		t.Fatalf("%v messages settled while the app was down", s)
	}
	if c := h.committed(); c[0] > 0 || c[1] > 0 {
		t.Fatalf("committed %v while the app was down", c)
	}
	serveAppOn(t, h.app, addr)
	testutil.Eventually(t, 30*time.Second, "all forwarded once the app is up", func() bool { return p.result(t, "forwarded") == n })
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committedTotal() == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
}

// Redis unreachable: fail closed — nothing forwarded, nothing committed;
// everything once it is back.
func TestKafkaRedisDown(t *testing.T) {
	rs := testutil.StartRedis(t)
	h := newKafkaHarness(t, 2, func(c *config.Config) {
		c.SeenSet.Redis.Addrs = []string{rs.Addr()}
		c.SeenSet.Redis.DialTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.ReadTimeout = 200 * time.Millisecond
		c.SeenSet.Redis.WriteTimeout = 200 * time.Millisecond
	})
	p := h.start()
	rs.Kill()
	const n = 20
	var recs []kafkatest.Record
	for i := range n {
		recs = append(recs, kmsg(i%2, "", fmt.Sprintf("rd-%d", i), ""))
	}
	h.produce(recs...)
	testutil.Eventually(t, 10*time.Second, "store errors seen", func() bool { return p.event(t, "store_error") > 0 })
	time.Sleep(time.Second)
	if h.app.Count() != 0 || p.settled(t) != 0 {
		t.Fatalf("app called %d times, %v settled while Redis was down", h.app.Count(), p.settled(t))
	}
	if c := h.committed(); c[0] > 0 || c[1] > 0 {
		t.Fatalf("committed %v while Redis was down", c)
	}
	rs.Restart()
	testutil.Eventually(t, 30*time.Second, "all forwarded after Redis is back", func() bool { return p.result(t, "forwarded") == n })
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committedTotal() == n })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
}

// The broker's connections are cut mid-stream, three times: the proxy
// reconnects, nothing is lost and nothing is effected twice.
func TestKafkaBrokerConnectionCut(t *testing.T) {
	h := newKafkaHarness(t, 3, nil)
	h.app.SetRespond(func(*testutil.Request, int) int { time.Sleep(time.Millisecond); return http.StatusOK })
	p := h.start()
	const n = 300
	for round := range 3 {
		var recs []kafkatest.Record
		for i := round * n / 3; i < (round+1)*n/3; i++ {
			recs = append(recs, kmsg(i%3, "", fmt.Sprintf("cut-%d", i), ""))
		}
		h.produce(recs...)
		testutil.Eventually(t, 20*time.Second, "progress before the cut", func() bool { return h.app.Count() > round*n/3 })
		h.kc.Cut()
	}
	testutil.Eventually(t, 60*time.Second, "every key effected", func() bool { return len(h.app.Effects()) == n })
	testutil.Eventually(t, 30*time.Second, "committed to the end", func() bool { return h.committedTotal() == n })
	testutil.Eventually(t, 10*time.Second, "ready again", func() bool { return p.d.Ready(context.Background()) == nil })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s effected %d times", k, c)
		}
	}
}

// A key another replica is forwarding (busy) holds its partition: the
// message waits and re-claims, and the messages after it wait too, so the
// partition's order is kept. When the other replica lets go, both go
// through, in order.
func TestKafkaBusyKeyWaitsInOrder(t *testing.T) {
	h := newKafkaHarness(t, 1, nil)
	p := h.start()
	ctx := context.Background()
	if res, err := p.d.Store().Claim(ctx, storedKey("busy-1"), "other-replica", 30*time.Second); err != nil || res != seenset.Claimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	h.produce(kmsg(0, "", "busy-1", ""), kmsg(0, "", "busy-2", ""))
	testutil.Eventually(t, 10*time.Second, "busy seen", func() bool { return p.event(t, "busy") >= 2 })
	if h.app.Count() != 0 {
		t.Fatalf("app called %d times while the first key was busy", h.app.Count())
	}
	if err := p.d.Store().Release(ctx, storedKey("busy-1"), "other-replica"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "both forwarded", func() bool { return p.result(t, "forwarded") == 2 })
	if r := h.app.Requests(); r[0].Key != "busy-1" || r[1].Key != "busy-2" {
		t.Fatalf("order %s, %s", r[0].Key, r[1].Key)
	}
	testutil.Eventually(t, 10*time.Second, "committed", func() bool { return h.committed()[0] == 2 })
}

// A backlog reaches the proxy in batches (batch_size): every key is
// claimed in one round trip, duplicates inside a batch and across
// partitions are skipped, and each partition's messages still reach the
// app one at a time in offset order.
func TestKafkaBacklogBatches(t *testing.T) {
	h := newKafkaHarness(t, 3, func(c *config.Config) { c.Sources[0].Kafka.BatchSize = 16 })
	var recs []kafkatest.Record
	unique := map[string]bool{}
	for i := range 300 {
		part := i % 3
		id := fmt.Sprintf("batch-%d", i)
		switch {
		case i%5 == 3:
			id = fmt.Sprintf("batch-%d", i-3) // same partition, a few behind
		case i%7 == 6:
			id = fmt.Sprintf("batch-%d", i-1) // another partition
		}
		unique[id] = true
		recs = append(recs, kmsg(part, "", id, ""))
	}
	// Produced before the proxy starts: a backlog, fetched in batches.
	h.produce(recs...)
	var mu sync.Mutex
	last := map[string]int{}
	var bad []string
	h.app.SetRespond(func(r *testutil.Request, _ int) int {
		part := r.Header.Get("X-Dedupe-Partition")
		o, _ := strconv.Atoi(r.Header.Get("X-Dedupe-Offset"))
		mu.Lock()
		if l, ok := last[part]; ok && o <= l {
			bad = append(bad, fmt.Sprintf("partition %s: offset %d after %d", part, o, l))
		}
		last[part] = o
		mu.Unlock()
		return http.StatusOK
	})
	p := h.start()
	testutil.Eventually(t, 30*time.Second, "backlog settled", func() bool {
		return p.result(t, "forwarded")+p.result(t, "duplicate") == 300
	})
	if got := p.result(t, "forwarded"); got != float64(len(unique)) {
		t.Fatalf("forwarded %v, want %d unique keys", got, len(unique))
	}
	for k, n := range h.app.Effects() {
		if n != 1 {
			t.Errorf("key %s effected %d times", k, n)
		}
	}
	if len(h.app.Effects()) != len(unique) {
		t.Fatalf("app saw %d keys, want %d", len(h.app.Effects()), len(unique))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("partition order broken: %v", bad)
	}
	// One claim round trip per batch, and one per duplicate that found
	// its original still in flight in the same batch: far fewer than one
	// per message.
	claims := testutil.Counter(t, p.d.Registry(), "dedupe_proxy_seenset_duration_seconds", map[string]string{"op": "claim"})
	if claims >= 200 {
		t.Errorf("%v claim round trips for 300 messages: the backlog was not claimed in batches", claims)
	}
	t.Logf("%v claim round trips for 300 messages", claims)
	testutil.Eventually(t, 10*time.Second, "committed to the end", func() bool { return h.committedTotal() == 300 })
}

// isolation_level reaches the source: by default an aborted transaction's
// records are never forwarded, with read_uncommitted they are; the
// transaction markers never are.
func TestKafkaIsolationLevel(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  string
	}{
		{"", "[b0 b1 c]"},
		{"read_uncommitted", "[a0 a1 b0 b1 c]"},
	} {
		t.Run("level="+tc.level, func(t *testing.T) {
			h := newKafkaHarness(t, 1, func(c *config.Config) {
				if tc.level != "" {
					c.Sources[0].Kafka.IsolationLevel = tc.level
				}
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.Addrs...), kgo.TransactionalID(testutil.UniqueName("dptest-tx-")),
				kgo.DefaultProduceTopic(kTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			for _, txn := range []struct {
				ids    []string
				commit bool
			}{{[]string{"a0", "a1"}, false}, {[]string{"b0", "b1"}, true}} {
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for _, id := range txn.ids {
					r := &kgo.Record{Value: envelope(id, ""), Headers: []kgo.RecordHeader{{Key: "bq-message-id", Value: []byte(id)}}}
					if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(txn.commit)); err != nil {
					t.Fatal(err)
				}
			}
			h.produce(kmsg(0, "", "c", ""))
			p := h.start()
			// a0 a1 abort-marker b0 b1 commit-marker c
			testutil.Eventually(t, 15*time.Second, "committed to the end", func() bool { return h.committed()[0] == 7 })
			var got []string
			for _, r := range h.app.Requests() {
				got = append(got, r.Header.Get("Idempotency-Key"))
			}
			if fmt.Sprint(got) != tc.want {
				t.Fatalf("forwarded %q, want %s", got, tc.want)
			}
			if n := p.result(t, "forwarded"); n != float64(len(got)) {
				t.Fatalf("forwarded metric %v, app saw %d", n, len(got))
			}
		})
	}
}

// A rebalance takes a partition away while a request for it is open at
// the app, slower than app.timeout, the lease and half the rebalance
// timeout. The revoke does not wait for it: the partition moves, the
// request goes on with its claim renewed, and the new owner waits for
// the key. The late 2xx commits it, the new owner acks it as a
// duplicate: each key reaches the app once and the offsets reach the end.
func TestKafkaRevokeWithOpenRequest(t *testing.T) {
	h := newKafkaHarness(t, 2, func(c *config.Config) {
		c.App.Timeout = 500 * time.Millisecond
		c.SeenSet.Lease = 2 * time.Second
	})
	var slow sync.Map
	var opened atomic.Int32
	h.app.SetRespond(func(r *testutil.Request, n int) int {
		opened.Add(1)
		if _, again := slow.LoadOrStore(r.Header.Get("Idempotency-Key"), true); !again {
			time.Sleep(12 * time.Second)
		}
		return http.StatusOK
	})
	a := h.start()
	h.produce(kmsg(0, "", "rv-0", ""), kmsg(1, "", "rv-1", ""))
	testutil.Eventually(t, 20*time.Second, "both requests open at the app", func() bool { return opened.Load() == 2 })
	b := h.start()
	testutil.Eventually(t, 60*time.Second, "committed to the end", func() bool { return h.committedTotal() == 2 })
	for k, c := range h.app.Effects() {
		if c != 1 {
			t.Errorf("key %s reached the app %d times, want 1", k, c)
		}
	}
	if n := h.app.Count(); n != 2 {
		t.Errorf("the app got %d requests, want 2", n)
	}
	if n := a.event(t, "slow"); n != 2 {
		t.Errorf("slow events on the first member = %v, want 2", n)
	}
	// The moved partition's message went to the new owner, which found
	// the key busy and then done.
	if d := b.result(t, "duplicate"); d != 1 {
		t.Errorf("duplicates acked by the new owner = %v, want 1", d)
	}
}
