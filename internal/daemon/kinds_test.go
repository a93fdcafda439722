package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/memory"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A kind is its package and one row of config.Kinds: a row for the
// in-memory broker, and nothing else, makes the daemon consume it with
// the whole pipeline — each key forwarded once, the duplicates acked
// without reaching the app, a poison message dead-lettered with its
// headers — and redrive find its redriver. Not parallel: it changes the
// table for its duration.
func TestKindIsOneRow(t *testing.T) {
	q, dlq := memory.NewQueue("orders"), memory.NewQueue("orders.dead")
	saved := config.Kinds
	config.Kinds = append(append([]config.Kind(nil), saved...), config.Kind{
		Name: "memory",
		NewSource: func(s config.Source, env config.SourceEnv) (broker.Source, error) {
			return memory.New(memory.Options{Name: s.Name, Queue: q, DeadLetter: dlq, Workers: 4, Logger: env.Logger})
		},
		NewRedriver: func(s config.Source, _, _ string) (broker.Redriver, error) {
			return nil, fmt.Errorf("source %s: the memory kind has no redriver", s.Name)
		},
	})
	t.Cleanup(func() { config.Kinds = saved })

	app := testutil.NewApp(t)
	app.SetRespond(func(r *testutil.Request, _ int) int {
		if string(r.Body) == `{"meta":{"id":"poison"}}` {
			return 400
		}
		return 200
	})
	cfg, src := testConfig(app.URL)
	cfg.SeenSet.Backend = "memory"
	src.Type = "memory"
	cfg.Sources = []config.Source{src}
	d, err := New(&cfg, Deps{Logger: testLogger(t), Store: seenset.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for i := range 20 {
		q.Publish(memory.Message{Body: fmt.Appendf(nil, `{"meta":{"id":"m-%d"}}`, i%10), ContentType: "application/json"})
	}
	q.Publish(memory.Message{Body: []byte(`{"meta":{"id":"poison"}}`), ContentType: "application/json"})
	testutil.Eventually(t, 20*time.Second, "every message settled", func() bool { return q.Len() == 0 && dlq.Len() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	effects := app.Effects()
	for i := range 10 {
		if n := effects[fmt.Sprintf("m-%d", i)]; n != 1 {
			t.Errorf("key m-%d reached the app %d times with success, want 1 (effects %v)", i, n, effects)
		}
	}
	dead, _ := dlq.Get()
	if dead.Headers[broker.HeaderSource] != "orders" || dead.Headers[broker.HeaderReason] == "" || dead.Headers[broker.HeaderOriginalQueue] != "orders" {
		t.Errorf("dead letter headers %v: want the source, a reason and the original queue", dead.Headers)
	}
	if _, _, err := NewRedriver(&cfg, "orders"); err == nil || err.Error() != "source orders: the memory kind has no redriver" {
		t.Errorf("NewRedriver = %v, want the row's own error", err)
	}
}
