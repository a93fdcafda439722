package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// bodyKey orders a keyless record by its body up to a '#', as the daemon
// orders it by its dedupe key: "id#n" bodies share the key "id".
func bodyKey(m *broker.Message) string {
	k, _, _ := strings.Cut(string(m.Body), "#")
	return k
}

// hangs is a handler that holds one message until released (or lost)
// and acks every other, counting what it saw.
type hangs struct {
	hold    string // body of the message held
	release chan struct{}

	mu      sync.Mutex
	seen    map[string]int // body → deliveries
	running map[string]bool
	bad     []string
}

func newHangs(hold string) *hangs {
	return &hangs{hold: hold, release: make(chan struct{}), seen: map[string]int{}, running: map[string]bool{}}
}

func (h *hangs) handle(d broker.Delivery) {
	body := string(d.Message().Body)
	k := bodyKey(d.Message())
	h.mu.Lock()
	if h.running[k] {
		h.bad = append(h.bad, fmt.Sprintf("%s: at the handler while an earlier message of key %q runs", body, k))
	}
	h.running[k] = true
	h.seen[body]++
	h.mu.Unlock()
	if body == h.hold {
		select {
		case <-h.release:
		case <-d.Lost():
			h.mu.Lock()
			h.running[k] = false
			h.mu.Unlock()
			_ = d.Requeue(context.Background())
			return
		}
	}
	h.mu.Lock()
	h.running[k] = false
	h.mu.Unlock()
	if err := d.Ack(context.Background()); err != nil {
		panic(err)
	}
}

func (h *hangs) count(body string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[body]
}

func (h *hangs) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// Key order with keyless records: one message that hangs holds only its
// own dedupe key. The other messages of its partition reach the handler
// and are acked meanwhile, the one behind it with the same dedupe key
// waits for it, the commit stays on the hung message, and once it is
// let go everything is committed, each message handed over once.
func TestKeylessHangHoldsOnlyItsKey(t *testing.T) {
	for _, mode := range []string{"sets", "batches"} {
		t.Run(mode, func(t *testing.T) {
			const parts, per = 3, 20
			c := kafkatest.Start(t, parts, []string{"orders"})
			var recs []kafkatest.Record
			for p := range parts {
				for i := range per {
					body := fmt.Sprintf("p%d-%d", p, i)
					if p == 0 && i == 9 {
						body = "p0-2#again" // the dedupe key of the hung one
					}
					recs = append(recs, kafkatest.Record{Partition: p, Value: []byte(body)})
				}
			}
			c.Produce(t, "orders", recs...)
			o := options(c, "orders")
			o.Ordering = kafka.OrderingKey
			o.OrderKey = bodyKey
			h := newHangs("p0-2")
			if mode == "sets" {
				startWith(t, o, func(ctx context.Context, s *kafka.Source) error {
					// A set handler that handles each message on its own
					// goroutine, as the pipeline's does.
					set := func(ds []broker.Delivery) {
						var wg sync.WaitGroup
						for _, d := range ds {
							wg.Go(func() { h.handle(d) })
						}
						wg.Wait()
					}
					return s.RunSets(ctx, func(ds []broker.Delivery) {
						for _, d := range ds {
							h.handle(d)
						}
					}, set)
				})
			} else {
				start(t, o, h.handle)
			}

			// Every message but the hung one and the one of its key
			// behind it is handed over while it hangs.
			testutil.Eventually(t, 20*time.Second, "the others handled while one hangs",
				func() bool { return h.distinct() == parts*per-1 })
			time.Sleep(500 * time.Millisecond) // several commit intervals
			got := c.Committed(t, o.Group, "orders", parts)
			if got[0] != 2 {
				t.Fatalf("partition 0 committed at %d while offset 2 hangs, want 2", got[0])
			}
			if got[1] != per || got[2] != per {
				t.Fatalf("other partitions committed at %v, want %d", got, per)
			}
			if n := h.count("p0-2#again"); n != 0 {
				t.Fatalf("a message with the hung one's key reached the handler while it hangs")
			}

			close(h.release)
			testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(parts, per)))
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.seen) != parts*per {
				t.Fatalf("%d of %d messages handled", len(h.seen), parts*per)
			}
			for body, n := range h.seen {
				if n != 1 {
					t.Errorf("%s handed over %d times", body, n)
				}
			}
			if len(h.bad) > 0 {
				t.Fatalf("key order broken: %v", h.bad)
			}
		})
	}
}
