package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/pipeline"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// 100 messages without a key in a burst give one line at once and one
// that counts the rest, each naming the source, the rules tried and why
// the last failed.
func TestNoKeyLinesAreRateLimited(t *testing.T) {
	var logs testutil.LogBuffer
	ex, err := keys.Parse([]string{"header:x-id", "json:meta.id"})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: seenset.NewMemory(), Forwarder: &script{res: []forward.Result{ok}}, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 1, BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond, CommitAttempts: 1, Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Keys: ex, Requeues: true})
	for i := range 100 {
		d := newRecDelivery("")
		d.msg.Body = []byte(fmt.Sprintf(`{"n":%d}`, i))
		h(d)
	}
	testutil.Eventually(t, 5*time.Second, "the held-back no-key lines are counted", func() bool {
		return len(logs.With(t, "", "no usable key")) == 2
	})
	lines := logs.With(t, "INFO", "no usable key")
	total := 0
	for _, r := range lines {
		if r["source"] != "s" || r["rules"] != "header:x-id, json:meta.id" {
			t.Errorf("line does not name the source and rules: %v", r)
		}
		// A line for a message counts it and those held back before it;
		// the closing line (no reason: no message of its own) only those.
		total += int(r["suppressed"].(float64))
		if _, own := r["reason"]; own {
			total++
		}
	}
	if lines[0]["reason"] != "absent" || lines[0]["suppressed"].(float64) != 0 {
		t.Errorf("first line: %v", lines[0])
	}
	if total != 100 {
		t.Errorf("lines account for %d messages, want 100:\n%s", total, logs.String())
	}
	time.Sleep(1100 * time.Millisecond)
	if n := len(logs.With(t, "", "no usable key")); n != 2 {
		t.Errorf("%d no-key lines after the burst, want 2", n)
	}
}

// Redis down for several messages, then back: one line each way, and the
// per-message lines about it are debug.
func TestStoreDownAndUpLoggedOnce(t *testing.T) {
	srv := testutil.StartRedis(t)
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}, Prefix: testutil.UniqueName("logs-") + ":",
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs testutil.LogBuffer
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: &script{res: []forward.Result{ok}}, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, CommitAttempts: 3, Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	h(newRecDelivery("before")) // up: nothing to report
	srv.Kill()
	var wg sync.WaitGroup
	ds := make([]*recDelivery, 10)
	for i := range ds {
		ds[i] = newRecDelivery(fmt.Sprint("k", i))
		wg.Add(1)
		go func() { defer wg.Done(); h(ds[i]) }()
	}
	testutil.Eventually(t, 10*time.Second, "claims failing", func() bool {
		return len(logs.With(t, "DEBUG", "seen-set claim failed")) >= 20
	})
	srv.Restart()
	wg.Wait()
	for _, d := range ds {
		if got := d.settled(); len(got) != 1 || got[0] != "ack" {
			t.Fatalf("settled %v, want ack", got)
		}
	}
	h(newRecDelivery("after")) // successes go on: the "back" line follows once they settled
	testutil.Eventually(t, 10*time.Second, "the back line", func() bool {
		h(newRecDelivery(fmt.Sprint("after-", time.Now().UnixNano())))
		return len(logs.With(t, "", "seen-set reachable again")) > 0
	})
	down := logs.With(t, "", "seen-set unreachable")
	up := logs.With(t, "", "seen-set reachable again")
	if len(down) != 1 || len(up) != 1 || down[0]["level"] != "WARN" || up[0]["level"] != "INFO" {
		t.Fatalf("%d down and %d up lines, want 1 and 1:\n%s", len(down), len(up), logs.String())
	}
	if down[0]["err"] == "" || up[0]["failures"].(float64) < 10 {
		t.Errorf("down %v, up %v", down[0], up[0])
	}
	if n := len(logs.With(t, "WARN", "seen-set claim failed")); n != 0 {
		t.Errorf("%d per-message warnings while Redis was down", n)
	}
}

// Without a health check the pipeline itself reports the app going away
// and coming back, once each way.
func TestAppDownAndUpLoggedOnce(t *testing.T) {
	var logs testutil.LogBuffer
	f := &script{res: []forward.Result{ok, refused, refused, refused, refused, refused, refused, ok}}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: seenset.NewMemory(), Forwarder: f, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 2, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, CommitAttempts: 1, Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "kafka"})
	for i := range 3 {
		h(newRecDelivery(fmt.Sprint("a", i)))
	}
	testutil.Eventually(t, 5*time.Second, "the back line", func() bool {
		return len(logs.With(t, "", "app answers again")) > 0
	})
	down := logs.With(t, "WARN", "app unreachable")
	up := logs.With(t, "INFO", "app answers again")
	if len(down) != 1 || len(up) != 1 || up[0]["failures"].(float64) != 6 {
		t.Fatalf("%d down and %d up lines, want 1 and 1:\n%s", len(down), len(up), logs.String())
	}
	if n := len(logs.With(t, "INFO", "app failed, will retry")); n != 0 {
		t.Errorf("%d per-message info lines for a refused connection", n)
	}
	// Field names: attempt, reason, err — never try/why/attempts.
	for _, r := range logs.Records(t) {
		for _, bad := range []string{"try", "why", "attempts", "error"} {
			if _, has := r[bad]; has {
				t.Errorf("field %q in %v", bad, r)
			}
		}
	}
}

// A key this process left claimed (its request timed out and may still
// run at the app) is busy for another delivery of it; the log says it is
// held here. A key claimed by another process is another replica's. Both
// wait in the proxy; a drain requeues them with that reason.
func TestBusyKeyHeldHereIsNotAnotherReplica(t *testing.T) {
	var logs testutil.LogBuffer
	st := seenset.NewMemory()
	timeout := forward.Result{Outcome: forward.Retryable, Reason: "timeout", MayBeRunning: true}
	f := &script{res: []forward.Result{timeout, ok}}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: st, Forwarder: f, Lease: time.Minute, TTL: time.Hour,
		MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, BusyDelay: time.Millisecond,
		CommitAttempts: 1, Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	first := newRecDelivery("k1")
	done := make(chan struct{})
	go func() { defer close(done); h(first) }()
	testutil.Eventually(t, 5*time.Second, "the first request timed out", func() bool {
		return len(logs.With(t, "", "no answer from the app")) == 1
	})
	second := newRecDelivery("k1")
	h(second)

	// Claimed elsewhere: another replica.
	if _, err := st.Claim(context.Background(), stored+"k2", "other-process", time.Minute); err != nil {
		t.Fatal(err)
	}
	third := newRecDelivery("k2")
	h(third)
	if len(second.settled()) != 0 || len(third.settled()) != 0 {
		t.Fatalf("busy deliveries settled %v and %v while the keys were held", second.settled(), third.settled())
	}
	p.Drain()
	<-done
	testutil.Eventually(t, 5*time.Second, "the waiting deliveries requeued", func() bool {
		return len(logs.With(t, "DEBUG", "requeued")) == 3
	})
	reasons := map[string]bool{}
	for _, r := range logs.With(t, "DEBUG", "requeued") {
		reasons[r["reason"].(string)] = true
	}
	for _, want := range []string{
		"stopped while waiting: key busy: claimed by this replica, whose last request for it may still run at the app",
		"stopped while waiting: key busy on another replica",
	} {
		if !reasons[want] {
			t.Errorf("no requeue with reason %q in %v", want, reasons)
		}
	}
}

// failingAck is a delivery whose ack fails; with dies, its channel dies
// as it acks, as when RabbitMQ drops the connection under it.
type failingAck struct {
	*recDelivery
	dies bool
}

func (d failingAck) Ack(context.Context) error {
	if d.dies {
		close(d.lost)
	}
	return errors.New("channel/connection is not open")
}

// An ack that fails because the delivery's channel is gone is one of many
// the broker's own line covers: debug. One that fails on a live delivery
// is a warning.
func TestAckFailureOnLostDeliveryIsDebug(t *testing.T) {
	var logs testutil.LogBuffer
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: seenset.NewMemory(), Forwarder: &script{res: []forward.Result{ok}}, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 1, BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond, CommitAttempts: 1, Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Requeues: true})
	h(failingAck{recDelivery: newRecDelivery("live")})
	h(failingAck{recDelivery: newRecDelivery("lost"), dies: true})
	lines := logs.With(t, "", "ack failed")
	if len(lines) != 2 || lines[0]["key"] != "live" || lines[0]["level"] != "WARN" || lines[1]["key"] != "lost" || lines[1]["level"] != "DEBUG" {
		t.Fatalf("ack failure lines:\n%s", logs.String())
	}
}

// A message given up on before it reached the app says why, and carries
// no status or reason of an answer it never had.
func TestTooLargeLineHasNoAnswer(t *testing.T) {
	var logs testutil.LogBuffer
	ex, err := keys.Parse([]string{"json:meta.id"})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: seenset.NewMemory(), Forwarder: &script{res: []forward.Result{ok}}, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 1, BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond, CommitAttempts: 1, MaxBodyBytes: 8,
		Logger: logs.JSONLogger(),
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Keys: ex})
	d := newRecDelivery("")
	d.msg.Body = []byte(`{"meta":{"id":"big-1"}}`)
	h(d)
	lines := logs.With(t, "WARN", "body too large")
	if len(lines) != 1 {
		t.Fatalf("%d 'body too large' lines, want 1:\n%s", len(lines), logs.String())
	}
	for _, k := range []string{"status", "reason"} {
		if v, ok := lines[0][k]; ok {
			t.Errorf("the line has %s=%v, an answer the app never gave", k, v)
		}
	}
	if lines[0]["bytes"] != float64(len(d.msg.Body)) {
		t.Errorf("line %v, want the body's size", lines[0])
	}
}

// A message given up on before it had a claim (here: too large) on a
// source that requeues and has no dead letter bounces too: the wait
// before each give-back grows with the times it came back, by its key
// when the rules find one, else by its message id.
func TestGivenUpBeforeAClaimBouncesWithAGrowingWait(t *testing.T) {
	ex, err := keys.Parse([]string{"json:meta.id"})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{
		Consumer: "c", Store: seenset.NewMemory(), Forwarder: &script{res: []forward.Result{ok}}, Lease: time.Second, TTL: time.Hour,
		MaxAttempts: 1, BackoffInitial: 20 * time.Millisecond, BackoffMax: 160 * time.Millisecond, CommitAttempts: 1,
		MaxBodyBytes: 8,
	})
	h := p.Handler(pipeline.SourceOptions{Name: "s", Kind: "rabbitmq", Keys: ex, Requeues: true})
	for _, tc := range []struct{ name, body, id string }{
		{"by key", `{"meta":{"id":"big-1"}}`, ""},
		{"by message id", `not json, and long`, "mid-1"},
	} {
		// Lower bounds only: a loaded machine makes a wait longer.
		want := 20 * time.Millisecond
		for k := 1; k <= 5; k++ {
			d := newRecDelivery("")
			d.msg.Body, d.msg.MessageID = []byte(tc.body), tc.id
			d.dlErr = broker.ErrNoDeadLetter
			start := time.Now()
			h(d)
			if took := time.Since(start); took < want*9/10 {
				t.Errorf("%s: give-back %d took %s, want at least %s", tc.name, k, took, want)
			}
			if got := fmt.Sprint(d.settled()); got != "[requeue]" {
				t.Fatalf("%s: settled %s, want [requeue]", tc.name, got)
			}
			want = min(2*want, 160*time.Millisecond)
		}
	}
}
