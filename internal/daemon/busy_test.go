package daemon

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// busyKind is one source kind under the busy-key tests: its harness and
// its producer.
type busyKind struct {
	name string
	// setup builds the harness; limit is the broker's delivery limit to
	// set (a quorum queue's x-delivery-limit, a stream's max_deliveries).
	setup func(t *testing.T, limit int, mutate func(*config.Config)) (h *harness, publish func(id string), dead func() int64)
}

var busyKinds = []busyKind{
	{"rabbitmq-quorum", func(t *testing.T, limit int, mutate func(*config.Config)) (*harness, func(string), func() int64) {
		h := newHarness(t, mutate)
		// No dead-letter exchange: past the limit RabbitMQ drops it.
		q := h.rabbit.Queue("dptest.quorum.", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": limit})
		h.cfg.Sources[0].RabbitMQ.Queue = q
		return h, func(id string) { h.rabbit.Publish(q, amqp.Publishing{Body: envelope(id, "")}) }, func() int64 { return 0 }
	}},
	{"redis-list", func(t *testing.T, _ int, mutate func(*config.Config)) (*harness, func(string), func() int64) {
		h := newRedisHarness(t, testutil.RedisAddr(), mutate)
		return h.harness, func(id string) { h.push(envelope(id, "")) }, func() int64 { return h.llen(h.dead) }
	}},
	{"redis-stream", func(t *testing.T, limit int, mutate func(*config.Config)) (*harness, func(string), func() int64) {
		h := newRedisStreamHarness(t, func(c *config.Config) {
			c.Sources[0].Redis.MaxDeliveries = limit
			if mutate != nil {
				mutate(c)
			}
		})
		return h.harness, func(id string) { h.xadd(id, envelope(id, "")) }, func() int64 {
			return h.rq.XLen(context.Background(), h.dead).Val()
		}
	}},
}

// A key claimed elsewhere is never bounced through the broker: the
// message waits in the proxy, looked at after busy_delay and then less
// often, while the messages behind it go on; once the holder lets go it
// is forwarded once. Before, a Redis list requeued one busy key thousands
// of times a second, a quorum queue dropped it at its delivery limit and a
// stream dead-lettered it "max deliveries" without it reaching the app.
func TestBusyKeyWaitsInTheProxy(t *testing.T) {
	for _, k := range busyKinds {
		t.Run(k.name, func(t *testing.T) {
			h, publish, dead := k.setup(t, 3, nil)
			p := h.start()
			ctx := context.Background()
			holder := "other-replica-" + testutil.UniqueName("")
			if _, err := p.d.Store().Claim(ctx, storedKey("busy-1"), holder, time.Minute); err != nil {
				t.Fatal(err)
			}
			publish("busy-1")
			publish("free-1")
			testutil.Eventually(t, 10*time.Second, "the message behind the busy one forwarded", func() bool {
				return h.app.Effects()["free-1"] == 1
			})
			const hold = 3 * time.Second
			time.Sleep(hold)
			requeued, looks := p.result(t, "requeued"), p.event(t, "busy")
			t.Logf("%s: one busy key for %s: %v requeues (%.1f/s), %v claims that found it busy", k.name, hold, requeued, requeued/hold.Seconds(), looks)
			if requeued != 0 {
				t.Errorf("the busy message was requeued %v times", requeued)
			}
			// busy_delay 100ms, doubling up to lease/3 (1 s): about 5 looks.
			if looks > 8 {
				t.Errorf("the busy key was looked at %v times in %s", looks, hold)
			}
			if n := h.app.Effects()["busy-1"]; n != 0 {
				t.Fatalf("the busy key reached the app %d times while it was held", n)
			}
			if err := p.d.Store().Release(ctx, storedKey("busy-1"), holder); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "the busy message forwarded once its key was free", func() bool {
				return h.app.Effects()["busy-1"] == 1 && p.result(t, "forwarded") == 2
			})
			if n := dead(); n != 0 {
				t.Errorf("%d dead letters", n)
			}
		})
	}
}

// The loss of the waiting issue: a replica is stopped past
// shutdown_timeout while its request hangs, so the key stays claimed
// until app.max_request_time; the other replica gets the requeued message
// and finds the key busy all that time. It must wait, not bounce the
// message until the quorum queue's delivery limit drops it (or the
// stream's max_deliveries dead-letters it), and forward it once the claim
// ran out.
func TestBusyKeyAfterSIGTERMKeepsTheOnlyCopy(t *testing.T) {
	for _, k := range busyKinds {
		t.Run(k.name, func(t *testing.T) {
			h, publish, dead := k.setup(t, 3, func(c *config.Config) {
				c.ShutdownTimeout = 500 * time.Millisecond
				c.App.Timeout = 300 * time.Millisecond
				c.App.MaxRequestTime = 4 * time.Second
			})
			hung, release := make(chan struct{}), make(chan struct{})
			t.Cleanup(func() { close(release) })
			var calls atomic.Int32
			h.app.SetRespond(func(*testutil.Request, int) int {
				if calls.Add(1) == 1 {
					close(hung)
					<-release
				}
				return http.StatusOK
			})
			a := h.start()
			publish("only-1")
			<-hung
			b := h.start()
			stopped := time.Now()
			a.stop(t)
			testutil.Eventually(t, 30*time.Second, "the message forwarded by the other replica", func() bool {
				return h.app.Count() == 1 && b.result(t, "forwarded") == 1
			})
			t.Logf("%s: forwarded %.1fs after the SIGTERM, %v busy claims, %v requeues",
				k.name, time.Since(stopped).Seconds(), b.event(t, "busy"), b.result(t, "requeued"))
			if n := b.result(t, "requeued"); n != 0 {
				t.Errorf("the other replica requeued it %v times", n)
			}
			if n := dead(); n != 0 {
				t.Errorf("%d dead letters", n)
			}
		})
	}
}

// A message waiting for a busy key when the proxy stops is requeued by
// the proxy, on its own connection, before the source closes it: the
// message is back in the queue at once, and the stop is clean.
func TestBusyKeyRequeuedOnShutdown(t *testing.T) {
	for _, k := range busyKinds {
		t.Run(k.name, func(t *testing.T) {
			h, publish, _ := k.setup(t, 3, nil)
			p := h.start()
			holder := "other-replica-" + testutil.UniqueName("")
			if _, err := p.d.Store().Claim(context.Background(), storedKey("busy-1"), holder, time.Minute); err != nil {
				t.Fatal(err)
			}
			publish("busy-1")
			testutil.Eventually(t, 10*time.Second, "the message waiting", func() bool {
				return testutil.Counter(t, p.d.Registry(), "dedupe_proxy_busy_waiting_messages", nil) == 1
			})
			p.stop(t)
			if n, failed := p.result(t, "requeued"), p.event(t, "settle_failed"); n != 1 || failed != 0 {
				t.Fatalf("requeued %v times on stop, %v settles failed; want 1 and 0 (the requeue before the source closed)", n, failed)
			}
			// Taken again by the next replica, and forwarded once free.
			q := h.start()
			if err := q.d.Store().Release(context.Background(), storedKey("busy-1"), holder); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "forwarded by the next replica", func() bool {
				return h.app.Effects()["busy-1"] == 1
			})
		})
	}
}
