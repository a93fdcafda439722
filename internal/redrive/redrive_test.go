package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
)

// fakeRedriver "moves" n dead letters, each with key order-<i>, and
// fails after them when err is set.
type fakeRedriver struct {
	n   int
	err error
}

func (f *fakeRedriver) Redrive(_ context.Context, o broker.RedriveOptions) (broker.RedriveResult, error) {
	var res broker.RedriveResult
	for i := range f.n {
		m := &broker.Message{Body: []byte(fmt.Sprintf(`{"meta":{"id":"order-%d"}}`, i))}
		if i == f.n-1 {
			m.Body = []byte(`not json`)
		}
		o.Moved(broker.Redriven{Message: m, From: "queue orders.dead", To: "queue orders"})
		res.Moved++
	}
	return res, f.err
}

func (f *fakeRedriver) Close() error { return nil }

// fakeClock advances by step at every reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

func run(t *testing.T, n int, err error, o Options) (string, string) {
	t.Helper()
	ex, perr := keys.Parse([]string{"json:meta.id"})
	if perr != nil {
		t.Fatal(perr)
	}
	var out, progress strings.Builder
	o.Source, o.Redriver, o.Keys, o.Out, o.Progress = "orders", &fakeRedriver{n: n, err: err}, ex, &out, &progress
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0), step: 100 * time.Millisecond}
	o.now = clock.now
	if _, rerr := Run(context.Background(), o); !errors.Is(rerr, err) {
		t.Fatalf("Run: %v, want %v", rerr, err)
	}
	return out.String(), progress.String()
}

// A long run reports its count and rate every ProgressEvery on the
// progress writer, apart from the per-message lines.
func TestProgress(t *testing.T) {
	out, progress := run(t, 50, nil, Options{ProgressEvery: time.Second})
	lines := strings.Split(strings.TrimSpace(progress), "\n")
	// 0.1 s per message: a line every 10 messages, at 10/s.
	if len(lines) != 5 || lines[0] != "redrive orders: moved 10 so far, 10/s" || lines[4] != "redrive orders: moved 50 so far, 10/s" {
		t.Errorf("progress:\n%s", progress)
	}
	if n := strings.Count(out, "\n"); n != 51 || !strings.HasSuffix(out, "redrive orders: moved 50 dead letter(s)\n") {
		t.Errorf("out has %d lines:\n%s", n, out)
	}
}

// -q: the summary only, no line per message, no progress.
func TestQuiet(t *testing.T) {
	out, progress := run(t, 50, nil, Options{Quiet: true, ProgressEvery: time.Second})
	if out != "redrive orders: moved 50 dead letter(s)\n" || progress != "" {
		t.Errorf("quiet: out %q, progress %q", out, progress)
	}
}

// -o json: one object per dead letter and one for the summary, the
// error included.
func TestJSON(t *testing.T) {
	boom := errors.New("broker gone")
	out, _ := run(t, 3, boom, Options{JSON: true, DryRun: true})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines:\n%s", out)
	}
	var m messageLine
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m != (messageLine{Action: "would_move", Key: "order-0", From: "queue orders.dead", To: "queue orders"}) {
		t.Errorf("first line %s (%v)", lines[0], err)
	}
	m = messageLine{}
	if err := json.Unmarshal([]byte(lines[2]), &m); err != nil || m.Key != "" || m.NoKey == "" {
		t.Errorf("a dead letter without a key: %s (%v)", lines[2], err)
	}
	var s summaryLine
	if err := json.Unmarshal([]byte(lines[3]), &s); err != nil || s.Source != "orders" || !s.DryRun || s.Moved != 3 || s.Error != "broker gone" || s.Seconds <= 0 {
		t.Errorf("summary %s (%v)", lines[3], err)
	}
}
