package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// reuseWorld is one source kind's test world for key reuse: a harness
// with a dead letter configured, how to publish a body under a meta.id,
// and the reasons of what was dead-lettered.
type reuseWorld struct {
	*harness
	send func(id string, body []byte)
	// sendAll, when set, publishes many in one go (Kafka: one produce).
	sendAll func(ids []string, bodies [][]byte)
	reasons func() []string
}

// reuseKinds builds a world of every source kind; mutate applies to the
// config before it is validated.
var reuseKinds = []struct {
	name string
	new  func(t *testing.T, mutate func(*config.Config)) reuseWorld
}{
	{"rabbitmq", func(t *testing.T, mutate func(*config.Config)) reuseWorld {
		h := newHarness(t, nil)
		dlq := h.rabbit.Queue("dptest.dlq.", nil)
		h.cfg.Sources[0].RabbitMQ.DeadLetter = config.RabbitDeadLetter{Mode: "publish", RoutingKey: dlq}
		revalidate(h, mutate)
		return reuseWorld{harness: h,
			send: func(_ string, body []byte) {
				h.rabbit.Publish(h.queue, amqp.Publishing{ContentType: "application/json", Body: body})
			},
			reasons: func() []string {
				var out []string
				for {
					m, ok := h.rabbit.Get(dlq)
					if !ok {
						return out
					}
					out = append(out, fmt.Sprint(m.Headers[broker.HeaderReason]))
				}
			}}
	}},
	{"kafka", func(t *testing.T, mutate func(*config.Config)) reuseWorld {
		// Two partitions, sent to in turn: two bodies of one id can run at
		// once, as after a producer re-keyed a message.
		h := newKafkaHarness(t, 2, func(c *config.Config) { c.Sources[0].Kafka.DeadLetterTopic = kDLQ })
		revalidate(h.harness, mutate)
		sent, read := 0, [2]int{}
		return reuseWorld{harness: h.harness,
			send: func(id string, body []byte) {
				h.produce(kafkatest.Record{Partition: sent % 2, Value: body, Headers: []kgo.RecordHeader{{Key: "bq-message-id", Value: []byte(id)}}})
				sent++
			},
			sendAll: func(ids []string, bodies [][]byte) {
				recs := make([]kafkatest.Record, len(ids))
				for i := range ids {
					recs[i] = kafkatest.Record{Partition: sent % 2, Value: bodies[i], Headers: []kgo.RecordHeader{{Key: "bq-message-id", Value: []byte(ids[i])}}}
					sent++
				}
				h.produce(recs...)
			},
			reasons: func() []string {
				var out []string
				for part := range read {
					for _, r := range h.kc.Read(t, kDLQ, part, 1000, 500*time.Millisecond)[read[part]:] {
						read[part]++
						for _, x := range r.Headers {
							if x.Key == broker.HeaderReason {
								out = append(out, string(x.Value))
							}
						}
					}
				}
				return out
			}}
	}},
	{"redis-list", func(t *testing.T, mutate func(*config.Config)) reuseWorld {
		h := newRedisHarness(t, testutil.RedisAddr(), mutate)
		return reuseWorld{harness: h.harness,
			send: func(_ string, body []byte) { h.push(body) },
			reasons: func() []string {
				var out []string
				ctx := context.Background()
				for {
					el, err := h.rq.LPop(ctx, h.dead).Result()
					if err != nil {
						return out
					}
					why, _ := redissource.DeadLetterReason(ctx, h.rq, h.dead, []byte(el))
					out = append(out, why[broker.HeaderReason])
				}
			}}
	}},
	{"redis-stream", func(t *testing.T, mutate func(*config.Config)) reuseWorld {
		h := newRedisStreamHarness(t, mutate)
		n := 0
		return reuseWorld{harness: h.harness,
			send: func(id string, body []byte) { h.xadd(id, body) },
			reasons: func() []string {
				var out []string
				for _, e := range h.rq.XRange(context.Background(), h.dead, "-", "+").Val()[n:] {
					n++
					out = append(out, fmt.Sprint(e.Values[broker.HeaderReason]))
				}
				return out
			}}
	}},
}

// revalidate applies mutate to a harness whose config is already built
// (a dead letter set after the queue was declared) and validates again.
func revalidate(h *harness, mutate func(*config.Config)) {
	h.t.Helper()
	if mutate != nil {
		mutate(&h.cfg)
	}
	if err := h.cfg.Validate(); err != nil {
		h.t.Fatalf("test config invalid: %v", err)
	}
}

func order(id string, amount int, createdAt string) []byte {
	return fmt.Appendf(nil, `{"meta":{"id":%q,"created_at":%q},"payload":{"amount":%d}}`, id, createdAt, amount)
}

func keyReuse(action string, fields ...string) func(*config.Config) {
	return func(c *config.Config) {
		c.Sources[0].KeyReuse = action
		c.Sources[0].KeyReuseFields = fields
	}
}

func (p *proxy) keyReuseTotal(t testing.TB) float64 {
	return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_key_reuse_total", map[string]string{"source": "orders"})
}

// A key done for one body, then the same id with another body, then the
// first body again: under each key_reuse, on every source kind. The
// byte-identical copy is a plain duplicate under every setting.
func TestKeyReuseAcrossTime(t *testing.T) {
	t1 := "2026-01-01T00:00:00Z"
	first, other := order("ord-1", 10, t1), order("ord-1", 99, t1)
	for _, kind := range reuseKinds {
		for _, action := range []string{"warn", "dead_letter", "forward"} {
			t.Run(kind.name+"/"+action, func(t *testing.T) {
				t.Parallel()
				w := kind.new(t, keyReuse(action))
				p := w.start()
				if got := p.keyReuseTotal(t); got != 0 {
					t.Fatalf("dedupe_proxy_key_reuse_total = %v before any message, want a series at 0", got)
				}
				w.send("ord-1", first)
				testutil.Eventually(t, 15*time.Second, "first settled", func() bool { return p.settled(t) == 1 })
				w.send("ord-1", other)
				testutil.Eventually(t, 15*time.Second, "reuse settled", func() bool { return p.settled(t) == 2 })
				w.send("ord-1", first)
				testutil.Eventually(t, 15*time.Second, "copy settled", func() bool { return p.settled(t) == 3 })

				rs := w.app.Requests()
				if p.keyReuseTotal(t) != 1 {
					t.Fatalf("key_reuse_total = %v, want 1", p.keyReuseTotal(t))
				}
				var reasons []string
				switch action {
				case "warn":
					if len(rs) != 1 || p.result(t, "duplicate") != 2 {
						t.Fatalf("app got %d, duplicates %v; want 1 and 2", len(rs), p.result(t, "duplicate"))
					}
				case "dead_letter":
					testutil.Eventually(t, 10*time.Second, "dead letter readable", func() bool {
						reasons = append(reasons, w.reasons()...)
						return len(reasons) > 0
					})
					if len(rs) != 1 || p.result(t, "dead_lettered") != 1 || p.result(t, "duplicate") != 1 ||
						len(reasons) != 1 || reasons[0] != "key reused with a different body" {
						t.Fatalf("app got %d, dead-lettered %v (%q), duplicates %v", len(rs), p.result(t, "dead_lettered"), reasons, p.result(t, "duplicate"))
					}
				case "forward":
					if len(rs) != 2 || string(rs[1].Body) != string(other) || rs[1].Header.Get("X-Dedupe-Key-Reused") != "true" ||
						rs[0].Header.Get("X-Dedupe-Key-Reused") != "" || rs[1].Key != "ord-1" {
						t.Fatalf("app got %d requests; want the first, then the other body marked X-Dedupe-Key-Reused: true", len(rs))
					}
					// The forwarded reuse is recorded under its own key: its
					// redelivery is a duplicate, not a second forward.
					w.send("ord-1", other)
					testutil.Eventually(t, 15*time.Second, "reuse copy settled", func() bool { return p.settled(t) == 4 })
					if n := w.app.Count(); n != 2 || p.result(t, "duplicate") != 2 || p.result(t, "forwarded") != 2 {
						t.Fatalf("after the reused body again: app got %d, duplicates %v, forwarded %v; want 2, 2, 2",
							n, p.result(t, "duplicate"), p.result(t, "forwarded"))
					}
				}
				// The key's done mark still holds the first body's digest.
				if st := w.status("ord-1"); st.State != seenset.Done || seenset.TokenDigest(st.Token) != seenset.SumDigest(first).String() {
					t.Fatalf("ord-1 is %s with digest %q, want done with the first body's", st.State, seenset.TokenDigest(st.Token))
				}
			})
		}
	}
}

// key_reuse_fields: ["payload"]: a re-published envelope with a new
// meta.created_at is a plain duplicate; another payload is a reuse.
func TestKeyReuseFieldScoped(t *testing.T) {
	for _, kind := range reuseKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			w := kind.new(t, keyReuse("dead_letter", "payload"))
			p := w.start()
			w.send("ord-2", order("ord-2", 10, "2026-01-01T00:00:00Z"))
			testutil.Eventually(t, 15*time.Second, "first settled", func() bool { return p.settled(t) == 1 })
			w.send("ord-2", order("ord-2", 10, "2026-01-02T09:30:00Z"))
			testutil.Eventually(t, 15*time.Second, "re-published settled", func() bool { return p.settled(t) == 2 })
			if p.result(t, "duplicate") != 1 || p.keyReuseTotal(t) != 0 {
				t.Fatalf("re-published envelope: duplicates %v, key reuse %v; want 1, 0", p.result(t, "duplicate"), p.keyReuseTotal(t))
			}
			w.send("ord-2", order("ord-2", 99, "2026-01-01T00:00:00Z"))
			testutil.Eventually(t, 15*time.Second, "reuse settled", func() bool { return p.settled(t) == 3 })
			if p.result(t, "dead_lettered") != 1 || p.keyReuseTotal(t) != 1 || w.app.Count() != 1 {
				t.Fatalf("other payload: dead-lettered %v, key reuse %v, app %d; want 1, 1, 1", p.result(t, "dead_lettered"), p.keyReuseTotal(t), w.app.Count())
			}
		})
	}
}

// Two bodies under one id at once: the second finds the first's claim
// (busy) while the app holds the first, and once the first is done it is
// caught as a reuse, not acked as a duplicate.
func TestKeyReuseConcurrent(t *testing.T) {
	for _, kind := range reuseKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			w := kind.new(t, keyReuse("dead_letter"))
			release, arrived := make(chan struct{}), make(chan struct{}, 4)
			var once sync.Once
			defer once.Do(func() { close(release) })
			w.app.SetRespond(func(*testutil.Request, int) int {
				arrived <- struct{}{}
				<-release
				return http.StatusOK
			})
			p := w.start()
			w.send("ord-3", order("ord-3", 10, ""))
			select {
			case <-arrived:
			case <-time.After(15 * time.Second):
				t.Fatal("the first body did not reach the app")
			}
			w.send("ord-3", order("ord-3", 99, ""))
			testutil.Eventually(t, 15*time.Second, "second found the key busy", func() bool { return p.event(t, "busy") >= 1 })
			once.Do(func() { close(release) })
			testutil.Eventually(t, 20*time.Second, "both settled", func() bool { return p.settled(t) >= 2 && p.result(t, "dead_lettered") == 1 })
			if p.keyReuseTotal(t) != 1 || p.result(t, "forwarded") != 1 || w.app.Count() != 1 {
				t.Fatalf("key reuse %v, forwarded %v, app %d; want 1, 1, 1", p.keyReuseTotal(t), p.result(t, "forwarded"), w.app.Count())
			}
			if st := w.status("ord-3"); seenset.TokenDigest(st.Token) != seenset.SumDigest(order("ord-3", 10, "")).String() {
				t.Fatal("the done mark does not hold the first body's digest")
			}
		})
	}
}

// A mixed run: 10,000 messages, 6,900 first bodies, 3,000 byte-identical
// copies of them and 100 other bodies under ids that have no copies, in
// random order. Whichever of an id's two bodies comes first is processed,
// the other is the reuse, so every count is exact.
func TestKeyReuseMixedRun(t *testing.T) {
	const total, dups, reuses = 10000, 3000, 100
	uniques := total - dups - reuses
	for _, kind := range reuseKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			w := kind.new(t, func(c *config.Config) {
				keyReuse("warn")(c)
				c.Delivery.BusyDelay = 20 * time.Millisecond
			})
			type msg struct {
				id   string
				body []byte
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var msgs []msg
			for i := range uniques {
				id := fmt.Sprintf("m-%05d", i)
				msgs = append(msgs, msg{id, order(id, i, "")})
			}
			// Ids 0..reuses-1 get another body; the rest may get copies.
			for i := range reuses {
				msgs = append(msgs, msg{msgs[i].id, order(msgs[i].id, -1, "")})
			}
			for range dups {
				m := msgs[reuses+rng.IntN(uniques-reuses)]
				msgs = append(msgs, m)
			}
			rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
			p := w.start()
			if w.sendAll != nil {
				ids, bodies := make([]string, len(msgs)), make([][]byte, len(msgs))
				for i, m := range msgs {
					ids[i], bodies[i] = m.id, m.body
				}
				w.sendAll(ids, bodies)
			} else {
				for _, m := range msgs {
					w.send(m.id, m.body)
				}
			}
			testutil.Eventually(t, 5*time.Minute, "all settled", func() bool { return p.settled(t) == total })
			if f, d, r := p.result(t, "forwarded"), p.result(t, "duplicate"), p.keyReuseTotal(t); f != float64(uniques) || d != dups+reuses || r != reuses {
				t.Fatalf("forwarded %v, duplicate %v, key reuse %v; want %d, %d, %d", f, d, r, uniques, dups+reuses, reuses)
			}
			if n := w.app.Count(); n != uniques {
				t.Fatalf("app got %d requests, want %d", n, uniques)
			}
			for id, n := range w.app.Effects() {
				if n != 1 {
					t.Fatalf("%s took effect %d times", id, n)
				}
			}
		})
	}
}
