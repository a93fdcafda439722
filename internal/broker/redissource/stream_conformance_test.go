package redissource_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/brokertest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func TestStreamConformance(t *testing.T) {
	brokertest.Run(t, streamHarness{})
}

// streamHarness gives each case its own stream, group and dead-letter
// stream on the shared Redis, through a relay of its own. Headers travel
// as entry fields, the key as bq-message-id.
type streamHarness struct{}

func (streamHarness) Kind() string { return redissource.Kind }

func (streamHarness) Features() brokertest.Features {
	// Not ordered: a requeued entry waits for the next XAUTOCLAIM while
	// newer ones are read.
	return brokertest.Features{Requeues: true, DeadLetter: true}
}

func (streamHarness) NewDestination(t *testing.T) brokertest.Destination {
	q := newQueue(t, testutil.RedisAddr())
	return &streamDest{q: q, group: testutil.UniqueName("dptest-group-"), relay: testutil.NewRelay(t, testutil.RedisAddr())}
}

type streamDest struct {
	q     *queue
	group string
	relay *testutil.Relay
	read  string // last dead letter read
}

func (d *streamDest) Queue() string { return d.q.name }
func (d *streamDest) Topic() string { return "" }

func (d *streamDest) NewSource(t *testing.T, o brokertest.SourceOptions) broker.Source {
	opts := redissource.Options{
		Name:             o.Name,
		Addrs:            []string{d.relay.Addr()},
		Stream:           d.q.name,
		Group:            d.group,
		Workers:          o.Workers,
		ClaimIdle:        3 * time.Second,
		ReconnectInitial: 50 * time.Millisecond,
		ReconnectMax:     200 * time.Millisecond,
	}
	if o.DeadLetter {
		opts.DeadLetter = d.q.dead
	}
	s, err := redissource.NewStream(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *streamDest) Publish(t *testing.T, msgs ...brokertest.Message) {
	t.Helper()
	for _, m := range msgs {
		d.q.xadd(t, m)
	}
}

func (d *streamDest) Cut(*testing.T) { d.relay.Cut() }

func (d *streamDest) Revoke(t *testing.T) {
	t.Fatal("redis: a stream group has no assignment to revoke")
}

func (d *streamDest) DeadLetters(t *testing.T, n int, timeout time.Duration) []brokertest.DeadLetter {
	t.Helper()
	var out []brokertest.DeadLetter
	deadline := time.Now().Add(timeout)
	if d.read == "" {
		d.read = "0-0"
	}
	for len(out) < n && time.Now().Before(deadline) {
		ms, err := d.q.rdb.XRangeN(context.Background(), d.q.dead, "("+d.read, "+", int64(n-len(out))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, m := range ms {
			d.read = m.ID
			dl := brokertest.DeadLetter{Headers: map[string][]string{}}
			for k, v := range m.Values {
				s := fmt.Sprint(v)
				switch k {
				case "body":
					dl.Body = []byte(s)
				case redissource.FieldMessageID:
					dl.Key = s
				default:
					dl.Headers[k] = []string{s}
				}
			}
			out = append(out, dl)
		}
	}
	return out
}

// xadd is a producer: the body in field body, the key in bq-message-id,
// the content type and headers as fields of their own.
func (q *queue) xadd(t testing.TB, m brokertest.Message) {
	t.Helper()
	v := map[string]any{"body": m.Body}
	if m.Key != "" {
		v[redissource.FieldMessageID] = m.Key
	}
	if m.ContentType != "" {
		v["content-type"] = m.ContentType
	}
	for k, h := range m.Headers {
		v[k] = h
	}
	if err := q.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: q.name, Values: v}).Err(); err != nil {
		t.Fatal(err)
	}
}
