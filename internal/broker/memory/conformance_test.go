package memory_test

import (
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/memory"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, harness{})
}

// harness gives each case a queue and a dead-letter queue of its own.
type harness struct{}

func (harness) Kind() string { return memory.Kind }

func (harness) Features() brokertest.Features {
	// Not ordered: with several workers a requeued message is taken by
	// whichever asks next.
	return brokertest.Features{Requeues: true, DeadLetter: true}
}

func (harness) NewDestination(t *testing.T) brokertest.Destination {
	return &destination{q: memory.NewQueue("conformance." + t.Name()), dlq: memory.NewQueue("conformance.dlq")}
}

type destination struct{ q, dlq *memory.Queue }

func (d *destination) Queue() string { return d.q.Name() }
func (d *destination) Topic() string { return "" }

func (d *destination) NewSource(t *testing.T, o brokertest.SourceOptions) broker.Source {
	mo := memory.Options{Name: o.Name, Queue: d.q, Workers: o.Workers}
	if o.DeadLetter {
		mo.DeadLetter = d.dlq
	}
	s, err := memory.New(mo)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *destination) Publish(t *testing.T, msgs ...brokertest.Message) {
	for _, m := range msgs {
		d.q.Publish(memory.Message{Body: m.Body, ContentType: m.ContentType, Headers: m.Headers, MessageID: m.Key})
	}
}

func (d *destination) Cut(*testing.T) { d.q.Cut() }

func (d *destination) Revoke(t *testing.T) { t.Fatal("memory: a queue has no assignment to revoke") }

func (d *destination) DeadLetters(t *testing.T, n int, timeout time.Duration) []brokertest.DeadLetter {
	var out []brokertest.DeadLetter
	deadline := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(deadline) {
		m, ok := d.dlq.Get()
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		dl := brokertest.DeadLetter{Body: m.Body, Key: m.MessageID, Headers: map[string][]string{}}
		for k, v := range m.Headers {
			dl.Headers[k] = []string{v}
		}
		out = append(out, dl)
	}
	return out
}
