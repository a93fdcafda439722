package redissource_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func TestConformance(t *testing.T) {
	brokertest.Run(t, harness{})
}

// harness gives each case its own queue (and so its own hash tag and
// every key under it) on the shared Redis, reached through a relay of
// its own so a cut drops only that case's connections.
type harness struct{}

func (harness) Kind() string { return redissource.Kind }

func (harness) Features() brokertest.Features {
	// Not ordered: several workers reserve from one list, and a requeued
	// element goes to the tail. Body only: the element is the message.
	return brokertest.Features{Requeues: true, DeadLetter: true, BodyOnly: true}
}

func (harness) NewDestination(t *testing.T) brokertest.Destination {
	q := newQueue(t, testutil.RedisAddr())
	return &destination{q: q, relay: testutil.NewRelay(t, testutil.RedisAddr())}
}

type destination struct {
	q     *queue
	relay *testutil.Relay
}

func (d *destination) Queue() string { return d.q.name }
func (d *destination) Topic() string { return "" }

func (d *destination) NewSource(t *testing.T, o brokertest.SourceOptions) broker.Source {
	opts := redissource.Options{
		Name:             o.Name,
		Addrs:            []string{d.relay.Addr()},
		Queue:            d.q.name,
		Workers:          o.Workers,
		HeartbeatTTL:     3 * time.Second,
		ReconnectInitial: 50 * time.Millisecond,
		ReconnectMax:     200 * time.Millisecond,
	}
	if o.DeadLetter {
		opts.DeadLetter = d.q.dead
	}
	s, err := redissource.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *destination) Publish(t *testing.T, msgs ...brokertest.Message) {
	t.Helper()
	for _, m := range msgs {
		d.q.push(t, m.Body)
	}
}

func (d *destination) Cut(*testing.T) { d.relay.Cut() }

func (d *destination) Revoke(t *testing.T) { t.Fatal("redis: a list has no assignment to revoke") }

func (d *destination) DeadLetters(t *testing.T, n int, timeout time.Duration) []brokertest.DeadLetter {
	t.Helper()
	var out []brokertest.DeadLetter
	deadline := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(deadline) {
		v, err := d.q.rdb.LPop(context.Background(), d.q.dead).Bytes()
		if err == redis.Nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		why, err := redissource.DeadLetterReason(context.Background(), d.q.rdb, d.q.dead, v)
		if err != nil {
			t.Fatal(err)
		}
		dl := brokertest.DeadLetter{Body: v, Headers: map[string][]string{}}
		for k, v := range why {
			dl.Headers[k] = []string{v}
		}
		out = append(out, dl)
	}
	return out
}
